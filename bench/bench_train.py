"""One data-parallel training step of the GPT model (4 layers, hidden 512, sequence 128, batch 32)
on 4 Ray devices against the same step on one device in one process, side by side in one run.

Target (issue "Real training I"): the Ray step at most 2x the single-process step. Both run the
same compiled programs; the first step of each is a warm-up (Ray actors import numpy and build the
model there), then the best of `--repeat` measured steps is kept. Usage:

    python bench/bench_train.py [--repeat 3] [--hidden 512]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from simulator import GPTConfig, TrainConfig, compile_strategy, get_batch, make_runtime


def time_steps(cfg: TrainConfig, runtime, repeat: int) -> float:
    compiled = compile_strategy(cfg)
    runtime.clear()
    runtime.load(compiled.initial)
    best = float("inf")
    for step in range(repeat + 1):
        x, y = get_batch(cfg.model, cfg.batch_size, step, cfg.seed)
        t0 = time.perf_counter()
        runtime.load(compiled.feed(x, y))
        runtime.run(compiled.program)
        elapsed = time.perf_counter() - t0
        if step > 0:  # step 0 warms up
            best = min(best, elapsed)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--object-store", action="store_true",
                    help="also run Ray with every chunk through the object store (shared_memory=False, as before issue 18)")
    args = ap.parse_args()
    gpt = GPTConfig(layers=4, hidden=args.hidden, heads=8, seq_len=128, vocab=256)
    single = TrainConfig(gpt, strategy="single", devices=1, global_batch=32).resolved()
    dp = replace(single, strategy="dp", devices=4, dp=4).resolved()

    local = make_runtime("local", 1)
    t_single = time_steps(single, local, args.repeat)
    ray_rt = make_runtime("ray", 4)
    obj_rt = make_runtime("ray", 4, shared_memory=False) if args.object_store else None
    try:
        t_ray = time_steps(dp, ray_rt, args.repeat)
        t_obj = time_steps(dp, obj_rt, args.repeat) if obj_rt else None
    finally:
        if obj_rt:
            obj_rt.close()
        ray_rt.close()
    t_local_dp = time_steps(dp, make_runtime("local", 4), args.repeat)
    print(f"GPT L=4 h={args.hidden} s=128 batch 32, one training step (best of {args.repeat}):")
    print(f"  single device, one process : {t_single:8.3f} s")
    print(f"  dp=4, in-process runtime   : {t_local_dp:8.3f} s   ({t_local_dp / t_single:.2f}x single)")
    print(f"  dp=4, 4 Ray device actors  : {t_ray:8.3f} s   ({t_ray / t_single:.2f}x single; target <= 2x)")
    if t_obj is not None:
        print(f"  same, chunks through Ray's object store: {t_obj:8.3f} s   ({t_obj / t_single:.2f}x single)")


if __name__ == "__main__":
    main()
