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
    lens = [len(row) for row in sched.actions]
    adev = np.repeat(np.arange(p), lens)
    a_f = np.fromiter((a.kind == "F" for row in sched.actions for a in row), bool, sum(lens))
    amb = np.fromiter((a.microbatch for row in sched.actions for a in row), np.int64, sum(lens))
    hr = np.where(a_f, adev > 0, adev < p - 1)          # has a recv before its compute
    hs = np.where(a_f, adev < p - 1, adev > 0)          # has a send after it
    cnt = 1 + hr + hs
    act = np.repeat(np.arange(len(adev)), cnt)
    off = np.arange(len(act)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    slot = off + 1 - hr[act]                            # 0 recv, 1 compute, 2 send
    kind = np.array([RECV, COMPUTE, SEND], dtype=np.int8)[slot]
    dev, f, mb = adev[act], a_f[act], amb[act]
    N = len(act)
    fwd_peer = np.where(slot == 2, 1, -1)               # F: from d - 1, to d + 1; BW: the reverse
    peer = np.where(kind == COMPUTE, -1, dev + np.where(f, fwd_peer, -fwd_peer))
    # what reads what: F: recv writes x, compute x -> y, send reads y; BW: recv writes dy, compute
    # y, dy -> dx (y from F_j's compute, on the compute lane BW takes itself), send reads dx
    dep = np.flatnonzero((slot == 2) | ((slot == 1) & hr[act]))
    deps = (dep, dep - 1)
    # the k-th F send of device d meets the k-th F recv of d + 1 (tag "f"); BW sends go to d - 1
    rank = np.zeros(len(adev), dtype=np.int64)
    for flag in (True, False):
        sel = a_f == flag
        c = np.cumsum(sel)
        first = np.searchsorted(adev, adev)
        before = np.where(first > 0, c[np.maximum(first - 1, 0)], 0)
        rank[sel] = (c - before - 1)[sel]
    R = int(rank.max()) + 1 if len(rank) else 1
    key = lambda d, fl, r: (d * 2 + fl) * R + r         # noqa: E731
    table = np.full(2 * p * R + 1, -1, dtype=np.int64)
    rcv, snd = np.flatnonzero(kind == RECV), np.flatnonzero(kind == SEND)
    table[key(dev[rcv], f[rcv], rank[act[rcv]])] = rcv
    match = np.full(N, -1, dtype=np.int64)
    tgt = key(peer[snd], f[snd], rank[act[snd]])
    ok = (peer[snd] >= 0) & (peer[snd] < p)
    match[snd] = np.where(ok, table[np.where(ok, tgt, -1)], -1)
    has = match[snd] >= 0
    match[match[snd[has]]] = snd[has]
    meta = np.where(slot == 1, np.where(f, 0, 1), 2 + 4 * dev + 2 * (slot == 0) + ~f)
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
    return ProgramColumns(p, dev, kind, np.zeros(N, dtype=bool), np.where(kind == COMPUTE, np.where(f, 0, 1), -1),
                          peer, np.full(N, nbytes, dtype=np.int64), match, neg, np.zeros(N, dtype=np.int64),
                          rp, rv, rp, rv, mb, meta, protos, tuple(metas), deps)
