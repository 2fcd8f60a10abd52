"""Speed of the configuration search: GPT-3 175B on 1536 A100-80GB, global batch 1536 (target < 5 s).

    python bench/bench_search.py
"""

from __future__ import annotations

import time

from simulator.cost.analytic import estimate
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.search import search_configs, search_training


def main() -> None:
    w, c = time.perf_counter(), time.process_time()
    res = search_training("gpt3-175b", "a100-80gb", 1536, 1536, top=5)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    print(f"search_training GPT-3 175B on 1536 x a100-80gb, B=1536: {wall:.2f} s wall / {cpu:.2f} s CPU "
          f"(target < 5 s); {res.evaluated:,} timed of {res.considered:,} considered")
    for i, cand in enumerate(res.top, 1):
        print(f"  {i}. {cand!r}")
    pub = estimate("gpt3-175b", ParallelConfig(tp=8, pp=12, dp=16, global_batch=1536, recompute="full"), "a100-80gb")
    print(f"  published Megatron choice t8 p12 d16 (full recompute): {pub.step_time_s:.2f} s, "
          f"{pub.tokens_per_s:,.0f} tokens/s; best finds {res.best.result.tokens_per_s / pub.tokens_per_s:.3f}x")
    w = time.perf_counter()
    old = search_configs("gpt3-175b", "a100-80gb", 1536, 1536, top=1)
    print(f"search_configs (1F1B only, the first search): {time.perf_counter() - w:.2f} s; best {old[0]!r}")


if __name__ == "__main__":
    main()
