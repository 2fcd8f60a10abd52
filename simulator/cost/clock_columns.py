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
    if N == 0:
        return ColumnTrace(n, _events(cols, np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)), name=name,
                           step=step)
    p2p = (cols.kind == SEND) | (cols.kind == RECV)
    if (cols.match[p2p] < 0).any():         # a send nobody receives, a recv without its send
        _refuse(on_deadlock)
    a, b, sent = _durations(cols, model, collective_cost)
    waits = _waits(cols)
    level = _levels(cols, waits, on_deadlock)
    start = _times(N, a, b, waits, level)
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
        n = max(cols.n_devices, 1)
        used, inv = np.unique(dev[snd] * n + peer[snd], return_inverse=True)
        links = np.array([model.link(int(p) // n, int(p) % n) for p in used], dtype=float)
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


def _waits(cols: ProgramColumns):
    """What each row waits for, as refs: 2 r is the start of row r, 2 r + 1 its end, 2 N zero.
    P (N, K): per row at most one ref per lane and its send's start (a recv). Only the latest row
    of a lane counts: a lane's ends never decrease in program order (each row starts after the
    lane's previous end), so an earlier row of the same lane is never the max. Lanes: compute
    (compute rows, blocking collectives), comm (sends, recvs, blocking collectives), the
    non-blocking stream. A row that takes a lane waits for its previous row; the writers of its
    inputs count lane by lane for the lanes it does not take. (jrows, E): the rows of collectives
    of several members and the refs of all their members (they all start when the last is ready)."""
    N, kind, dev = len(cols), cols.kind, cols.dev
    coll = kind == COLLECTIVE
    block = coll & cols.blocking
    lanes = ((kind == COMPUTE) | block, (kind == SEND) | (kind == RECV) | block, coll & ~cols.blocking)
    r, w = cols.deps if cols.deps is not None else _last_writers(cols)
    cols_out = []
    for lane in lanes:
        col = np.full(N, -1, dtype=np.int64)
        rr, pp = _prev_in_lane(dev, lane)
        col[rr] = pp
        on = lane[w] & ~lane[r]          # a row on the lane already waits for its latest row
        if on.any():
            np.maximum.at(col, r[on], w[on])
        if len(rr) or on.any():
            cols_out.append(col)
    rcv = np.flatnonzero(kind == RECV)
    P = np.full((N, max(len(cols_out) + (len(rcv) > 0), 1)), 2 * N, dtype=np.int32)
    for c, col in enumerate(cols_out):
        has = col >= 0
        P[has, c] = 2 * col[has] + 1
    if len(rcv):
        P[rcv, -1] = 2 * cols.match[rcv]
    P = _prune(P)
    jrows = np.flatnonzero(cols.join >= 0)
    return P, jrows, _member_waits(cols, P, jrows), _anchors(cols, P, jrows)


RUN = 64     # rows priced in one step after an anchor at most (bounds the padding of `_times`)


def _any_eq(cols: list, x: np.ndarray) -> np.ndarray:
    """Is x equal to one of the columns (numpy reduces short rows of a 2-d array slowly)?"""
    out = cols[0] == x
    for c in cols[1:]:
        out |= c == x
    return out


def _prune(P: np.ndarray) -> np.ndarray:
    """Drop duplicate waits, and when a row waits for the end of the row before it, drop its other
    waits that row also waited for: end(x) <= start(prev) <= end(prev) (durations are >= 0), so
    the max is the same. Rows then often wait for their predecessor only (`_anchors`)."""
    N, K = P.shape
    if K == 1:
        return P
    cols = [np.ascontiguousarray(P[:, k]) for k in range(K)]
    before = [np.concatenate([[2 * N], c[:-1]]) for c in cols]
    prev_end = 2 * np.arange(N, dtype=P.dtype) - 1
    has_prev = _any_eq(cols, prev_end)
    out = []
    for i, x in enumerate(cols):
        drop = has_prev & (x != prev_end) & ((x & 1) == 1) & _any_eq(before, x)
        if i:
            drop |= _any_eq(cols[:i], x)
        out.append(np.where(drop, 2 * N, x).astype(P.dtype))
    return np.stack(out, axis=1)


def _anchors(cols, P, jrows) -> np.ndarray:
    """Rows whose only wait is the end of the row before them on their device are priced in one
    step with it, by an exact running sum (`_times`); the others are anchors of such runs."""
    N = len(cols)
    prev = 2 * np.arange(N, dtype=P.dtype) - 1
    columns = [P[:, k] for k in range(P.shape[1])]
    count = np.zeros(N, dtype=np.int8)
    for c in columns:
        count += c < 2 * N
    single = (count == 1) & _any_eq(columns, prev)
    single[np.searchsorted(cols.dev, np.arange(cols.n_devices))[:min(cols.n_devices, N)]] = False
    single[jrows] = False
    anchor = ~single
    run = np.arange(N) - np.maximum.accumulate(np.where(anchor, np.arange(N), 0))
    anchor |= run % RUN == 0
    return anchor


def _member_waits(cols, P, rows) -> np.ndarray:
    """For each member row of a collective of several members: the waits of all its members."""
    if not len(rows):
        return np.zeros((0, 1), dtype=np.int64)
    order = np.lexsort((cols.member[rows], cols.join[rows]))
    srt = rows[order]
    j = cols.join[srt]
    first = np.searchsorted(j, j)
    size = np.bincount(j)[j]
    g, K = int(size.max()), P.shape[1]
    E = np.full((len(srt), g * K), 2 * P.shape[0], dtype=np.int64)
    for k in range(g):       # member k of each collective contributes its waits to all members
        has = k < size
        E[has, k * K:(k + 1) * K] = P[srt[first[has] + k]]
    out = np.empty_like(E)
    out[order] = E
    return out


def _levels(cols: ProgramColumns, waits, on_deadlock) -> np.ndarray:
    """A level per row: above its device's previous anchor and above every row it waits for; the
    rows of an anchor's run share its level."""
    P, jrows, E, anchor = waits
    N, n, dev = len(cols), cols.n_devices, cols.dev
    devx = np.append(dev, n)
    wrow = np.minimum(P // 2, N)                     # padding -> sentinel row N
    cross = (devx[wrow] != dev[:, None]) & (wrow < N)
    head = cross[:, 0].copy()
    for k in range(1, cross.shape[1]):
        head |= cross[:, k]
    if len(jrows):
        ew = np.minimum(E // 2, N)
        ecross = (devx[ew] != dev[jrows][:, None]) & (ew < N)
        head[jrows] |= ecross.any(axis=1)
    first = np.searchsorted(dev, np.arange(n))
    head[first[first < N]] = True
    seg = np.cumsum(head) - 1
    S = int(seg[-1]) + 1 if N else 0
    heads = np.flatnonzero(head)
    rank = np.cumsum(anchor) - 1                     # anchors before a row, in program order
    off = rank - rank[heads][seg]
    seg_len = np.diff(np.append(rank[heads], rank[-1] + 1)) if N else rank[:0]
    # per segment: its head's cross-device waits as (segment, offset, device), padded with row N
    X = np.where(cross[heads], wrow[heads], N)
    if len(jrows):
        extra = np.full((S, E.shape[1]), N, dtype=np.int64)
        extra[seg[jrows]] = np.where(ecross, ew, N)
        X = np.concatenate([X, extra], axis=1)
    # segments renumbered with one terminal slot after each device's last: segment i of device d
    # is slot i + d; its terminal waits for slot NEVER, so a finished device just stays put
    segdev = dev[heads]
    lo = np.searchsorted(segdev, np.arange(n))
    DONE, NEVER = S + n, S + n + 1                   # a slot already levelled (-1), one never
    slot = np.append(seg + segdev[seg], DONE)        # row -> its segment's slot; row N -> DONE
    X = X[:, (X < N).any(axis=0)]
    if not X.shape[1]:
        X = np.full((S, 1), N, dtype=np.int64)
    X.sort(axis=1)                                   # real waits first, the sentinel N last
    X = X[:, :max(int((X < N).sum(axis=1).max()) if S else 0, 1)]
    sid = np.arange(S) + segdev
    Xs, Xo = [], []                                  # per wait column: its slot and offset
    for c in range(X.shape[1]):
        xs = np.full(S + n, NEVER, dtype=np.int64)
        xo = np.zeros(S + n, dtype=np.int64)
        xs[sid], xo[sid] = slot[X[:, c]], np.append(off, 0)[X[:, c]]
        Xs.append(xs)
        Xo.append(xo)
    seg_len_s = np.zeros(S + n, dtype=np.int64)
    seg_len_s[sid] = seg_len
    BIG = np.int64(1) << 40
    level = np.full(S + n + 2, BIG, dtype=np.int64)
    level[DONE] = -1
    ptr = lo + np.arange(n)
    prev_end = np.full(n, -1, dtype=np.int64)
    left = S
    while left:
        g = level[Xs[0][ptr]]                        # level of a cross-device wait (>= BIG: not yet)
        top = g + Xo[0][ptr]
        for xs, xo in zip(Xs[1:], Xo[1:]):
            gk = level[xs[ptr]]
            np.maximum(g, gk, out=g)
            np.maximum(top, gk + xo[ptr], out=top)
        ok = g < BIG
        k = int(np.count_nonzero(ok))
        if not k:
            _refuse(on_deadlock)
        left -= k
        lvl = np.maximum(prev_end, top)
        lvl += 1
        level[ptr] = lvl                             # >= BIG where not ready: still not levelled
        np.copyto(prev_end, lvl + seg_len_s[ptr] - 1, where=ok)
        ptr += ok
    return level[slot[:N]] + off


def _times(N, a, b, waits, level) -> np.ndarray:
    """Start of every row, level by level (module docstring). At a level, each anchor starts at the
    max of its waits; its run (itself and the rows after it that wait only for their predecessor)
    is one running sum along [start, a0, b0, a1, b1, ...], numpy's add.accumulate, which adds in
    order: the partial sums are exactly end_k = (start_k + a_k) + b_k and start_k+1 = end_k.
    Values: slot r holds the end of row r, N zero, N + 1 scratch, N + 2 + i the start of the i-th
    anchor in level order (a run row's start is its predecessor's end)."""
    P, jrows, E, anchor = waits
    A = np.flatnonzero(anchor)
    order = np.argsort(level[A], kind="stable")
    A = A[order]
    size = np.diff(np.append(np.flatnonzero(anchor), N))[order]     # run lengths
    W = int(size.max()) if len(size) else 1
    k = np.arange(W)
    R = np.where(k < size[:, None], A[:, None] + k, N + 1)          # run rows; N + 1: scratch
    ax, bx = np.append(a, [0.0, 0.0]), np.append(b, [0.0, 0.0])
    M = np.zeros((len(A), 2 * W + 1))
    M[:, 1::2], M[:, 2::2] = ax[R], bx[R]
    apos = np.full(N + 1, -1, dtype=np.int64)
    apos[A] = np.arange(len(A))

    def slots(refs):        # refs (2 r: start of r, 2 r + 1: end of r, 2 N: zero) -> value slots
        r = np.minimum(refs // 2, N)
        start = np.where(apos[r] >= 0, N + 2 + apos[r], r - 1)
        return np.where(refs >= 2 * N, N, np.where(refs % 2 == 1, r, start))
    QA = [slots(P[A, c].astype(np.int64)) for c in range(P.shape[1])]
    lv = level[A]
    L = int(lv[-1]) + 1 if len(lv) else 0
    lb = np.searchsorted(lv, np.arange(L + 1)).tolist()
    jpos = apos[jrows]
    jo = np.argsort(jpos)
    jpos, EQ = jpos[jo], slots(E[jo])
    jb = np.searchsorted(jpos, lb).tolist()
    T = np.zeros(N + 2 + len(A))
    top, acc, base = np.maximum.reduce, np.add.accumulate, N + 2
    for l in range(L):
        lo, hi = lb[l], lb[l + 1]
        s = T[QA[0][lo:hi]]
        for q in QA[1:]:
            np.maximum(s, T[q[lo:hi]], out=s)
        if jb[l] < jb[l + 1]:
            i = jpos[jb[l]:jb[l + 1]] - lo
            s[i] = np.maximum(s[i], top(T[EQ[jb[l]:jb[l + 1]]], axis=1))
        T[base + lo:base + hi] = s
        m = M[lo:hi]
        m[:, 0] = s
        acc(m, axis=1, out=m)
        T[R[lo:hi]] = m[:, 2::2]
    T[N + 1] = 0.0
    start = np.empty(N)
    start[1:] = T[:N - 1]                     # a run row starts at its predecessor's end
    start[A] = T[base:base + len(A)]
    return start


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
