"""`parasim calibrate`: measure this machine and write the `local` hardware preset.

    OPENBLAS_NUM_THREADS=1 parasim calibrate [--output PATH] [--ray] [--links local|ray] [--json]

Measures numpy matmul FLOP/s by size (float64, float32), the effective training rate of a small
real run, memory-copy bandwidth, and the alpha-beta fit of the LocalRuntime's (and with --ray the
Ray runtime's) transfers; writes ~/.parasim/local.json (or --output PATH), which
`hardware.get_hardware("local")` then reads. One BLAS thread (the environment variable above)
keeps timings stable on a shared machine.
"""

from __future__ import annotations

import json
import os

from ..calibrate import measure_local, save_local
from ..errors import ParasimError


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine and write the `local` hardware preset")
    p.add_argument("--output", default=None, metavar="PATH", help="where to write (default ~/.parasim/local.json)")
    p.add_argument("--ray", action="store_true", help="also measure the Ray runtime's transfers (starts Ray)")
    p.add_argument("--links", default="local", choices=("local", "ray"),
                   help="whose link fit the preset stores (ray needs --ray)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    ray, links = bool(getattr(args, "ray", False)), getattr(args, "links", "local")
    if links == "ray" and not ray:
        raise ParasimError("--links ray needs --ray (the Ray runtime must be measured to store its links)")
    got = measure_local(ray=ray, links=links)
    path = save_local(got["preset"], getattr(args, "output", None))
    meas = got["measurements"]
    if getattr(args, "json", False):
        print(json.dumps({"path": str(path), "preset": got["preset"], "measurements": meas}))
        return 0
    print(f"wrote {path}")
    print(f"  training rate {meas['training_rate_flops_per_s'] / 1e9:.3g} GFLOP/s fp64 (stored peak = rate / 0.8)")
    for dt, rates in meas["matmul_flops_per_s"].items():
        print(f"  matmul {dt}: " + ", ".join(f"n={n} {r / 1e9:.3g}" for n, r in rates.items()) + " GFLOP/s")
    print(f"  memory copy {meas['copy_bandwidth_Bps'] / 1e9:.3g} GB/s")
    for k, f in meas["links"].items():
        print(f"  {k} runtime link: {f['latency_s'] * 1e6:.3g} us + S / {f['bandwidth_Bps'] / 1e9:.4g} GB/s "
              f"(rms {f['residual_rel']:.1%})")
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        print("  note: set OPENBLAS_NUM_THREADS=1 for stable timings on a shared machine")
    return 0
