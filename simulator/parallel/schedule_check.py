"""Dependency validation of pipeline schedules, and the in-order execution engine they share.

Rules (model stage k = chunk*p + device; S = p*v model stages; micro-batch i):
  - every (i, k) has exactly one F, and one backward: a BW, or a B and a W (never both forms);
  - F(i, k) needs F(i, k-1)                      (activation from the previous stage);
  - B/BW(i, k) needs F(i, k) and B/BW(i, k+1)     (its own activations, the next stage's gradient);
  - W(i, k) needs B(i, k)                         (the weight gradient uses the output gradient).
Each device runs its list strictly in order and waits at an action until its dependencies are
done. A schedule is valid if this execution finishes; otherwise the first stuck action is named.
The engine is a ready-queue of devices: a device runs until it blocks on a missing result and is
re-queued when exactly that result is produced, so the cost is O(actions), not O(actions x p).
"""

from __future__ import annotations

from collections import Counter, deque

from simulator.errors import ParasimError
from simulator.parallel.schedules import Schedule

_FWD, _GRAD = 0, 1  # result kinds: activation produced by F, input gradient produced by B or BW


def check_counts(schedule: Schedule) -> None:
    """Every micro-batch: exactly one F and one backward (BW, or B and W) per model stage."""
    p, m, v = schedule.p, schedule.m, schedule.v
    seen = Counter()
    for d, row in enumerate(schedule.actions):
        for a in row:
            seen[(a.kind, a.chunk * p + d, a.microbatch)] += 1
    for k in range(p * v):
        d, c = k % p, k // p
        where = f"stage {d}" + (f" chunk {c} (model stage {k})" if v > 1 else "")
        for i in range(m):
            name = f"{i}.{c}" if c else f"{i}"
            nf, nbw, nb, nw = (seen.get((kind, k, i), 0) for kind in ("F", "BW", "B", "W"))
            if nf != 1:
                raise ParasimError(f"{where} runs F{name} {nf} times; each micro-batch needs exactly one forward per stage")
            if nbw and (nb or nw):
                raise ParasimError(f"{where} runs both BW{name} and a split B/W for micro-batch {i}; use one form")
            if nbw > 1 or nb > 1 or nw > 1:
                raise ParasimError(f"{where} runs the backward of micro-batch {i} more than once "
                                   f"(BW x{nbw}, B x{nb}, W x{nw})")
            if nbw == 0 and nb == 0:
                raise ParasimError(f"{where} never runs the backward of micro-batch {i} (no BW{name} or B{name})")
            if nb != nw:
                missing = "W" if nb else "B"
                raise ParasimError(f"{where} runs {'B' if nb else 'W'}{name} but no {missing}{name}; "
                                   f"a split backward needs both")


def _compile(schedule: Schedule):
    """Per device: list of (kind, produced key or -1, deps ((key, remote), ...), action)."""
    p, m, S = schedule.p, schedule.m, schedule.n_stages
    key = lambda what, k, i: (what * S + k) * m + i  # noqa: E731
    rows = []
    for d, row in enumerate(schedule.actions):
        out = []
        for a in row:
            k, i = a.chunk * p + d, a.microbatch
            if a.kind == "F":
                deps = ((key(_FWD, k - 1, i), (k - 1) % p != d),) if k > 0 else ()
                out.append((a.kind, key(_FWD, k, i), deps, a))
            elif a.kind in ("B", "BW"):
                deps = ((key(_FWD, k, i), False),)
                if k < S - 1:
                    deps += ((key(_GRAD, k + 1, i), (k + 1) % p != d),)
                out.append((a.kind, key(_GRAD, k, i), deps, a))
            else:  # W
                out.append((a.kind, -1, ((key(_GRAD, k, i), False),), a))
        rows.append(out)
    return rows


def _describe(schedule: Schedule, d: int, action, dep_key: int) -> str:
    p, m, S, v = schedule.p, schedule.m, schedule.n_stages, schedule.v
    what, rest = divmod(dep_key, S * m)
    k, i = divmod(rest, m)
    dd, c = k % p, k // p
    name = f"{i}.{c}" if c else f"{i}"
    if dd == d:
        own = ("F" if what == _FWD else "B") + name
        later = any(repr(a) == own or (what == _GRAD and repr(a) == "BW" + name) for a in schedule.actions[d])
        tail = " (it comes later in its own list)" if later else f" (stage {d} never runs it)"
        return f"stage {d} runs {action!r} before its own {own}{tail}"
    product = "activation" if what == _FWD else "gradient"
    chunk = f" in chunk {c}" if v > 1 else ""
    return f"stage {d} runs {action!r} before stage {dd} has produced its {product} for micro-batch {i}{chunk}"


def execute(schedule: Schedule, durations: dict, t_comm: float = 0.0):
    """Run every device's list in order, each action starting when its device is free and its
    inputs have arrived (+ t_comm when they come from another device).

    durations: {"F": t, "B": t, "W": t, "BW": t}. Returns per-device lists of (start, end),
    aligned with schedule.actions. Raises ParasimError naming the stuck dependency on deadlock.
    """
    rows = _compile(schedule)
    p = schedule.p
    done = [-1.0] * (2 * schedule.n_stages * schedule.m)
    times = [[] for _ in range(p)]
    pos, free = [0] * p, [0.0] * p
    waiting = {}  # result key -> devices blocked on it
    queue = deque(range(p))
    while queue:
        d = queue.popleft()
        row, out, i, t = rows[d], times[d], pos[d], free[d]
        n = len(row)
        while i < n:
            kind, produced, deps, _ = row[i]
            start = t
            blocked = -1
            for dep, remote in deps:
                e = done[dep]
                if e < 0:
                    blocked = dep
                    break
                if remote:
                    e += t_comm
                if e > start:
                    start = e
            if blocked >= 0:
                waiting.setdefault(blocked, []).append(d)
                break
            t = start + durations[kind]
            out.append((start, t))
            if produced >= 0:
                done[produced] = t
                woken = waiting.pop(produced, None)
                if woken:
                    queue.extend(woken)
            i += 1
        pos[d], free[d] = i, t
    stuck = [d for d in range(p) if pos[d] < len(rows[d])]
    if stuck:
        reasons = {}
        for dep, devs in waiting.items():
            for d in devs:
                reasons[d] = _describe(schedule, d, rows[d][pos[d]][3], dep)
        own = [reasons[d] for d in stuck if "its own" in reasons[d]]
        if own:
            raise ParasimError(own[0])
        listed = "; ".join(reasons[d] for d in stuck[:4]) + ("; ..." if len(stuck) > 4 else "")
        raise ParasimError(f"deadlock: {listed}")
    return times


def validate(schedule: Schedule) -> None:
    """Raise ParasimError naming the first broken rule; return None for a valid schedule."""
    check_counts(schedule)
    execute(schedule, {"F": 1.0, "B": 1.0, "W": 1.0, "BW": 2.0})
