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
step per level over the anchors of that level (at most one per device): the max of their waits,
then their runs' running sums (`_times`). A program that cannot finish stops the levelling; the
instruction walk then names the deadlock (`Program.walk`). What each row waits for: `clock_waits`.
"""

from __future__ import annotations

import numpy as np

from ..program_columns import COLLECTIVE, COMPUTE, RECV, SEND, ProgramColumns
from ..trace_columns import ColumnTrace, EventColumns
from .clock_waits import waits_of


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
    waits = waits_of(cols)
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
        used, inv = _unique(cols.proto[rows], len(cols.protos))
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
        used, inv = _unique(dev[snd] * n + peer[snd], n * n)
        links = np.array([model.link(int(p) // n, int(p) % n) for p in used], dtype=float)
        lat, bw = links[inv, 0], links[inv, 1]
        xfer = cols.nbytes[snd].astype(float) / bw
        a[snd], b[snd] = lat, xfer
        a[cols.match[snd]] = lat + xfer
    return a, b, sent


def _unique(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) for keys in range(size), by a table when it is small."""
    if size > 4 * len(keys) + (1 << 16):
        return np.unique(keys, return_inverse=True)
    seen = np.zeros(size, dtype=bool)
    seen[keys] = True
    used = np.flatnonzero(seen)
    at = np.zeros(size, dtype=np.int64)
    at[used] = np.arange(len(used))
    return used, at[keys]


def _refuse(on_deadlock) -> None:
    """The program cannot finish: the walk names why (it raises ProgramError)."""
    if on_deadlock is not None:
        on_deadlock()
    raise AssertionError("a columnar program cannot finish, but its instruction walk does")


def _levels(cols: ProgramColumns, waits, on_deadlock) -> np.ndarray:
    """A level per row: above its device's previous anchor and above every row it waits for; the
    rows of an anchor's run share its level."""
    anchor, (xr, xw) = waits[3], waits[4]
    N, n, dev = len(cols), cols.n_devices, cols.dev
    head = np.zeros(N, dtype=bool)
    head[xr] = True
    first = np.searchsorted(dev, np.arange(n))
    head[first[first < N]] = True
    seg = np.cumsum(head) - 1
    S = int(seg[-1]) + 1 if N else 0
    heads = np.flatnonzero(head)
    rank = np.cumsum(anchor) - 1                     # anchors before a row, in program order
    off = rank - rank[heads][seg]
    seg_len = np.diff(np.append(rank[heads], rank[-1] + 1)) if N else rank[:0]
    # segments renumbered with one terminal slot after each device's last: segment i of device d
    # is slot i + d; its terminal waits for slot NEVER, so a finished device just stays put
    segdev = dev[heads]
    lo = np.searchsorted(segdev, np.arange(n))
    DONE, NEVER = S + n, S + n + 1                   # a slot already levelled (-1), one never
    sid = np.arange(S) + segdev
    # per segment: its head's cross-device waits as columns (slot, offset) of the rows waited for
    xseg = seg[xr]
    col = np.arange(len(xr)) - np.searchsorted(xseg, xseg) if (np.diff(xseg) <= 0).any() else xseg[:1] * 0
    Xs, Xo = [], []
    C = int(col.max()) + 1 if len(col) else 1
    for c in range(C):
        xs = np.full(S + n, NEVER, dtype=np.int64)
        xs[sid] = DONE
        xo = np.zeros(S + n, dtype=np.int64)
        at, w = (xseg, xw) if C == 1 else (xseg[col == c], xw[col == c])
        xs[sid[at]], xo[sid[at]] = seg[w] + dev[w], off[w]
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
        top = level[Xs[0][ptr]] + Xo[0][ptr]         # >= BIG: a wait not levelled yet
        for xs, xo in zip(Xs[1:], Xo[1:]):
            np.maximum(top, level[xs[ptr]] + xo[ptr], out=top)
        ok = top < BIG
        k = int(np.count_nonzero(ok))
        if not k:
            _refuse(on_deadlock)
        left -= k
        np.maximum(prev_end, top, out=top)
        top += 1
        level[ptr] = top                             # >= BIG where not ready: still not levelled
        np.copyto(prev_end, top + seg_len_s[ptr] - 1, where=ok)
        ptr += ok
    return level[seg + segdev[seg]] + off


def _times(N, a, b, waits, level) -> np.ndarray:
    """Start of every row, level by level (module docstring). At a level, each anchor starts at the
    max of its waits; its run (itself and the rows after it that wait only for their predecessor)
    is one running sum along [start, a0, b0, a1, b1, ...], numpy's add.accumulate, which adds in
    order: the partial sums are exactly end_k = (start_k + a_k) + b_k and start_k+1 = end_k.
    Values: slot r holds the end of row r, N zero, N + 1 scratch, N + 2 + i the start of the i-th
    anchor in level order (a run row's start is its predecessor's end). Each level is three numpy
    calls on blocks laid out beforehand (`_level_blocks`): the max of its waits (a (K, anchors)
    gather) into row 0 of its run block (2 W + 1, anchors), the running sums down the block, and
    one scatter of the block's even rows (the anchors' starts, then the run rows' ends)."""
    P, jrows, E, anchor = waits[:4]
    A = np.flatnonzero(anchor)
    size = np.diff(np.append(A, N))                                 # run lengths
    order = np.argsort(level[A], kind="stable")
    apos = np.full(N + 1, -1, dtype=np.int64)
    apos[A[order]] = np.arange(len(A))

    def slots(refs):        # refs (2 r: start of r, 2 r + 1: end of r, 2 N: zero) -> value slots
        r = np.minimum(refs // 2, N)
        start = np.where(apos[r] >= 0, N + 2 + apos[r], r - 1)
        return np.where(refs >= 2 * N, N, np.where(refs % 2 == 1, r, start))
    Q = [slots(c[A[order]].astype(np.int64)) for c in P]
    if len(jrows):          # a collective of several members waits for all its members' waits
        EQ = slots(E)
        for e in range(EQ.shape[1]):
            Q.append(np.full(len(A), N, dtype=np.int64))
            Q[-1][apos[jrows]] = EQ[:, e]
    T = np.zeros(N + 2 + len(A))
    top, acc = np.maximum.reduce, np.add.accumulate
    for q, s, m, ev, r in zip(*_level_blocks(N, a, b, A, size, order, level[A[order]], Q)):
        top(T[q], axis=0, out=s)
        acc(m, axis=0, out=m)
        T[r] = ev
    T[N + 1] = 0.0
    start = np.empty(N)
    start[1:] = T[:N - 1]                     # a run row starts at its predecessor's end
    start[A[order]] = T[N + 2:]
    return start


def _level_blocks(N, a, b, A, size, order, lv, Q):
    """Per level (anchors A[order][lo:hi], in row order A with their runs' lengths size; lv their
    levels, Q their waits' slots): views of three matrices with a column per anchor in level
    order, cut to the level's columns and rows: the wait slots (K, anchors), real waits first, K
    the most real waits of an anchor of the level (then the zero slot N); the run block M
    (2 W + 1, anchors), W the level's longest run: row 0 for the start, rows 2 k + 1 and 2 k + 2
    for a and b of the k-th row of each run (0 past its end); row 0 and the even rows of M; the
    slots the even rows go to (R: the anchor's start slot, then the ends of its run's rows,
    scratch N + 1 past its end)."""
    nA = len(A)
    if not nA:
        return [], [], [], [], []
    L = int(lv[-1]) + 1
    lb = np.searchsorted(lv, np.arange(L + 1))
    Qt = np.full((len(Q), nA), N, dtype=np.intp)          # real waits first
    nw = np.zeros(nA, dtype=np.intp)
    for q in Q:
        real = np.flatnonzero(q != N)
        Qt[nw[real], real] = q[real]
        nw[real] += 1
    # row r, the k-th of the run of the anchor in column c: M[2 k + 1, c] = a[r], M[2 k + 2, c] =
    # b[r], R[k + 1, c] = r (the runs cover the rows in order)
    W = int(size.max())
    col = np.empty(nA, dtype=np.intp)
    col[order] = np.arange(nA)
    k = np.arange(N) - np.repeat(A, size)
    c = np.repeat(col + nA, size)
    at = 2 * nA * k + c
    M = np.zeros((2 * W + 1, nA))
    M.ravel()[at] = a
    at += nA
    M.ravel()[at] = b
    R = np.full((W + 1, nA), N + 1, dtype=np.intp)
    R[0] = N + 2 + np.arange(nA)
    k *= nA
    k += c
    R.ravel()[k] = np.arange(N)
    size = size[order]
    los = np.minimum(lb[:-1], nA - 1)                      # every level has an anchor (_levels)
    Kl = np.maximum(np.maximum.reduceat(nw, los), 1).tolist()
    Wl = np.maximum.reduceat(size, los).tolist()
    qs, s0, ms, ev, rs = [], [], [], [], []
    for lo, hi, K, w in zip(lb[:-1].tolist(), lb[1:].tolist(), Kl, Wl):
        qs.append(Qt[:K, lo:hi])
        s0.append(M[0, lo:hi])
        ms.append(M[:2 * w + 1, lo:hi])
        ev.append(M[:2 * w + 1:2, lo:hi])
        rs.append(R[:w + 1, lo:hi])
    return qs, s0, ms, ev, rs


def _events(cols: ProgramColumns, start, a, sent) -> EventColumns:
    """One event per row; a send shows its recv's interval, a recv its send's bytes and micro-batch."""
    kind = cols.kind
    rcv = np.flatnonzero(kind == RECV)
    snd = cols.match[rcv]
    st, du = start.copy(), a.copy()
    st[snd], du[snd] = start[rcv], a[rcv]
    meta_nb = np.array([m[4] for m in cols.metas], dtype=np.int64)
    meta_fl = np.array([m[5] for m in cols.metas], dtype=float)
    comp = kind == COMPUTE
    nbytes = np.where(comp, meta_nb[cols.meta], cols.nbytes)     # p2p: the transfer's bytes
    flops = np.where(comp, meta_fl[cols.meta], 0.0)
    nbytes[rcv] = cols.nbytes[snd]
    coll = np.flatnonzero(kind == COLLECTIVE)
    nbytes[coll] = sent[coll]
    mb = cols.microbatch.copy()
    mb[rcv] = cols.microbatch[snd]
    flow = np.full(len(cols), -1, dtype=np.int64)
    flow[rcv] = np.arange(1, len(rcv) + 1)
    flow[snd] = flow[rcv]
    metas = tuple((m[0], m[1], m[2], m[3]) for m in cols.metas)
    return EventColumns(cols.dev, (~comp).view(np.int8), cols.meta, st, du, nbytes, flops, mb, flow, metas)
