"""`parasim memory`: memory per device, per component, as Megatron-LM and DeepSpeed estimate it.

    parasim memory --params 7.5B --dp 64 --zero 3 --json            # ZeRO paper, model states only
    parasim memory --model llama3-8b --gpus 8 --tensor-model-parallel-size 2 --sequence-parallel \\
        --recompute-granularity selective --use-distributed-optimizer --json
    parasim memory --model llama3-70b --deepspeed --gpus-per-node 8 --nodes 4

With a model (a preset and/or Megatron-LM's model flags), the configuration is given with
Megatron-LM's own flags (`simulator.cost.megatron_args`) and the peak memory of the most loaded
device is reported per component (`simulator.cost.memory_report`); `--deepspeed` prints DeepSpeed's
ZeRO-2/3 estimator rows (`simulator.cost.deepspeed_memory`). JSON: `memory` holds the components.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

from ..cost.assumptions import assumptions_of, format_assumptions
from ..cost.deepspeed_memory import deepspeed_estimates
from ..cost.hardware import hardware_names
from ..cost.megatron_args import megatron_run, parse_megatron_args
from ..cost.memory import PRECISION_BYTES, model_state_bytes_per_device
from ..cost.memory_report import memory_report
from ..cost.model_presets import model_names
from ..errors import ParasimError
from ..units import fmt_bytes
from .simulate import add_stack_flag, own_stack_flags

MIN_PARAMS, MAX_PARAMS = 1.0, 1e16  # at least one parameter; 10^16 is 10^4 x today's largest models
UNITLESS_MIN = 1e6  # a bare count below a million parameters is a forgotten unit (7.5 -> 7.5B)
_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text) -> float:
    """'7.5e9', '7.5B', '175M', '1T', '1K', 7500000000 -> a positive count (B = G = 1e9).

    A bare number below UNITLESS_MIN is refused as ambiguous: `--params 7.5` is almost surely
    7.5B with the unit forgotten, not a model of 7.5 parameters; write '7.5B' (or '7.5K')."""
    s = str(text).strip().upper().replace("_", "")
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:E[+-]?[0-9]+)?)\s*([KMBGT]?)", s)
    if not match:
        raise ParasimError(f"cannot read a parameter count from {text!r}; write e.g. 7.5e9 or 7.5B")
    number, unit = match.group(1), match.group(2)
    value = float(number) * _SUFFIX[unit]
    if not unit and value < UNITLESS_MIN:
        raise ParasimError(f"{number} parameters? write {number}B (billions) or {number}M (millions); "
                           f"a count without a unit must be at least {UNITLESS_MIN:g}")
    if not (MIN_PARAMS <= value <= MAX_PARAMS and math.isfinite(value)):
        raise ParasimError(f"parameter count must be between {MIN_PARAMS:g} and {MAX_PARAMS:g}, got {text!r}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser("memory", help="memory per device per component (Megatron-LM, ZeRO, DeepSpeed estimators); "
                                      "takes Megatron-LM's flags")
    p.add_argument("--params", default=None, help="parameter count Psi for the ZeRO formula alone, with its unit: 7.5B, 350M, 7.5e9")
    p.add_argument("--dp", type=int, default=1, help="with --params: data-parallel size N_d (default 1)")
    p.add_argument("--zero", type=int, default=None, help="ZeRO stage 0-3 (with a model: overrides "
                   "--use-distributed-optimizer, which is stage 1)")
    p.add_argument("--precision", default=None, choices=sorted(PRECISION_BYTES),
                   help="bytes per parameter: megatron 2+4+12 (default with a model), mixed 2+2+12 (default with "
                        "--params), fp32 4+4+8, fp64 8+8+16")
    p.add_argument("--model", default=None, help=f"model preset: {', '.join(model_names())}; Megatron-LM "
                   "model flags (--num-layers ...) override its fields or describe a custom model")
    p.add_argument("--gpus", type=int, default=None, help="world size (default tp x pp x cp)")
    p.add_argument("--hardware", default=None, help=f"compare with this device's memory: {', '.join(hardware_names())}")
    p.add_argument("--deepspeed", action="store_true", help="DeepSpeed's ZeRO-2/3 estimator rows for the model")
    p.add_argument("--gpus-per-node", dest="gpus_per_node", type=int, default=8, help="with --deepspeed (default 8)")
    p.add_argument("--nodes", type=int, default=1, help="with --deepspeed (default 1)")
    add_stack_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, megatron_flags=True)


def _zero_formula(args) -> int:
    params = parse_count(args.params)
    dp, zero = int(args.dp), int(args.zero or 0)
    precision = args.precision or "mixed"
    if dp < 1:
        raise ParasimError(f"--dp must be >= 1, got {dp}")
    nbytes = model_state_bytes_per_device(params, dp, zero, precision)
    stages = {str(z): model_state_bytes_per_device(params, dp, z, precision) for z in range(4)}
    if args.json:
        source = "flag" if args.precision else "default (the ZeRO paper's mixed precision)"
        print(json.dumps({"model_state_bytes_per_device": nbytes, "params": params, "dp": dp, "zero_stage": zero,
                          "precision": precision, "all_stages_bytes": stages,
                          "assumptions": {"recipe": {"value": precision, "source": source}},
                          "memory": {"model_state_bytes": nbytes, "activation_bytes": 0.0}}))
        return 0
    print(f"Psi = {params:.4g} parameters, N_d = {dp}, {precision} precision")
    for z, b in stages.items():
        print(f"  ZeRO stage {z}: {fmt_bytes(b)} per device{'  <-' if int(z) == zero else ''}")
    return 0


def _deepspeed(args, model) -> int:
    rows = deepspeed_estimates(model, args.gpus_per_node, args.nodes)
    if args.json:
        print(json.dumps({"model": model.name, "params": model.params(), "gpus_per_node": args.gpus_per_node,
                          "nodes": args.nodes, "deepspeed": [r.as_dict() for r in rows]}))
        return 0
    print(f"{model!r}: DeepSpeed's model-state estimates, {args.nodes} node(s) x {args.gpus_per_node} GPUs")
    print("  per CPU     per GPU     options")
    for r in rows:
        opts = (f"ZeRO-{r.stage} offload_param={'cpu' if r.offload_param else 'none'}, "
                f"offload_optimizer={'cpu' if r.offload_optimizer else 'none'}"
                + ("" if r.zero_init is None else f", zero_init={int(r.zero_init)}"))
        print(f"  {fmt_bytes(r.cpu_bytes):>10}  {fmt_bytes(r.gpu_bytes):>10}  {opts}")
    return 0


_DEFAULTS = {"params": None, "dp": 1, "zero": None, "precision": None, "model": None, "gpus": None, "hardware": None,
             "deepspeed": False, "gpus_per_node": 8, "nodes": 1, "json": False, "megatron_argv": None}


def run(args) -> int:
    for name, default in _DEFAULTS.items():      # callers may pass a bare Namespace
        if not hasattr(args, name):
            setattr(args, name, default)
    extra = list(args.megatron_argv or [])
    if args.params is not None:
        if extra or args.model or args.deepspeed or getattr(args, "stack", None):
            raise ParasimError("--params computes the ZeRO formula alone; give no model, Megatron flags, --deepspeed "
                               "or --stack")
        return _zero_formula(args)
    mega = parse_megatron_args(extra)
    run_ = megatron_run(mega, gpus=args.gpus, model=args.model)
    if args.deepspeed:
        return _deepspeed(args, run_.model)
    cfg = run_.config
    if args.zero is not None:
        cfg = replace(cfg, zero_stage=int(args.zero))
    A = replace(run_.assumptions, recipe=args.precision or run_.recipe, **own_stack_flags(args)).resolved(run_.model)
    mem = memory_report(run_.model, cfg, args.hardware, recipe=A.recipe, flash_attention=A.flash_attention)
    stated = assumptions_of(run_.model, A, cfg, door="flag")
    if args.json:
        print(json.dumps({"model": run_.model.name, "params": run_.model.params(), "config": repr(cfg),
                          "precision": A.recipe, "flash_attention": A.flash_attention, "assumptions": stated,
                          "memory": mem.as_dict(), "ignored": list(run_.ignored), "notes": list(run_.notes)}))
        return 0
    print(f"{run_.model!r}\n{cfg!r}")
    parts = (("parameters", mem.parameter_bytes), ("gradients", mem.gradient_bytes),
             ("optimizer states", mem.optimizer_bytes), ("activations", mem.activation_bytes),
             ("output layer (logits)", mem.logits_bytes), ("communication buffers", mem.buffer_bytes),
             ("temporaries (Megatron 5%)", mem.allowance_bytes))
    for name, value in parts:
        if value:
            print(f"  {name:26s} {fmt_bytes(value):>10}")
    cap = "" if math.isinf(mem.capacity_bytes) else f" of {fmt_bytes(mem.capacity_bytes)}" + (
        "  OUT OF MEMORY" if mem.oom else f" ({fmt_bytes(mem.capacity_bytes - mem.total_bytes)} free)")
    print(f"  {'total (stage ' + str(mem.stage) + ')':26s} {fmt_bytes(mem.total_bytes):>10}{cap}")
    print(format_assumptions(stated))
    for line in run_.notes:
        print(f"  note: {line}")
    if run_.ignored:
        print(f"  ignored (no effect on memory): {' '.join(run_.ignored)}")
    return 0
