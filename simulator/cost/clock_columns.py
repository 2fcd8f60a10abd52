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

Vectorised in two passes over anchors, the rows that do not just follow the row before them
(`clock_waits`: the others join their anchor's run). Levels: an anchor's level exceeds its
device's previous anchor's and its cross-device waits' levels; anchors between cross-device waits
form a segment whose levels follow each other, so one loop over segments, vectorised across
devices, levels them all. Times: one step per level over the anchors of that level (at most one
per device): the max of their waits, then their runs' running sums (`_times`). A program that cannot finish stops the levelling; the
instruction walk then names the deadlock (`Program.walk`). What each row waits for: `clock_waits`.
"""

from __future__ import annotations

import numpy as np

from ..program import Compute
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
    # each instruction prototype priced once: compute rows and collective rows index them
    got = [(model.compute_time_s(ins), None) if isinstance(ins, Compute) else collective_cost(ins)
           for ins in cols.protos]
    a = np.array([g[0] for g in got] + [0.0], dtype=float)[cols.proto]   # proto -1: 0
    b = np.zeros(N)
    sent = np.zeros(N, dtype=np.int64)
    rows = np.flatnonzero(kind == COLLECTIVE)
    if len(rows):
        width = max((len(g[1]) for g in got if g[1] is not None), default=1)
        table = np.array([list(g[1] or ()) + [0] * (width - len(g[1] or ())) for g in got], dtype=np.int64)
        sent[rows] = table[cols.proto[rows], cols.member[rows]]
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
    """A level per anchor (in row order): above its device's previous anchor and above every row it
    waits for (the rows of an anchor's run share its level)."""
    anchor, (xr, xw) = waits[3], waits[4]
    N, n, dev = len(cols), cols.n_devices, cols.dev
    head = np.zeros(N, dtype=bool)
    head[xr] = True
    first = np.searchsorted(dev, np.arange(n))
    head[first[first < N]] = True
    seg = np.cumsum(head) - 1
    S = int(seg[-1]) + 1 if N else 0
    heads = np.flatnonzero(head)
    rank = np.cumsum(anchor)                         # anchors up to a row, in program order
    rank -= 1
    hrank = rank[heads]
    seg_len = np.diff(np.append(hrank, rank[-1] + 1)) if N else rank[:0]
    # segments renumbered with one terminal slot after each device's last: segment i of device d
    # is slot i + d; its terminal waits for slot NEVER, so a finished device just stays put
    segdev = dev[heads]
    lo = np.searchsorted(segdev, np.arange(n))
    DONE, NEVER = S + n, S + n + 1                   # a slot already levelled (-1), one never
    sid = np.arange(S) + segdev
    # per segment: its head's cross-device waits as columns (slot, offset) of the rows waited for
    xseg = seg[xr]
    col = np.arange(len(xr)) - np.searchsorted(xseg, xseg) if (np.diff(xseg) <= 0).any() else xseg[:1] * 0
    # per wait column c: Xs[c] the slot waited for, Xo[c] the offset in it + 1
    C = int(col.max()) + 1 if len(col) else 1
    Xs, Xo = [], []
    for c in range(C):
        xs = np.full(S + n, NEVER, dtype=np.int64)
        xs[sid] = DONE
        xo = np.ones(S + n, dtype=np.int64)
        at, w = (xseg, xw) if C == 1 else (xseg[col == c], xw[col == c])
        xs[sid[at]], xo[sid[at]] = seg[w] + dev[w], rank[w] - hrank[seg[w]] + 1
        Xs.append(xs)
        Xo.append(xo)
    length = np.zeros(S + n, dtype=np.int64)
    length[sid] = seg_len
    BIG = np.int64(1) << 40
    level = np.full(S + n + 2, BIG, dtype=np.int64)
    level[DONE] = -1
    ptr = lo + np.arange(n)
    after = np.zeros(n, dtype=np.int64)              # each device's next free level
    left = S
    xs0, xo0 = Xs[0], Xo[0]
    while left:
        top = level[xs0[ptr]]                        # >= BIG: a wait not levelled yet
        top += xo0[ptr]
        for xs, xo in zip(Xs[1:], Xo[1:]):
            np.maximum(top, level[xs[ptr]] + xo[ptr], out=top)
        ok = top < BIG
        k = int(np.count_nonzero(ok))
        if not k:
            _refuse(on_deadlock)
        left -= k
        np.maximum(after, top, out=top)
        level[ptr] = top                             # >= BIG where not ready: still not levelled
        top += length[ptr]
        np.copyto(after, top, where=ok)
        ptr += ok
    A = np.flatnonzero(anchor)
    sa = seg[A]
    return level[sa + segdev[sa]] + np.arange(len(A)) - hrank[sa]


def _times(N, a, b, waits, level) -> np.ndarray:
    """Start of every row, level by level (module docstring). At a level, each anchor starts at the
    max of its waits; its run (itself and the rows after it that wait only for their predecessor)
    is one running sum along [start, a0, b0, a1, b1, ...], numpy's add.accumulate, which adds in
    order: the partial sums are exactly end_k = (start_k + a_k) + b_k and start_k+1 = end_k.
    The sums are taken in place in one array V laid out beforehand, a block per level with a
    column per anchor of the level (`_layout`), so each level is three numpy calls: a (K, anchors)
    gather of its waits from V, their max into row 0 of its block, the running sums down it."""
    P, jrows, E, anchor = waits[:4]
    A = np.flatnonzero(anchor)
    size = np.diff(np.append(A, N))                                 # run lengths
    order = np.argsort(level, kind="stable")
    V, ends, starts, blocks, lb = _layout(N, a, b, A, size, order, level[order])
    apos = np.full(N + 1, -1, dtype=np.int64)
    apos[A[order]] = np.arange(len(A))
    ends = np.append(ends, len(V) - 1)                  # ref 2 N (zero): the last value of V, 0

    def where_in_v(refs):   # refs (2 r: start of r, 2 r + 1: end of r, 2 N: zero) -> places in V
        r = refs >> 1
        out = ends[r]
        st = np.flatnonzero((refs & 1) == 0)
        st = st[r.reshape(-1)[st] < N]                  # a start: the anchor's, or the end before
        r = r.reshape(-1)[st]
        out.reshape(-1)[st] = np.where(apos[r] >= 0, starts[apos[r]], ends[r - 1])
        return out
    Ao = A[order]
    Q = [where_in_v(q) for q in (c[Ao] for c in P) if (q < 2 * N).any()]
    if len(jrows):          # a collective of several members waits for all its members' waits
        EQ = where_in_v(E)
        for e in range(EQ.shape[1]):
            Q.append(np.full(len(A), ends[N], dtype=np.intp))
            Q[-1][apos[jrows]] = EQ[:, e]
    top, acc = np.maximum.reduce, np.add.accumulate
    for q, s, m in zip(_wait_blocks(Q, ends[N], lb), blocks[0], blocks[1]):
        top(V[q], axis=0, out=s)
        acc(m, axis=0, out=m)
    start = np.empty(N)
    start[1:] = V[ends[:N - 1]]                          # a run row starts at its predecessor's end
    start[Ao] = V[starts]
    return start


def _layout(N, a, b, A, size, order, lv):
    """The values of `_times`, V: per level a block (2 W + 1, n), n its anchors (columns, in level
    order), W its longest run: row 0 the anchor's start, rows 2 k + 1 and 2 k + 2 a and b of the
    k-th row of the run (0 past its end), the running sums turning them into the ends. V's last
    value is 0 (nobody's). Returns V, the place in V of each row's end and of each anchor's
    start, per level (row 0, block) views, and the levels' bounds in level order."""
    nA = len(A)
    L = int(lv[-1]) + 1 if nA else 0
    lb = np.searchsorted(lv, np.arange(L + 1))
    cnt = np.diff(lb)
    lvl = np.repeat(np.arange(L), cnt)
    los = np.minimum(lb[:-1], max(nA - 1, 0))              # every level has an anchor (_levels)
    Wl = np.maximum.reduceat(size[order], los) if nA else cnt
    off = np.concatenate([[0], np.cumsum((2 * Wl + 1) * cnt)])
    n_of = cnt[lvl]
    starts = off[lvl] + np.arange(nA) - lb[lvl]             # row 0 of the level's block
    # row r, the k-th of its anchor's run: a at row 2 k + 1 of the anchor's column, b below it
    col = np.empty(nA, dtype=np.intp)
    col[order] = np.arange(nA)
    n_r = np.repeat(n_of[col], size)
    at = np.arange(N) - np.repeat(A, size)
    at *= 2 * n_r
    at += n_r
    at += np.repeat(starts[col], size)
    V = np.zeros(int(off[-1]) + 1)
    V[at] = a
    at += n_r
    V[at] = b
    s0, ms = [], []
    for o0, o1, w, n in zip(off[:-1].tolist(), off[1:].tolist(), Wl.tolist(), cnt.tolist()):
        m = V[o0:o1].reshape(2 * w + 1, n)
        s0.append(m[0])
        ms.append(m)
    return V, at, starts, (s0, ms), lb


def _wait_blocks(Q, zero, lb) -> list:
    """Per level (bounds lb in level order): its anchors' waits (places in V, one list per column
    of Q) as a (K, n) block, real waits first, K the most real waits of an anchor of the level,
    the others padded with the place of zero."""
    nA, L = int(lb[-1]), len(lb) - 1
    cnt = np.diff(lb)
    lvl = np.repeat(np.arange(L), cnt)
    nw = np.zeros(nA, dtype=np.intp)
    for q in Q:
        nw += q != zero
    Kl = np.maximum(np.maximum.reduceat(nw, np.minimum(lb[:-1], max(nA - 1, 0))), 1) if nA else cnt
    off = np.concatenate([[0], np.cumsum(Kl * cnt)])
    QF = np.full(int(off[-1]), zero, dtype=np.intp)
    at = off[lvl] + np.arange(nA) - lb[lvl]
    n_of = cnt[lvl]
    for q in Q:
        real = np.flatnonzero(q != zero)
        QF[at[real]] = q[real]
        at[real] += n_of[real]
    return [QF[o0:o1].reshape(k, n) for o0, o1, k, n in zip(off[:-1].tolist(), off[1:].tolist(), Kl.tolist(),
                                                             cnt.tolist())]


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
