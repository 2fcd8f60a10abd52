"""A collective step by step: every rank's slots after each step of a plan, with what they hold.

`replay` runs the same plan and the same per-step functions as `collective()` (run_plan's
semantics: a step reads every source slot before it writes any), but keeps a copy of each rank's
buffer after every step, and alongside it, for every slot, which ranks' inputs it holds (a reduced
slot holds the union of its contributions). The last state joined per rank equals the numpy
reference (`max_abs_diff`), which is how the app's collective player shows it is real.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .algorithms import make_plan
from .execute import apply_incoming, join_output, split_input
from .plan import Plan
from .reference import reference

Holds = frozenset  # frozenset[int]: the ranks whose inputs a slot holds (reduced together, or copied)


@dataclass(frozen=True)
class Replay:
    kind: str
    plan: Plan
    inputs: tuple[np.ndarray, ...]
    states: tuple[tuple[tuple[np.ndarray | None, ...], ...], ...]  # [after step k][rank][slot]; k=0: inputs
    holds: tuple[tuple[tuple[Holds, ...], ...], ...]  # same shape: whose inputs each slot holds
    outputs: tuple[np.ndarray | None, ...]
    expected: tuple[np.ndarray | None, ...]

    @property
    def max_abs_diff(self) -> float:
        """Largest |output - numpy reference| over ranks (0.0 when every rank matches)."""
        return max((float(np.max(np.abs(np.asarray(o) - np.asarray(e)))) for o, e in zip(self.outputs, self.expected)
                    if o is not None and e is not None and np.size(o)), default=0.0)

    def step_links(self, k: int) -> dict[tuple[int, int], int]:
        """Bytes on each (src, dst) link during step k (1-based, as in `states`)."""
        return self.plan.steps[k - 1].links() if k >= 1 else {}


def _initial_holds(rank: int, slots) -> tuple[Holds, ...]:
    """Every slot a rank starts with holds its own input (all_to_all: slot i*n + j is its piece for j)."""
    return tuple(frozenset({rank}) if s is not None else frozenset() for s in slots)


def replay(kind: str, arrays: Sequence[np.ndarray], algo: str | None = None, op: str = "sum",
           root: int = 0) -> Replay:
    """Run `kind` by `algo` on per-rank 1-D arrays, keeping every rank's slots after each step."""
    n = len(arrays)
    arrays = [np.asarray(a) for a in arrays]
    itemsize = arrays[0].dtype.itemsize
    if kind == "all_gather":
        plan = make_plan(kind, algo, n, sizes=[a.size for a in arrays], itemsize=itemsize, root=root)
    else:
        plan = make_plan(kind, algo, n, arrays[root if kind == "broadcast" else 0].nbytes, itemsize=itemsize, root=root)
    bufs = [split_input(kind, plan.n_chunks, n, r, arrays[r] if kind != "broadcast" or r == root else None, root)
            for r in range(n)]
    holds = [list(_initial_holds(r, bufs[r])) for r in range(n)]
    states, held = [tuple(tuple(b) for b in bufs)], [tuple(tuple(h) for h in holds)]
    for step in plan.steps:
        payloads = [bufs[t.src][t.src_chunk] for t in step.transfers]  # read everything first
        sources = [holds[t.src][t.src_chunk] for t in step.transfers]
        for r in range(n):
            mine = [i for i, t in enumerate(step.transfers) if t.dst == r]
            apply_incoming(bufs[r], [step.transfers[i] for i in mine], [payloads[i] for i in mine], op)
            for i in mine:
                t = step.transfers[i]
                holds[r][t.dst_chunk] = holds[r][t.dst_chunk] | sources[i] if t.reduce else sources[i]
        states.append(tuple(tuple(b) for b in bufs))
        held.append(tuple(tuple(h) for h in holds))
    outputs = tuple(join_output(kind, n, r, bufs[r], op, root, None, arrays[r]) for r in range(n))
    expected = tuple(reference(kind, arrays, op=op, root=root))
    return Replay(kind, plan, tuple(arrays), tuple(states), tuple(held), outputs, expected)


def describe_slot(kind: str, holds: Holds, n: int) -> str:
    """Short text for a slot: '—' empty, 'r3' one rank's input, 'Σ r0-r3' a reduction over ranks."""
    if not holds:
        return "—"
    ranks = sorted(holds)
    if len(ranks) == 1:
        return f"r{ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        body = f"r{ranks[0]}-r{ranks[-1]}" if len(ranks) > 2 else f"r{ranks[0]},r{ranks[1]}"
    else:
        body = ",".join(f"r{r}" for r in ranks)
    return ("Σ " if kind in ("all_reduce", "reduce", "reduce_scatter") else "") + body
