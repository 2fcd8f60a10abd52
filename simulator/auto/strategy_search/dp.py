"""dynamic_programming: exact minimisation by graph eliminations, then recovery.

MindSpore's dynamic-programming search (`auto_parallel/dp_algo_costmodel.cc`,
`graph_costmodel.cc`) shrinks the cost graph with eliminations until one operator is left,
picks its cheapest strategy, and replays the eliminations backwards to recover the others.
parasim applies the same eliminations as min-sum variable elimination on numpy tables:

- contract / merge elimination (an operator with one neighbour w):
      unary[w][s_w] += min_v ( pair[w, v][s_w, s_v] + unary[v][s_v] )
- operator elimination (an operator on a path u - v - w, two neighbours):
      pair[u, w][s_u, s_w] += min_v ( pair[u, v] + unary[v] + pair[v, w] )
  when u and w are already joined this is MindSpore's triangle elimination, and the sum into
  the existing table its edge elimination (parallel edges merged);
- an isolated operator: its cheapest strategy.
Operators are eliminated fewest neighbours first. A graph where every remaining operator has
three or more neighbours (not series-parallel, where MindSpore needs star eliminations or gives
up exactness) is refused with a one-line message.

Memory limit (MindSpore keeps a list of (memory, cost) candidates per strategy and drops those
over `device_memory_capacity` at the end): parasim uses a Lagrangian relaxation (Everett 1963):
minimise objective + lam * memory, with lam = 0 first; if that plan exceeds the limit, lam is
raised by doubling and bisection and the best plan within the limit is kept. Memory is a sum
of per-operator terms, so the least memory any plan needs is exact (sum of per-operator
minima); a limit below it is refused with both numbers. The constrained optimum is exact only
when it lies on the lower convex hull of (memory, objective); otherwise a near-optimal plan.
"""

from __future__ import annotations

import numpy as np

from ...errors import ParasimError
from ...units import fmt_bytes
from .problem import Problem


def eliminate(prob: Problem, lam: float = 0.0) -> dict[int, int]:
    """The choice (candidate index per operator) minimising objective + lam * memory."""
    unary = {v: np.asarray(prob.unary[v], dtype=float) + lam * np.asarray(prob.mem[v], dtype=float)
             for v in prob.order}
    pair = {k: np.asarray(m, dtype=float) for k, m in prob.pair.items()}
    nb = prob.neighbours()
    net = prob.net

    def get(a, b):
        return pair[(a, b)] if a < b else pair[(b, a)].T

    def add(a, b, m):
        key, m = ((a, b), m) if a < b else ((b, a), m.T)
        pair[key] = pair[key] + m if key in pair else m
        nb[a].add(b)
        nb[b].add(a)

    record = []
    alive = set(prob.order)
    while alive:
        v = min(alive, key=lambda u: (len(nb[u]), u))
        ws = sorted(nb[v])
        if len(ws) > 2:
            names = ", ".join(net.nodes[w].label for w in ws)
            raise ParasimError(f"dynamic_programming: after eliminations every operator has 3 or "
                               f"more neighbours ({net.nodes[v].label}: {names}); the graph is not "
                               f"series-parallel; use recursive_programming or sharding_propagation")
        if not ws:
            record.append((v, (), int(np.argmin(unary[v]))))
        elif len(ws) == 1:
            w = ws[0]
            t = get(w, v) + unary[v][None, :]  # (S_w, S_v)
            record.append((v, (w,), t.argmin(axis=1)))
            unary[w] = unary[w] + t.min(axis=1)
        else:
            u, w = ws
            t = get(u, v)[:, :, None] + unary[v][None, :, None] + get(v, w)[None, :, :]  # (S_u, S_v, S_w)
            record.append((v, (u, w), t.argmin(axis=1)))
            for x in ws:
                pair.pop((min(x, v), max(x, v)))
            add(u, w, t.min(axis=1))
        for x in ws:
            nb[x].discard(v)
        nb[v] = set()
        alive.discard(v)
    choice: dict[int, int] = {}
    for v, ws, arg in reversed(record):  # recovery: neighbours were eliminated later
        choice[v] = int(arg if not ws else arg[tuple(choice[w] for w in ws)])
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
