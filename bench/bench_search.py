"""Speed of the configuration search: the exhaustive walk (every configuration priced one by one,
`prune=False`) and the branch-and-bound search (`prune=True`, the default, `simulator.cost.search_bound`)
side by side, same machine, same moment, on the spaces of docs/search.md. Each pair is checked to
give the same answer. CPU seconds of this process (the machine is shared: also state `uptime`).

    python bench/bench_search.py            # every case
    python bench/bench_search.py moe        # one case by name
"""

from __future__ import annotations

import os
import sys
import time

from simulator.cost.search import search_training
from simulator.cost.search_cases import CASES

COUNTS = ("evaluated", "infeasible", "bounded")


def same_answer(a, b) -> bool:
    """The two results agree on everything but how many configurations each priced."""
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k not in COUNTS}  # noqa: E731
    return strip(a) == strip(b)


def run(name: str) -> None:
    args, kwargs = CASES[name]
    out = {}
    for prune in (False, True):
        c = time.process_time()
        res = search_training(*args, **kwargs, prune=prune)
        out[prune] = (time.process_time() - c, res)
    (t_old, old), (t_new, new) = out[False], out[True]
    print(f"{name}: {new.considered:,} configurations considered; best {new.best.config!r} "
          f"{new.best.result.step_time_s:.3f} s")
    print(f"  exhaustive walk   {t_old:7.2f} s CPU, {old.evaluated:,} priced")
    print(f"  branch and bound  {t_new:7.2f} s CPU, {new.evaluated:,} priced, {new.infeasible:,} infeasible by "
          f"memory, {new.bounded:,} skipped by the bound; {t_old / t_new:.1f}x faster; "
          f"same answer: {same_answer(old, new)}")


def main(names) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for name in names or CASES:
        run(name)


if __name__ == "__main__":
    main(sys.argv[1:])
