"""`parasim memory`: ZeRO model-state memory per device (Rajbhandari et al. 2020).

    parasim memory --params 7.5B --dp 64 --zero 3 --json
    {"model_state_bytes_per_device": 1875000000.0, ...}
"""

from __future__ import annotations

import json
import math
import re

from ..cost.memory import PRECISION_BYTES, model_state_bytes_per_device
from ..errors import ParasimError
from ..units import fmt_bytes

MIN_PARAMS, MAX_PARAMS = 1.0, 1e16  # at least one parameter; 10^16 is 10^4 x today's largest models
_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text) -> float:
    """'7.5e9', '7.5B', '175M', '1T', 1000 -> a positive count (B = G = 1e9)."""
    s = str(text).strip().upper().replace("_", "")
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:E[+-]?[0-9]+)?)\s*([KMBGT]?)", s)
    if not match:
        raise ParasimError(f"cannot read a parameter count from {text!r}; write e.g. 7.5e9 or 7.5B")
    value = float(match.group(1)) * _SUFFIX[match.group(2)]
    if not (MIN_PARAMS <= value <= MAX_PARAMS and math.isfinite(value)):
        raise ParasimError(f"parameter count must be between {MIN_PARAMS:g} and {MAX_PARAMS:g}, got {text!r}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser("memory", help="model-state memory per device under ZeRO stages 0-3")
    p.add_argument("--params", required=True, help="parameter count Psi: 7.5e9, 7.5B, 175M, 1T")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size N_d (default 1)")
    p.add_argument("--zero", type=int, default=0, help="ZeRO stage 0-3 (default 0)")
    p.add_argument("--precision", default="mixed", choices=sorted(PRECISION_BYTES),
                   help="mixed: 2+2+12 bytes/param (default); fp32: 4+4+8")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    params = parse_count(getattr(args, "params"))
    dp, zero = int(getattr(args, "dp", 1)), int(getattr(args, "zero", 0))
    precision = getattr(args, "precision", "mixed")
    if dp < 1:
        raise ParasimError(f"--dp must be >= 1, got {dp}")
    nbytes = model_state_bytes_per_device(params, dp, zero, precision)
    stages = {str(z): model_state_bytes_per_device(params, dp, z, precision) for z in range(4)}
    if getattr(args, "json", False):
        print(json.dumps({"model_state_bytes_per_device": nbytes, "params": params, "dp": dp,
                          "zero_stage": zero, "precision": precision, "all_stages_bytes": stages}))
        return 0
    print(f"Psi = {params:.4g} parameters, N_d = {dp}, {precision} precision")
    for z, b in stages.items():
        mark = "  <-" if int(z) == zero else ""
        print(f"  ZeRO stage {z}: {fmt_bytes(b)} per device{mark}")
    return 0
