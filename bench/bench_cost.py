"""Speed of the cost model: a huge pipeline timeline, one closed-form evaluation, a scale program.

    python bench/bench_cost.py

Targets: a 1F1B timeline with 128 stages and 1024 micro-batches in under 2 s; one analytic
evaluation of a GPT-3-scale configuration in under 10 ms. The timeline is timed twice, honestly:
by `schedule_sim.simulate_schedule` (unit-time, numpy) and by the event clock `clock.simulate` on the
equivalent Program (one Compute per action plus the Send/Recv of every stage boundary), whose
walk validates and orders every instruction in Python. Wall and CPU seconds are printed (the
machine may be shared; CPU time is the steadier figure).
"""

from __future__ import annotations

import time

from simulator.cost.analytic import estimate
from simulator.cost.clock import SimpleDeviceModel, simulate
from simulator.cost.model_presets import PUBLISHED_RUNS
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_sim import simulate_at_scale
from simulator.cost.timeline_program import schedule_program
from simulator.parallel.schedule_registry import make_schedule
from simulator.parallel.schedule_sim import simulate_schedule


def timed(fn, repeat=1):
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_wall, best_cpu = min(best_wall, time.perf_counter() - w), min(best_cpu, time.process_time() - c)
    return out, best_wall, best_cpu


def main() -> None:
    p, m = 128, 1024
    sched, w_build, c_build = timed(lambda: make_schedule("1f1b", p, m))
    res, w_sim, c_sim = timed(lambda: simulate_schedule(sched, 1.0, 2.0, 0.0), repeat=2)
    ideal = (p - 1) / (m + p - 1)
    print(f"1F1B p={p} m={m} ({2 * p * m:,} actions)")
    print(f"  schedule_sim: build {w_build:.3f} s, simulate {w_sim:.3f} s wall / {c_sim:.3f} s CPU "
          f"(target < 2 s); bubble {res.bubble_fraction:.4f} vs (p-1)/(m+p-1) = {ideal:.4f}")
    prog, w_prog, _ = timed(lambda: schedule_program(sched))
    model = SimpleDeviceModel(flops_per_s=1e12, latency_s=0.0, bandwidth_Bps=1e30)
    trace, w_clk, c_clk = timed(lambda: simulate(prog, model))
    print(f"  event clock:  program of {len(prog):,} instructions built in {w_prog:.2f} s; clock "
          f"{w_clk:.2f} s wall / {c_clk:.2f} s CPU; makespan {trace.makespan_s:.0f} = schedule_sim "
          f"{res.makespan:.0f} x 1 s: {abs(trace.makespan_s - res.makespan) < 1e-6 * res.makespan}")

    cfg = ParallelConfig(tp=8, pp=12, dp=16, micro_batch_size=1, global_batch=1536, recompute="full")
    est, w_a, c_a = timed(lambda: estimate("gpt3-175b", cfg, "a100-80gb"), repeat=50)
    print(f"analytic GPT-3 175B {cfg!r}: {w_a * 1e3:.3f} ms wall / {c_a * 1e3:.3f} ms CPU (target < 10 ms); "
          f"step {est.step_time_s:.2f} s, {est.tflops_per_gpu:.1f} TFLOP/s/GPU")
    pap, w_p, c_p = timed(lambda: simulate_at_scale("gpt3-175b", cfg, "a100-80gb", fold_tp=True))
    print(f"scale program GPT-3 175B, one replica ({pap.simulated_ranks} ranks, {pap.instructions:,} "
          f"instructions): {w_p:.2f} s wall / {c_p:.2f} s CPU; step {pap.step_time_s:.2f} s, "
          f"bubble {pap.bubble_fraction:.1%}, exposed comm {pap.exposed_comm_s:.2f} s")

    print("scale program vs closed form on Megatron-LM Table 1 (gradient reduce overlapped in both):")
    A = Assumptions(overlap_grad_reduce=True)
    for run in PUBLISHED_RUNS:
        cfg = ParallelConfig(tp=run.tp, pp=run.pp, dp=run.dp, global_batch=run.global_batch, recompute="full")
        sim, w, c = timed(lambda: simulate_at_scale(run.model, cfg, "a100-80gb", A, fold_tp=True))
        ana = estimate(run.model, cfg, "a100-80gb", A)
        print(f"  {run.model:16s} {sim.instructions:>9,} instr {c:6.2f} s CPU: clock {sim.step_time_s:7.3f} s, "
              f"closed form {ana.step_time_s:7.3f} s, ratio {sim.step_time_s / ana.step_time_s:.4f}; "
              f"{sim.tflops_per_gpu:.0f} TFLOP/s/GPU (published {run.tflops_per_gpu:.0f}); bubble "
              f"{sim.bubble_fraction:.1%} vs {ana.bubble_fraction:.1%}")


if __name__ == "__main__":
    main()
