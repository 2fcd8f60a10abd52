"""dynamic_programming: exact minimisation by graph eliminations, then recovery.

MindSpore's dynamic-programming search (`auto_parallel/dp_algo_costmodel.cc` GetStrategy,
`graph_costmodel.cc`) shrinks the cost graph with eliminations until one or two operators are
left, picks their cheapest strategies, and replays the eliminations backwards to recover the
others. parasim applies the same eliminations as min-sum variable elimination (bucket
elimination, Dechter 1999) on numpy tables ("factors", one axis per operator):

- contract / merge elimination (an operator with one neighbour w):
      unary[w][s_w] += min_v ( pair[w, v][s_w, s_v] + unary[v][s_v] )
- operator elimination (an operator on a path u - v - w, two neighbours):
      pair[u, w][s_u, s_w] += min_v ( pair[u, v] + unary[v] + pair[v, w] )
  when u and w are already joined this is MindSpore's triangle elimination, and the sum into
  the existing table its edge elimination (parallel edges merged);
- star elimination (an operator with k >= 3 neighbours, e.g. the shared source of a residual
  connection or an input read by every layer): the k neighbours get one k-way table
      f[s_1, ..., s_k] = min_v ( unary[v] + sum of v's tables )
  MindSpore's triangle and star eliminations store that table as extra cost-list entries on
  one neighbour and only check the other neighbours' strategies at recovery
  (CheckSelectedStrategy: a mismatch is logged, not repaired), so they can be inexact; parasim
  keeps the k-way table, so the result stays the exact optimum;
- an isolated operator: its cheapest strategy.
Operators are eliminated fewest neighbours first (then smallest table). The work grows with
the largest table (the graph's treewidth); a graph that would need a table of more than
`MAX_TABLE` entries is refused with a one-line message naming the other search modes.

Memory limit (MindSpore keeps a list of (memory, cost) candidates per strategy and drops those
over `device_memory_capacity` at the end): parasim uses a Lagrangian relaxation (Everett 1963):
minimise objective + lam * memory, with lam = 0 first; if that plan exceeds the limit, lam is
raised by doubling and bisection and the best plan within the limit is kept. Memory is a sum
of per-operator terms, so the least memory any plan needs is exact (sum of per-operator
minima); a limit below it is refused with both numbers. The constrained optimum is exact only
when it lies on the lower convex hull of (memory, objective); otherwise a near-optimal plan.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ...errors import ParasimError
from ...units import fmt_bytes
from .problem import Problem

MAX_TABLE = 20_000_000  # entries of the largest elimination table dynamic_programming builds


def _spread(scope: tuple, table: np.ndarray, onto: tuple) -> np.ndarray:
    """`table` (axes in `scope` order, a subsequence of the sorted `onto`) broadcast over `onto`."""
    shape = [table.shape[scope.index(v)] if v in scope else 1 for v in onto]
    return table.reshape(shape)


def eliminate(prob: Problem, lam: float = 0.0, max_table: int = MAX_TABLE) -> dict[int, int]:
    """The choice (candidate index per operator) minimising objective + lam * memory."""
    size = {v: len(prob.cands[v]) for v in prob.order}
    factors: list[tuple[tuple, np.ndarray]] = [
        ((v,), np.asarray(prob.unary[v], dtype=float) + lam * np.asarray(prob.mem[v], dtype=float))
        for v in prob.order]
    factors += [((a, b), np.asarray(m, dtype=float)) for (a, b), m in sorted(prob.pair.items())]
    nb = prob.neighbours()
    record = []
    alive = set(prob.order)
    while alive:
        v = min(alive, key=lambda u: (len(nb[u]), prod(size[w] for w in nb[u]), u))
        scope = tuple(sorted(nb[v] | {v}))
        entries = prod(size[w] for w in scope)
        if entries > max_table:
            names = ", ".join(prob.net.nodes[w].label for w in sorted(nb[v]))
            raise ParasimError(f"dynamic_programming: eliminating {prob.net.nodes[v].label} needs a "
                               f"table of {entries:,} entries (> {max_table:,}) over its neighbours "
                               f"{names}; use recursive_programming or sharding_propagation")
        mine = [f for f in factors if v in f[0]]
        factors = [f for f in factors if v not in f[0]]
        total = sum(_spread(s, t, scope) for s, t in mine)
        axis = scope.index(v)
        rest = scope[:axis] + scope[axis + 1:]
        total = np.broadcast_to(total, tuple(size[w] for w in scope))
        record.append((v, rest, total.argmin(axis=axis)))
        factors.append((rest, total.min(axis=axis)))
        for w in rest:
            nb[w].discard(v)
            nb[w] |= set(rest) - {w}
        nb[v] = set()
        alive.discard(v)
    choice: dict[int, int] = {}
    for v, rest, arg in reversed(record):  # recovery: the operators in `rest` were eliminated later
        choice[v] = int(arg[tuple(choice[w] for w in rest)])
    return choice


def solve_dp(prob: Problem, iterations: int = 40) -> dict[int, int]:
    """Exact without a binding memory limit; Lagrangian under one (module docstring)."""
    limit = prob.model.limit_bytes
    choice = eliminate(prob)
    if prob.memory(choice) <= limit:
        return choice
    least = prob.const.memory_bytes + sum(float(np.min(prob.mem[v])) for v in prob.order)
    if least > limit:
        raise ParasimError(f"memory limit {fmt_bytes(limit)} per device is below the "
                           f"{fmt_bytes(least)} that the leanest candidate plan needs (the best "
                           f"plan needs {fmt_bytes(prob.memory(choice))}); raise the limit or add "
                           f"devices")
    scale = max(prob.objective(choice), 1e-30) / max(prob.memory(choice), 1.0)
    lo, hi, best = 0.0, scale, None
    for _ in range(200):  # raise lam until the plan fits (it must: `least` fits)
        c = eliminate(prob, hi)
        if prob.memory(c) <= limit:
            best = c
            break
        lo, hi = hi, hi * 2
    if best is None:  # lam so large only memory matters: the leanest plan
        best = {v: int(np.argmin(prob.mem[v] * 1e30 + prob.unary[v])) for v in prob.order}
    for _ in range(iterations):
        mid = (lo + hi) / 2
        c = eliminate(prob, mid)
        if prob.memory(c) <= limit:
            hi = mid
            if prob.objective(c) < prob.objective(best):
                best = c
        else:
            lo = mid
    return best
