"""A pipeline schedule's timeline as a Program, to price a schedule on the event clock.

Per action one Compute ("F" or "BW" with the given FLOPs), and the Send/Recv of every stage
boundary: stage d receives the activation x_j from d - 1 before F_j and sends y_j to d + 1 after
it; it receives dy_j from d + 1 before BW_j and sends dx_j to d - 1 after it. On a device model
with free links this is the unit-time timeline of `schedule_sim.simulate_schedule` (bench_cost).

The program is built as columns with numpy (`simulator.program_columns`: a million rows in a
fraction of a second); its instruction objects are built from `_schedule_code` when first asked for.
"""

from __future__ import annotations

import numpy as np

from ..program import Compute, Program, Recv, Send, no_gc
from ..program_columns import COMPUTE, RECV, SEND, ColumnarProgram, ProgramColumns, csr


def schedule_program(sched, flops_f: float = 1e12, flops_b: float = 2e12, nbytes: int = 1 << 20) -> Program:
    """The schedule (`schedule_registry.make_schedule`, F and BW actions) as a Program."""
    with no_gc():
        cols = _schedule_columns(sched, flops_f, flops_b, nbytes)

    def code():
        with no_gc():       # many small objects, no cycles (program.no_gc)
            return _schedule_code(sched, flops_f, flops_b, nbytes)
    return ColumnarProgram(cols, code, f"1f1b p={sched.p} m={sched.m}")


def _schedule_code(sched, flops_f, flops_b, nbytes) -> list:
    p, code = sched.p, []
    for d, row in enumerate(sched.actions):
        out = []
        add = out.append
        for a in row:
            j = a.microbatch
            if a.kind == "F":
                if d > 0:
                    add(Recv(f"x{j}", d - 1, "f", nbytes, j))
                add(Compute("F", (f"x{j}",), (f"y{j}",), flops_f, 0, phase="forward", microbatch=j))
                if d < p - 1:
                    add(Send(f"y{j}", d + 1, "f", nbytes, j))
            else:
                if d < p - 1:
                    add(Recv(f"dy{j}", d + 1, "b", nbytes, j))
                add(Compute("BW", (f"y{j}", f"dy{j}"), (f"dx{j}",), flops_b, 0, phase="backward", microbatch=j))
                if d > 0:
                    add(Send(f"dx{j}", d - 1, "b", nbytes, j))
        code.append(tuple(out))
    return code


def _schedule_columns(sched, flops_f, flops_b, nbytes) -> ProgramColumns:
    """The rows of `_schedule_code`, built with numpy: per action [recv] compute [send]."""
    p = sched.p
    lens = np.fromiter(map(len, sched.actions), np.int64, p)
    n = int(lens.sum())
    adev = np.repeat(np.arange(p), lens)
    a_f = np.fromiter((a.kind == "F" for row in sched.actions for a in row), bool, n)
    amb = np.fromiter((a.microbatch for row in sched.actions for a in row), np.int64, n)
    up, down = adev < p - 1, adev > 0
    hr = np.where(a_f, down, up)                        # has a recv before its compute
    hs = np.where(a_f, up, down)                        # has a send after it
    cnt = 1 + hr + hs
    ci = np.cumsum(cnt) - cnt + hr                      # each action's compute row
    N = int(ci[-1] + 1 + hs[-1]) if n else 0
    ra, sa = np.flatnonzero(hr), np.flatnonzero(hs)     # actions with a recv, with a send
    rcv, snd = ci[ra] - 1, ci[sa] + 1
    kind = np.full(N, COMPUTE, dtype=np.int8)
    kind[rcv], kind[snd] = RECV, SEND
    dev, mb = np.repeat(adev, cnt), np.repeat(amb, cnt)
    # F: from d - 1, to d + 1; BW: the reverse
    fwd = np.where(a_f, 1, -1)
    peer = np.full(N, -1, dtype=np.int64)
    peer[rcv], peer[snd] = (adev - fwd)[ra], (adev + fwd)[sa]
    # what reads what: F: recv writes x, compute x -> y, send reads y; BW: recv writes dy, compute
    # y, dy -> dx (y from F_j's compute, on the compute lane BW takes itself), send reads dx
    dep = np.zeros(N, dtype=bool)
    dep[snd], dep[ci[ra]] = True, True
    dep = np.flatnonzero(dep)
    deps = (dep, dep - 1)
    # the k-th F send of device d meets the k-th F recv of d + 1 (tag "f"); BW sends go to d - 1:
    # rank = the action's place among its device's actions of its kind
    starts = np.cumsum(lens) - lens
    f_before = np.cumsum(a_f) - a_f                     # F actions before this one
    fb0 = np.repeat(np.append(f_before, 0)[starts], lens)
    rank = np.where(a_f, f_before - fb0, np.arange(n) - f_before - np.repeat(starts, lens) + fb0)
    R = int(rank.max()) + 1 if n else 1
    table = np.full(2 * p * R + 1, -1, dtype=np.int64)
    table[(adev[ra] * 2 + a_f[ra]) * R + rank[ra]] = rcv
    match = np.full(N, -1, dtype=np.int64)
    to = (adev + fwd)[sa]
    ok = (to >= 0) & (to < p)
    match[snd] = np.where(ok, table[np.where(ok, (to * 2 + a_f[sa]) * R + rank[sa], -1)], -1)
    has = match[snd] >= 0
    match[match[snd[has]]] = snd[has]
    # metas: 0 F, 1 BW; per device d: 2 + 4 d + (0 send y, 1 send dx, 2 recv y, 3 recv dx)
    meta = np.repeat(np.where(a_f, 0, 1), cnt)
    meta[rcv] = 4 + 4 * adev[ra] + ~a_f[ra]
    meta[snd] = 2 + 4 * adev[sa] + ~a_f[sa]
    metas = [("F", "forward", "F", (), 0, float(flops_f)), ("BW", "backward", "BW", (), 0, float(flops_b))]
    for d in range(p):
        metas += [(f"send y{{j}} to {d + 1}", "comm", "send", (), 0, 0.0),
                  (f"send dx{{j}} to {d - 1}", "comm", "send", (), 0, 0.0),
                  (f"recv y{{j}} from {d - 1}", "comm", "recv", (), 0, 0.0),
                  (f"recv dx{{j}} from {d + 1}", "comm", "recv", (), 0, 0.0)]
    protos = (Compute("F", ("x0",), ("y0",), flops_f, 0, phase="forward", microbatch=0),
              Compute("BW", ("y0", "dy0"), ("dx0",), flops_b, 0, phase="backward", microbatch=0))
    neg = np.full(N, -1, dtype=np.int64)
    rp, rv = csr(np.zeros(N, dtype=np.int64), [])     # the tensors are in `deps`
    proto = np.repeat(np.where(a_f, 0, 1), cnt)
    proto[rcv], proto[snd] = -1, -1
    return ProgramColumns(p, dev, kind, np.zeros(N, dtype=bool), proto,
                          peer, np.full(N, nbytes, dtype=np.int64), match, neg, np.zeros(N, dtype=np.int64),
                          rp, rv, rp, rv, mb, meta, protos, tuple(metas), deps)
