"""Speed of the vectorised clock against the definition it optimises, side by side in one run.

    python bench/bench_clock.py            # 1F1B 128 x 1024 and the 1T-parameter step
    python bench/bench_clock.py --quick    # 1F1B 32 x 256 and GPT-3 175B

"objects" prices the program's instruction objects with the object clock of `clock.py` (the
definition of the timing rules) after the walk; "columns" is the path every caller takes: the
program as its compiler builds it (columns, `simulator.program_columns`) priced by the vectorised
clock (`clock_columns`). Both must give the same trace (the bench checks the makespan and the event
count; tests/test_clock_equivalence.py compares every event). Targets (issue 18): 1F1B with 128 stages x 1024 micro-batches, build + price, under
0.5 s; the 1T-parameter step of Megatron-LM Table 1 (t8 p64, 3072 GPUs, one replica, TP folded)
under 1 s. CPU seconds are printed beside wall seconds (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cost.clock import SimpleDeviceModel, simulate  # noqa: E402
from simulator.cost.device_model import HardwareDeviceModel  # noqa: E402
from simulator.cost.model_presets import get_model  # noqa: E402
from simulator.cost.parallel_config import Assumptions, ParallelConfig  # noqa: E402
from simulator.cost.scale_device import ScaleDeviceModel  # noqa: E402
from simulator.cost.scale_program import build_scale_program  # noqa: E402
from simulator.cost.timeline_program import schedule_program  # noqa: E402
from simulator.parallel.schedule_registry import make_schedule  # noqa: E402
from simulator.program import Program  # noqa: E402
from simulator.program_columns import ColumnarProgram  # noqa: E402


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def row(label, build, price_new, price_old, target_s):
    """Build and price the program on each path: columns first, then its instruction objects."""
    prog, wb, cb = timed(build)
    new, wn, cn = timed(lambda: price_new(prog))
    makespan, events = new.makespan_s, len(new.columns) if hasattr(new, "columns") else len(new.events)
    # the compiler's object form (a columnar program's row views), walked and priced by the object clock
    assert isinstance(prog, ColumnarProgram)
    old_prog, wob, cob = timed(lambda: Program(prog.n_devices, prog.code, prog.name))
    old, wo, co = timed(lambda: price_old(old_prog))
    same = events == len(old.events) and makespan == old.makespan_s
    print(f"{label}: {len(old_prog):,} instructions")
    print(f"  objects: build {wob:5.2f} s wall / {cob:5.2f} s CPU, price {wo:5.2f} s wall / {co:5.2f} s CPU "
          f"= {cob + co:5.2f} s CPU")
    print(f"  columns: build {wb:5.2f} s wall / {cb:5.2f} s CPU, price {wn:5.2f} s wall / {cn:5.2f} s CPU "
          f"= {cb + cn:5.2f} s CPU   speed-up {(cob + co) / max(cb + cn, 1e-9):.1f}x; "
          + (f"target < {target_s} s: {'met' if cb + cn < target_s else 'NOT met'}; " if target_s else "")
          + f"same makespan and event count: {same}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    p, m = (32, 256) if args.quick else (128, 1024)
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    model = SimpleDeviceModel(flops_per_s=1e12, latency_s=0.0, bandwidth_Bps=1e30)
    sched = make_schedule("1f1b", p, m)
    row(f"1F1B p={p} m={m}", lambda: schedule_program(sched), lambda pr: simulate(pr, model),
        lambda pr: simulate(pr, model), None if args.quick else 0.5)

    name, cfg = (("gpt3-175b", ParallelConfig(tp=8, pp=12, dp=16, global_batch=1536, recompute="full")) if args.quick
                 else ("megatron-1t", ParallelConfig(tp=8, pp=64, dp=6, global_batch=3072, recompute="full")))
    A = Assumptions(overlap_grad_reduce=True)
    spec = get_model(name)
    dm = ScaleDeviceModel(HardwareDeviceModel("a100-80gb", cfg.gpus, A.matmul_dtype), cfg, fold_tp=True)
    row(f"{name} {cfg!r} one replica, TP folded", lambda: build_scale_program(spec, cfg, A, fold_tp=True),
        lambda pr: simulate(pr, dm), lambda pr: simulate(pr, dm), None if args.quick else 1.0)


if __name__ == "__main__":
    main()
