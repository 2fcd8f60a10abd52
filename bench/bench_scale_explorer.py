"""The Scale explorer's event-clock run against the clock alone, side by side in one run.

    python bench/bench_scale_explorer.py            # Megatron-LM Table 1's 1T step (t8 p64, 3072 GPUs)
    python bench/bench_scale_explorer.py --quick    # GPT-3 175B t8 p12 on 1536 GPUs

"clock" builds the step's scale program and prices it on the event clock (`build_scale_program`,
`clock.simulate`); "explorer" is what the app's Scale explorer runs for its timeline: the same
program and clock plus the step's statistics and memory (`simulate_at_scale`) and the bars drawn
(`simulator.trace_runs.aggregate_runs`), all from the trace's columns. Target (issue 24): the
explorer within 1.5x of the clock. CPU seconds (the machine is shared); schedules' cache cleared
before each path so neither reuses the other's work.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cost.clock import simulate  # noqa: E402
from simulator.cost.device_model import HardwareDeviceModel  # noqa: E402
from simulator.cost.model_presets import get_model  # noqa: E402
from simulator.cost.parallel_config import Assumptions, ParallelConfig  # noqa: E402
from simulator.cost.scale_device import ScaleDeviceModel  # noqa: E402
from simulator.cost.scale_program import build_scale_program  # noqa: E402
from simulator.cost.scale_sim import simulate_at_scale  # noqa: E402
from simulator.parallel.schedule_registry import make_schedule  # noqa: E402
from simulator.trace_runs import aggregate_runs  # noqa: E402

MAX_BARS = 6000   # app/charts.py MAX_EVENTS


def cpu(fn):
    make_schedule.cache_clear()
    c = time.process_time()
    out = fn()
    return out, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    name, cfg = (("gpt3-175b", ParallelConfig(tp=8, pp=12, dp=16, global_batch=1536, recompute="full")) if args.quick
                 else ("megatron-1t", ParallelConfig(tp=8, pp=64, dp=6, global_batch=3072, recompute="full")))
    A, spec, hw = Assumptions(overlap_grad_reduce=True), get_model(name), "a100-80gb"
    print(f"{name} {cfg!r}, one replica, TP folded; load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))

    def clock():
        prog = build_scale_program(spec, cfg, A, fold_tp=True)
        dm = ScaleDeviceModel(HardwareDeviceModel(hw, cfg.gpus, A.matmul_dtype), cfg, fold_tp=True)
        return simulate(prog, dm)

    def explorer():
        res = simulate_at_scale(spec, cfg, hw, A, fold_tp=True)
        return res, aggregate_runs(res.trace, MAX_BARS)

    for k in range(args.runs):
        trace, c = cpu(clock)
        (res, (bars, _)), e = cpu(explorer)
        assert res.step_time_s == trace.makespan_s
        print(f"  run {k + 1}: clock {c:5.2f} s CPU, explorer {e:5.2f} s CPU ({len(bars.events):,} bars of "
              f"{len(trace.columns):,} events): {e / c:.2f}x of the clock; target 1.5x: {'met' if e <= 1.5 * c else 'NOT met'}")


if __name__ == "__main__":
    main()
