"""A device's memory samples: the holdings' running totals beside the recount they replace, in one run.

    python bench/bench_holdings.py [--repeat 3]

A device samples the bytes it holds per category after every instruction. The definition is the
recount `Device.bytes_by_category` (every tensor, every time); `simulator.runtime.holdings.Holdings`
keeps the same totals as tensors come and go (tests/test_holdings.py checks them against the
recount after every instruction of every strategy). Timed: `train` of the Context page's run (a
tiny GPT, 2 layers, hidden 16, 32 tokens, split over 8 context-parallel devices, 2 steps,
in-process) and a 4-device data-parallel run, each with the running totals and with the recount,
best of `--repeat` in CPU seconds.
"""

from __future__ import annotations

import argparse
import time

from simulator import GPTConfig, TrainConfig, train
from simulator.runtime.device import Device

RUNS = {"cp8": TrainConfig(GPTConfig(layers=2, hidden=16, heads=8, seq_len=32, vocab=32), strategy="cp", devices=8, cp=8,
                           global_batch=2, steps=2),
        "dp4": TrainConfig(GPTConfig(layers=4, hidden=64, heads=4, seq_len=32, vocab=64), strategy="dp", devices=4,
                           global_batch=8, steps=2)}


def best(cfg: TrainConfig, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        train(cfg)
        out = min(out, time.process_time() - t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    kept = Device._sample
    recount = lambda self, index: self.memory.__setitem__(index, self.bytes_by_category())  # noqa: E731
    print(f"{'run':>5} {'running totals (s)':>19} {'recount (s)':>12} {'recount / totals':>17}")
    for name, cfg in RUNS.items():
        train(cfg)  # warm: imports and kernels
        fast = best(cfg, args.repeat)
        Device._sample = recount
        try:
            slow = best(cfg, args.repeat)
        finally:
            Device._sample = kept
        print(f"{name:>5} {fast:>19.3f} {slow:>12.3f} {slow / fast:>17.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
