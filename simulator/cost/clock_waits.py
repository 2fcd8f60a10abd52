"""What each row of a columnar program waits for, for the vectorised clock (`clock_columns`).

A row starts at the max of the values it waits for (the lanes' previous rows, the writers of its
inputs, its send's start); waits that can never be the max are pruned, exactly (ends never
decrease along a lane or a chain of rows each waiting for the one before), so most rows wait for
their predecessor only and are priced in one running sum with it (`_anchors`).
"""

from __future__ import annotations

import numpy as np

from ..program_columns import COLLECTIVE, COMPUTE, RECV, SEND, ProgramColumns


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


def waits_of(cols: ProgramColumns):
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
    the max is the same; and its waits for earlier rows of the chain of rows before it that each
    wait for their predecessor's end (their ends never decrease along the chain). Rows then often
    wait for their predecessor only (`_anchors`)."""
    N, K = P.shape
    if K == 1:
        return P
    cols = [np.ascontiguousarray(P[:, k]) for k in range(K)]
    before = [np.concatenate([[2 * N], c[:-1]]) for c in cols]
    prev_end = 2 * np.arange(N, dtype=P.dtype) - 1
    has_prev = _any_eq(cols, prev_end)
    # rows head(r - 1) + 1 .. r - 1 each wait for the end of the row before them, so the start or
    # end of any row u in head(r - 1) .. r - 1 is at most end(r - 1)
    head = np.maximum.accumulate(np.where(has_prev, 0, np.arange(N, dtype=P.dtype)))
    chain = 2 * np.concatenate([[0], head[:-1]])
    out = []
    for i, x in enumerate(cols):
        drop = has_prev & (x != prev_end) & ((((x & 1) == 1) & _any_eq(before, x)) | ((x >= chain) & (x < prev_end)))
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
