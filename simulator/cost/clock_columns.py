"""The event clock on a columnar program: the same timing rules as `clock.py`, priced with numpy.

`clock.simulate` walks instruction objects one by one (about 4 us each). For a program held as
columns (`simulator.program_columns`) the times are a longest path: every row starts at the max
of the values it waits for and ends at start + duration, with the waits of `clock.py`:

  compute     its device's previous compute-lane row (compute, blocking collective) and the
              rows that last wrote its inputs (on its device, earlier in program order);
  send        the last writer of its tensor and its device's previous comm-lane row (send, recv,
              blocking collective); it holds the lane for latency + nbytes / bandwidth;
  recv        its send's start and its device's previous comm-lane row; it lasts
              latency + nbytes / bandwidth of the link; the send's and the recv's events show it;
  collective  every member's tensor writer and comm-lane row (and compute-lane row if
              blocking), or non-blocking: the members' previous non-blocking collective.

Equal to the walk's clock because each lane and each tensor of a device is only ever read and
written in that device's program order (a walk may run devices in another interleaving, never a
device out of its own order); non-blocking collectives of several members are not columnar
programs (their completion order is the walk's). The same floating-point operations in the same
order give the same bits: end = (start + a) + b, a and b as `clock.py` adds them.

Vectorised in two passes. Levels: a row's level exceeds its device's previous row's and its
cross-device waits' levels; rows between cross-device waits form a segment whose levels follow
each other, so one loop over segments, vectorised across devices, levels them all. Times: one
step per level over the rows of that level (at most one per device), numpy's maximum.reduceat
over their waits. A program that cannot finish stops the levelling; the instruction walk then
names the deadlock (`Program.walk`).
"""

from __future__ import annotations

import numpy as np

from ..program_columns import COLLECTIVE, COMPUTE, RECV, SEND, ProgramColumns
from ..trace_columns import ColumnTrace, EventColumns


def price_columns(cols: ProgramColumns, model, collective_cost, step: int = 0, name: str = "",
                  on_deadlock=None) -> ColumnTrace:
    """The trace of `cols` on `model`. collective_cost(ins) -> (time_s, bytes sent per member);
    on_deadlock() raises the walk's error when the rows cannot all be levelled."""
    n, N = cols.n_devices, len(cols)
    p2p = (cols.kind == SEND) | (cols.kind == RECV)
    if (cols.match[p2p] < 0).any():         # a send nobody receives, a recv without its send
        _refuse(on_deadlock)
    a, b, sent = _durations(cols, model, collective_cost)
    prow, pref = _waits(cols)
    level = _levels(cols, prow, pref, on_deadlock)
    start = _times(N, a, b, prow, pref, level)
    return ColumnTrace(n, _events(cols, start, a, sent), name=name, step=step)


def _durations(cols: ProgramColumns, model, collective_cost):
    """Per row: a and b with end = (start + a) + b, and the bytes each collective row sends."""
    N = len(cols)
    kind, dev, peer = cols.kind, cols.dev, cols.peer
    a, b = np.zeros(N), np.zeros(N)
    sent = np.zeros(N, dtype=np.int64)
    comp = kind == COMPUTE
    coll = kind == COLLECTIVE
    for mask, price in ((comp, lambda ins: (model.compute_time_s(ins), None)), (coll, collective_cost)):
        rows = np.flatnonzero(mask)
        if not len(rows):
            continue
        used, inv = np.unique(cols.proto[rows], return_inverse=True)
        got = [price(cols.protos[k]) for k in used.tolist()]
        a[rows] = np.array([g[0] for g in got], dtype=float)[inv]
        if mask is coll:
            width = max(len(g[1]) for g in got)
            table = np.array([list(g[1]) + [0] * (width - len(g[1])) for g in got], dtype=np.int64)
            sent[rows] = table[inv, cols.member[rows]]
    snd, rcv = np.flatnonzero(kind == SEND), np.flatnonzero(kind == RECV)
    if len(snd):
        # the link of each transfer, asked once per (src, dst) pair; the send's bytes for both ends
        pairs = dev[snd] * n_or_1(cols) + peer[snd]
        used, inv = np.unique(pairs, return_inverse=True)
        links = np.array([model.link(int(p) // n_or_1(cols), int(p) % n_or_1(cols)) for p in used], dtype=float)
        lat, bw = links[inv, 0], links[inv, 1]
        xfer = cols.nbytes[snd].astype(float) / bw
        a[snd], b[snd] = lat, xfer
        a[cols.match[snd]] = lat + xfer
    return a, b, sent


def _refuse(on_deadlock) -> None:
    """The program cannot finish: the walk names why (it raises ProgramError)."""
    if on_deadlock is not None:
        on_deadlock()
    raise AssertionError("a columnar program cannot finish, but its instruction walk does")


def n_or_1(cols) -> int:
    return max(cols.n_devices, 1)


def _prev_in_lane(dev: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, previous row of the same device in the lane) for every lane member with one."""
    rows = np.flatnonzero(member)
    same = dev[rows[1:]] == dev[rows[:-1]]
    return rows[1:][same], rows[:-1][same]


def _last_writers(cols: ProgramColumns) -> tuple[np.ndarray, np.ndarray]:
    """(row, row that last wrote one of its inputs on its device, earlier in program order)."""
    N = len(cols)
    rrow = np.repeat(np.arange(N), np.diff(cols.reads_ptr))
    wrow = np.repeat(np.arange(N), np.diff(cols.writes_ptr))
    if not len(rrow) or not len(wrow):
        return rrow[:0], rrow[:0]
    T = int(max(cols.reads.max(), cols.writes.max())) + 1
    wkey = (cols.dev[wrow] * T + cols.writes) * (N + 1) + wrow
    wkey.sort()
    rk = cols.dev[rrow] * T + cols.reads
    pos = np.searchsorted(wkey, rk * (N + 1) + rrow) - 1
    hit = pos >= 0
    found = wkey[np.where(hit, pos, 0)]
    hit &= found // (N + 1) == rk
    return rrow[hit], found[hit] % (N + 1)


def _waits(cols: ProgramColumns) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (row, value it waits for) sorted by row; values are 2 r (start of row r), 2 r + 1
    (end of row r), 2 N (zero, which every row waits for)."""
    N, kind, dev = len(cols), cols.kind, cols.dev
    coll = kind == COLLECTIVE
    block = coll & cols.blocking
    rows, refs = [np.arange(N)], [np.full(N, 2 * N)]
    for lane in ((kind == COMPUTE) | block, (kind == SEND) | (kind == RECV) | block, coll & ~cols.blocking):
        r, p = _prev_in_lane(dev, lane)     # compute lane, comm lane, non-blocking stream
        rows.append(r)
        refs.append(2 * p + 1)
    r, w = _last_writers(cols)
    rows.append(r)
    refs.append(2 * w + 1)
    rcv = np.flatnonzero(kind == RECV)
    rows.append(rcv)
    refs.append(2 * cols.match[rcv])
    prow, pref = np.concatenate(rows), np.concatenate(refs)
    if (cols.join >= 0).any():
        prow, pref = _share_among_members(cols, prow, pref)
    order = np.argsort(prow, kind="stable")
    return prow[order], pref[order]


def _share_among_members(cols, prow, pref):
    """Members of a collective all start when the last is ready: each waits for all their waits."""
    j = cols.join[prow]
    mine = j >= 0
    jr, jv = j[mine], pref[mine]
    order = np.argsort(jr, kind="stable")
    jr, jv = jr[order], jv[order]
    nj = int(cols.join.max()) + 1
    vstart = np.searchsorted(jr, np.arange(nj))
    vcount = np.bincount(jr, minlength=nj)
    members = np.flatnonzero(cols.join >= 0)
    mj = cols.join[members]
    cnt = vcount[mj]
    out_row = np.repeat(members, cnt)
    ends = np.cumsum(cnt)
    idx = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - cnt, cnt) + np.repeat(vstart[mj], cnt)
    return np.concatenate([prow[~mine], out_row]), np.concatenate([pref[~mine], jv[idx]])


def _levels(cols: ProgramColumns, prow, pref, on_deadlock) -> np.ndarray:
    """A level per row: above its device's previous row and above every row it waits for."""
    N, n, dev = len(cols), cols.n_devices, cols.dev
    wrow = np.where(pref < 2 * N, pref // 2, N)
    devx = np.append(dev, n)
    cross = devx[wrow] != dev[prow]
    cross &= wrow < N
    head = np.zeros(N, dtype=bool)
    head[prow[cross]] = True
    first = np.searchsorted(dev, np.arange(n))
    head[first[first < N]] = True
    seg = np.cumsum(head) - 1
    S = int(seg[-1]) + 1 if N else 0
    heads = np.flatnonzero(head)
    seg_len = np.diff(np.append(heads, N))
    off = np.arange(N) - heads[seg]
    # cross-device waits per segment, padded with a sentinel row N (level -1, always done)
    crow, cw = prow[cross], wrow[cross]
    cs = seg[crow]
    counts = np.bincount(cs, minlength=S)
    K = max(int(counts.max()) if len(counts) else 0, 1)
    X = np.full((S, K), N, dtype=np.int64)
    o = np.argsort(cs, kind="stable")
    cs, cw = cs[o], cw[o]
    pos = np.arange(len(cs)) - np.searchsorted(cs, cs)
    X[cs, pos] = cw
    seg_x = np.append(seg, S)
    off_x = np.append(off, 0)
    seg_level = np.zeros(S + 1, dtype=np.int64)
    seg_level[S] = -1
    seg_hi = np.searchsorted(heads, np.append(first[1:], N))
    ptr = np.append(np.searchsorted(heads, first), np.iinfo(np.int64).max // 2)
    prev_end = np.full(n, -1, dtype=np.int64)
    xdev = devx
    while True:
        act = np.flatnonzero(ptr[:n] < seg_hi)
        if not len(act):
            break
        s = ptr[act]
        Xs = X[s]
        ok = (seg_x[Xs] < ptr[xdev[Xs]]).all(axis=1)
        if not ok.all():
            if not ok.any():
                _refuse(on_deadlock)
            act, s, Xs = act[ok], s[ok], Xs[ok]
        lvl = np.maximum(prev_end[act] + 1, (seg_level[seg_x[Xs]] + off_x[Xs]).max(axis=1) + 1)
        seg_level[s] = lvl
        prev_end[act] = lvl + seg_len[s] - 1
        ptr[act] += 1
    return seg_level[seg] + off


def _times(N, a, b, prow, pref, level) -> np.ndarray:
    """Start of every row, level by level (module docstring)."""
    order = np.argsort(level, kind="stable")
    pos = np.empty(N, dtype=np.int64)
    pos[order] = np.arange(N)
    # waits renumbered to the level order, grouped by level
    pp = pos[prow]
    o = np.argsort(pp, kind="stable")
    pp, pr = pp[o], pref[o]
    pr = np.where(pr < 2 * N, 2 * pos[np.minimum(pr // 2, N - 1)] + pr % 2, 2 * N)
    row_first = np.searchsorted(pp, np.arange(N + 1))
    lv = level[order]
    L = int(lv[-1]) + 1 if N else 0
    lb = np.searchsorted(lv, np.arange(L + 1))
    loc = row_first[:-1] - row_first[lb[:-1]][lv]
    ap, bp = a[order], b[order]
    T = np.zeros(2 * N + 1)
    lb_l, pb_l = lb.tolist(), row_first[lb].tolist()
    reduceat = np.maximum.reduceat
    for l in range(L):
        lo, hi = lb_l[l], lb_l[l + 1]
        s = reduceat(T[pr[pb_l[l]:pb_l[l + 1]]], loc[lo:hi])
        e = s + ap[lo:hi]
        e += bp[lo:hi]
        T[2 * lo:2 * hi:2] = s
        T[2 * lo + 1:2 * hi:2] = e
    return T[2 * pos]


def _events(cols: ProgramColumns, start, a, sent) -> EventColumns:
    """One event per row; a send shows its recv's interval, a recv its send's bytes and micro-batch."""
    kind, N = cols.kind, len(cols)
    rcv = np.flatnonzero(kind == RECV)
    snd = cols.match[rcv]
    st, du = start.copy(), a.copy()
    st[snd], du[snd] = start[rcv], a[rcv]
    nbytes = np.zeros(N, dtype=np.int64)
    flops = np.zeros(N)
    meta_nb = np.array([m[4] for m in cols.metas], dtype=np.int64)
    meta_fl = np.array([m[5] for m in cols.metas], dtype=float)
    comp = kind == COMPUTE
    nbytes[comp] = meta_nb[cols.meta[comp]]
    flops[comp] = meta_fl[cols.meta[comp]]
    p2p = (kind == SEND) | (kind == RECV)
    nbytes[p2p] = cols.nbytes[p2p]
    nbytes[rcv] = cols.nbytes[snd]
    coll = kind == COLLECTIVE
    nbytes[coll] = sent[coll]
    mb = cols.microbatch.copy()
    mb[rcv] = cols.microbatch[snd]
    flow = np.full(N, -1, dtype=np.int64)
    flow[rcv] = np.arange(1, len(rcv) + 1)
    flow[snd] = flow[rcv]
    metas = tuple((m[0], m[1], m[2], m[3]) for m in cols.metas)
    return EventColumns(cols.dev, np.where(comp, 0, 1).astype(np.int8), cols.meta, st, du, nbytes, flops, mb, flow,
                        metas)
