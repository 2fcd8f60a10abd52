"""`parasim calibrate`: measure this machine and write the `local` hardware preset.

    parasim calibrate [--output PATH] [--ray] [--links local|ray] [--json]

Measures numpy matmul FLOP/s by size (float64, float32), the effective training rate of a small
real run, memory-copy bandwidth, and the alpha-beta fit of the LocalRuntime's (and with --ray the
Ray runtime's) transfers; writes ~/.parasim/local.json (or --output PATH), which
`hardware.get_hardware("local")` then reads. BLAS is pinned to one thread (PINNED_BLAS: an emulated
device is one thread, and timings are then stable on a shared machine): BLAS reads its thread count
when numpy loads, so unless the environment already pins it the command measures in a fresh
interpreter that does. Each stage of the measurement is reported on stderr as it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..blas import PINNED_BLAS
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
    if any(os.environ.get(k) != v for k, v in PINNED_BLAS.items()):
        argv = ["calibrate", "--links", links] + (["--ray"] if ray else []) + (["--json"] if args.json else []) + \
            (["--output", args.output] if args.output else [])
        return subprocess.call([sys.executable, "-m", "simulator", *argv], env={**os.environ, **PINNED_BLAS})
    got = measure_local(ray=ray, links=links, progress=lambda stage: print(f"calibrate: {stage}", file=sys.stderr,
                                                                              flush=True))
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
              f"(rms {f['residual_rel']:.1%})" + (f"; {f['note']}" if f.get("note") else ""))
    print("  BLAS threads: 1")
    return 0
