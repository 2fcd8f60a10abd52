"""Hybrid benchmark: one dp=2 x tp=2 x pp=2 training step of the GPT on 8 Ray actors against the
in-process runtime, side by side in one run.

    python bench/bench_hybrid.py            # GPT L=4, h=256, a=8, s=128, V=1024, batch 8, 2 micro-batches
    python bench/bench_hybrid.py --quick    # a small model (a smoke run)

Both runtimes execute the same compiled Program (Megatron tensor parallelism inside each stage,
1F1B across the two stages, data-parallel gradient AllReduce); times are the best of --reps steps
of `Runtime.run` (loading the batch is not timed). The losses of the two runtimes must agree
exactly, and the simulated step time is the same by construction (one clock prices both).
"""

from __future__ import annotations

import argparse
import json
import time

from simulator.cost.clock import simulate
from simulator.models import GPTConfig, get_batch
from simulator.parallel.config import TrainConfig
from simulator.parallel.strategies import compile_strategy
from simulator.runtime import make_runtime
from simulator.units import fmt_bytes, fmt_time


def run_steps(rt, compiled, steps: int) -> tuple[list[float], list[float], object]:
    """-> (wall time of each step, loss of each step, the last RunResult)."""
    cfg = compiled.config
    rt.clear()
    rt.load(compiled.initial)
    walls, losses, result = [], [], None
    for step in range(steps):
        x, y = get_batch(cfg.model, cfg.batch_size, step, cfg.seed)
        rt.load(compiled.feed(x, y))
        result = rt.run(compiled.program)
        walls.append(result.wall_time_s)
        total = sum(float(v) for r, names in compiled.loss_tensors.items() for v in rt.fetch(r, names).values())
        losses.append(total / compiled.count)
    return walls, losses, result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--strategy", choices=("hybrid", "sp"), default="hybrid", help="sp: with sequence parallelism")
    ap.add_argument("--reps", type=int, default=3, help="steps per runtime; the best is reported")
    ap.add_argument("--quick", action="store_true", help="L=2, h=32, s=16, V=64")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: in-process Ray)")
    ap.add_argument("--object-store", action="store_true",
                    help="also run Ray with every chunk through the object store (shared_memory=False, as before issue 18)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.layers, a.hidden, a.heads, a.seq, a.vocab = 2, 32, 4, 16, 64
    model = GPTConfig(layers=a.layers, hidden=a.hidden, heads=a.heads, seq_len=a.seq, vocab=a.vocab)
    cfg = TrainConfig(model, strategy=a.strategy, devices=8, dp=2, tp=2, pp=2, microbatches=a.microbatches,
                      global_batch=a.batch, steps=a.reps).resolved()
    compiled = compile_strategy(cfg)
    t0 = time.perf_counter()
    runtimes = {"local": make_runtime("local", 8), "ray": make_runtime("ray", 8, address=a.address)}
    if a.object_store:  # the same Ray session, a second set of actors
        runtimes["ray_objstore"] = make_runtime("ray", 8, address=a.address, shared_memory=False)
    startup_s = time.perf_counter() - t0
    rows = {}
    try:
        for kind, rt in runtimes.items():
            walls, losses, result = run_steps(rt, compiled, a.reps)
            rows[kind] = {"best_step_s": min(walls), "steps_s": walls, "losses": losses, "calls": result.calls,
                          "bytes_sent": sum(result.bytes_sent), "peak_bytes_per_device": result.peak_bytes()}
    finally:
        for rt in runtimes.values():
            rt.close()
    assert all(r["losses"] == rows["local"]["losses"] for r in rows.values()), "the runtimes disagree"
    sim = simulate(compiled.program)
    out = {"model": repr(model), "program": compiled.program.name, "instructions": len(compiled.program),
           "startup_s": startup_s, "simulated_step_s": sim.makespan_s, **{k: v for k, v in rows.items()},
           **{f"{k}_over_local": rows[k]["best_step_s"] / rows["local"]["best_step_s"] for k in rows if k != "local"}}
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{model!r}: {compiled.program.name}, {out['instructions']} instructions on 8 devices")
    print(f"runtimes started in {fmt_time(startup_s)} (Ray: 8 actors)")
    print(f"{'runtime':12} {'best step':>10} {'device calls':>13} {'bytes sent':>11} {'peak/device':>12}  losses")
    for kind, r in rows.items():
        print(f"{kind:12} {fmt_time(r['best_step_s']):>10} {r['calls']:>13} {fmt_bytes(r['bytes_sent']):>11} "
              f"{fmt_bytes(max(r['peak_bytes_per_device'])):>12}  " + " ".join(f"{x:.4f}" for x in r["losses"]))
    if "ray_objstore" in rows:
        print(f"ray with chunks through the object store / local: {out['ray_objstore_over_local']:.2f}x")
    print(f"ray / local: {out['ray_over_local']:.2f}x; simulated step on the default device model: "
          f"{fmt_time(sim.makespan_s)}; losses identical on both runtimes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
