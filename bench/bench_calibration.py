"""Calibrate this machine, then predict real training runs with the calibrated `local` preset.

    python bench/bench_calibration.py [--output PATH]     (default: a temporary file, not ~/.parasim)

Prints the measured rates and links, then for each configuration the clock's predicted time of
the run beside the measured wall time (Trace.wall_time_s, best of --repeats runs) and their ratio.
The LocalRuntime runs the devices one after another in this process, so the prediction for it is
the devices' work end to end (`predicted_vs_measured(..., runtime="local")`), not the makespan. Target: within 30 %
(ratio 0.7-1.3) for compute-heavy runs. The machine may be shared: rerun when ratios wander.
"""

from __future__ import annotations

import os

# One BLAS thread per process, set before numpy loads: on a small shared machine OpenBLAS's
# spinning thread pool makes the same run take 1 s or 18 s; with one thread runs agree within ~30 %.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from simulator.calibrate import measure_local, predicted_vs_measured, save_local  # noqa: E402
from simulator.cost.device_model import HardwareDeviceModel  # noqa: E402
from simulator.cost.hardware import load_local  # noqa: E402
from simulator.models import GPTConfig  # noqa: E402
from simulator.parallel.config import TrainConfig  # noqa: E402

try:  # noqa: E402
    from simulator.training import train
except ImportError:
    from simulator.training import train

RUNS = (("single", 1, {}), ("dp", 2, {}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", default=None)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="best of this many runs per configuration")
    args = ap.parse_args()
    path = args.output or tempfile.mkstemp(suffix=".json")[1]
    t0 = time.perf_counter()
    got = measure_local(repeats=2)
    save_local(got["preset"], path)
    meas = got["measurements"]
    print(f"calibration ({time.perf_counter() - t0:.1f} s) -> {path}")
    print(f"  training rate {meas['training_rate_flops_per_s'] / 1e9:.3g} GFLOP/s fp64")
    for dt, rates in meas["matmul_flops_per_s"].items():
        print(f"  matmul {dt}: " + ", ".join(f"n={n} {r / 1e9:.3g}" for n, r in rates.items()) + " GFLOP/s")
    for k, f in meas["links"].items():
        print(f"  {k} link: {f['latency_s'] * 1e6:.3g} us + S / {f['bandwidth_Bps'] / 1e9:.4g} GB/s "
              f"(rms {f['residual_rel']:.1%})")
    hw = load_local(path)
    model = GPTConfig(layers=4, hidden=256, heads=4, seq_len=64, vocab=256)
    print("run                                   predicted    measured   ratio")
    for strategy, n, extra in RUNS:
        cfg = TrainConfig(model, strategy=strategy, devices=n, global_batch=16, steps=args.steps, **extra)
        dm = HardwareDeviceModel(hw, n, dtype="fp64")
        res = min((train(cfg, device_model=dm, check=False) for _ in range(args.repeats)), key=lambda r: r.wall_time_s)
        pm = predicted_vs_measured(res)
        print(f"  GPT h256 L4 s64 B16 {strategy:6s} x{n}     {pm['predicted_s']:8.3f} s {pm['measured_s']:8.3f} s  "
              f"{pm['ratio']:.2f}   (simulated makespan {pm['makespan_s']:.3f} s)")


if __name__ == "__main__":
    main()
