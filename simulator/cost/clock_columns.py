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
    P = _waits(cols)
    level = _levels(cols, P, on_deadlock)
    start = _times(N, a, b, P, level)
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
    snd = np.flatnonzero(kind == SEND)
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


def _waits(cols: ProgramColumns) -> np.ndarray:
    """(N, K) matrix of what each row waits for: 2 r is the start of row r, 2 r + 1 its end,
    2 N zero (padding). Only the latest row of each lane counts: a lane's ends never decrease in
    program order (each row starts after the lane's previous end), so an earlier row of the same
    lane is never the max. Lanes: compute (compute rows, blocking collectives), comm (sends, recvs,
    blocking collectives), the non-blocking stream. A row that takes a lane waits for its previous
    row; the writers of its inputs count lane by lane for the lanes it does not take."""
    N, kind, dev = len(cols), cols.kind, cols.dev
    coll = kind == COLLECTIVE
    block = coll & cols.blocking
    lanes = ((kind == COMPUTE) | block, (kind == SEND) | (kind == RECV) | block, coll & ~cols.blocking)
    latest = np.full((N, 4), -1, dtype=np.int64)
    r, w = _last_writers(cols)
    for c, lane in enumerate(lanes):
        on = lane[w]
        np.maximum.at(latest[:, c], r[on], w[on])
    for c, lane in enumerate(lanes):
        latest[lane, c] = -1
        r, p = _prev_in_lane(dev, lane)
        latest[r, c] = p
    P = np.where(latest >= 0, 2 * latest + 1, 2 * N)
    rcv = np.flatnonzero(kind == RECV)
    P[rcv, 3] = 2 * cols.match[rcv]
    if (cols.join >= 0).any():
        P = _share_among_members(cols, P)
    P.sort(axis=1)
    K = max(int((P < 2 * N).sum(axis=1).max()) if N else 0, 1)
    return np.ascontiguousarray(P[:, :K])


def _share_among_members(cols, P) -> np.ndarray:
    """Members of a collective all start when the last is ready: each waits for all their waits."""
    rows = np.flatnonzero(cols.join >= 0)
    order = np.lexsort((cols.member[rows], cols.join[rows]))
    rows = rows[order]
    j = cols.join[rows]
    first = np.searchsorted(j, j)
    size = np.bincount(j)[j]
    g = int(size.max())
    W = np.full((len(rows), g * P.shape[1]), P.shape[0] * 2, dtype=P.dtype)
    for k in range(g):       # member k of each collective contributes its waits to all members
        has = k < size
        src = rows[np.where(has, first + k, 0)]
        W[has, k * P.shape[1]:(k + 1) * P.shape[1]] = P[src[has]]
    out = np.full((P.shape[0], W.shape[1]), P.shape[0] * 2, dtype=P.dtype)
    out[:, :P.shape[1]] = P
    out[rows] = W
    return out


def _levels(cols: ProgramColumns, P: np.ndarray, on_deadlock) -> np.ndarray:
    """A level per row: above its device's previous row and above every row it waits for."""
    N, n, dev = len(cols), cols.n_devices, cols.dev
    wrow = np.minimum(P // 2, N)                     # padding -> sentinel row N
    devx = np.append(dev, n)
    cross = (devx[wrow] != dev[:, None]) & (wrow < N)
    head = cross.any(axis=1)
    first = np.searchsorted(dev, np.arange(n))
    head[first[first < N]] = True
    seg = np.cumsum(head) - 1
    S = int(seg[-1]) + 1 if N else 0
    heads = np.flatnonzero(head)
    seg_len = np.diff(np.append(heads, N))
    off = np.arange(N) - heads[seg]
    # per segment: its head's cross-device waits as (segment, offset, device), padded with a sentinel
    X = np.where(cross[heads], wrow[heads], N)
    seg_x, off_x = np.append(seg, S), np.append(off, 0)
    Xseg, Xoff, Xdev = seg_x[X], off_x[X], devx[X]
    seg_level = np.zeros(S + 1, dtype=np.int64)
    seg_level[S] = -1
    seg_hi = np.searchsorted(heads, np.append(first[1:], N))
    ptr = np.append(np.searchsorted(heads, first), np.iinfo(np.int64).max // 2)
    prev_end = np.full(n, -1, dtype=np.int64)
    while True:
        act = np.flatnonzero(ptr[:n] < seg_hi)
        if not len(act):
            break
        s = ptr[act]
        xs = Xseg[s]
        ok = (xs < ptr[Xdev[s]]).all(axis=1)
        if not ok.all():
            if not ok.any():
                _refuse(on_deadlock)
            act, s, xs = act[ok], s[ok], xs[ok]
        lvl = np.maximum(prev_end[act], (seg_level[xs] + Xoff[s]).max(axis=1)) + 1
        seg_level[s] = lvl
        prev_end[act] = lvl + seg_len[s] - 1
        ptr[act] += 1
    return seg_level[seg] + off


def _times(N, a, b, P, level) -> np.ndarray:
    """Start of every row, level by level (module docstring)."""
    order = np.argsort(level, kind="stable")
    pos = np.empty(N + 1, dtype=np.int64)
    pos[order] = np.arange(N)
    pos[N] = N
    # waits renumbered to the level order: row r's start/end at 2 pos[r] / 2 pos[r] + 1
    Q = P[order]
    Q = 2 * pos[np.minimum(Q // 2, N)] + Q % 2
    lv = level[order]
    L = int(lv[-1]) + 1 if N else 0
    lb = np.searchsorted(lv, np.arange(L + 1)).tolist()
    ap, bp = a[order], b[order]
    T = np.zeros(2 * N + 2)
    for l in range(L):
        lo, hi = lb[l], lb[l + 1]
        s = T[Q[lo:hi]].max(axis=1)
        e = s + ap[lo:hi]
        e += bp[lo:hi]
        T[2 * lo:2 * hi:2] = s
        T[2 * lo + 1:2 * hi:2] = e
    return T[2 * pos[:N]]


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
