"""What each row of a columnar program waits for, for the vectorised clock (`clock_columns`).

A row starts at the max of the values it waits for (the lanes' previous rows, the writers of its
inputs, its send's start); waits that can never be the max are pruned, exactly (ends never
decrease along a lane or a chain of rows each waiting for the one before), so most rows wait for
their predecessor only and are priced in one running sum with it (`_anchors`).
"""

from __future__ import annotations

import numpy as np

from ..program_columns import COLLECTIVE, COMPUTE, RECV, SEND, ProgramColumns, last_writers


def _lane_refs(dev: np.ndarray, lane: np.ndarray, dt) -> np.ndarray:
    """Per row: the end of the previous row of its device in the lane (a lane member with one), or
    2 N (zero)."""
    N = len(dev)
    col = np.full(N, 2 * N, dtype=dt)
    rows = np.flatnonzero(lane)
    if len(rows) > 1:
        col[rows[1:]] = 2 * rows[:-1] + 1
        d = dev[rows]
        col[rows[1:][d[1:] != d[:-1]]] = 2 * N       # a device's first row in the lane
    return col


def _last_writers(cols: ProgramColumns) -> tuple[np.ndarray, np.ndarray]:
    """(row, row that last wrote one of its inputs on its device, earlier in program order)."""
    N = len(cols)
    rrow = np.repeat(np.arange(N), np.diff(cols.reads_ptr))
    wrow = np.repeat(np.arange(N), np.diff(cols.writes_ptr))
    return last_writers(cols.dev, rrow, cols.reads, wrow, cols.writes, N)


def waits_of(cols: ProgramColumns):
    """What each row waits for, as refs: 2 r is the start of row r, 2 r + 1 its end, 2 N zero.
    P, K columns of N refs: per row at most one ref per lane and its send's start (a recv). Only
    the latest row of a lane counts: a lane's ends never decrease in program order (each row
    starts after the lane's previous end), so an earlier row of the same lane is never the max.
    Lanes: compute (compute rows, blocking collectives), comm (sends, recvs, blocking
    collectives), the non-blocking stream. A row that takes a lane waits for its previous row; the
    writers of its inputs count lane by lane for the lanes it does not take. (jrows, E): the rows
    of collectives of several members and the refs of all their members (they all start when the
    last is ready). Then the anchors (`_anchors`) and the waits across devices (`_cross`)."""
    N, kind, dev = len(cols), cols.kind, cols.dev
    dt = np.int32 if 2 * N + 1 < 2 ** 31 else np.int64
    coll = kind == COLLECTIVE
    block = coll & cols.blocking
    lanes = ((kind == COMPUTE) | block, (kind == SEND) | (kind == RECV) | block, coll & ~cols.blocking)
    r, w = cols.deps if cols.deps is not None else _last_writers(cols)
    P = []
    for lane in lanes:
        if not lane.any():
            continue
        col = _lane_refs(dev, lane, dt)
        on = lane[w] & ~lane[r]          # a row on the lane already waits for its latest row
        if on.any():                     # (so these rows are not on the lane: no previous row)
            rows, latest = _latest(r[on], w[on], N)
            col[rows] = 2 * latest + 1
        P.append(col)
    rcv = np.flatnonzero(kind == RECV)
    if len(rcv):
        col = np.full(N, 2 * N, dtype=dt)
        col[rcv] = 2 * cols.match[rcv]
        P.append(col)
    if not P:
        P.append(np.full(N, 2 * N, dtype=dt))
    P = _prune(P)
    jrows = np.flatnonzero(cols.join >= 0)
    E = _member_waits(cols, P, jrows)
    return P, jrows, E, _anchors(cols, P, jrows), _cross(cols, P[-1] if len(rcv) else None, rcv, jrows, E)


def _latest(rows: np.ndarray, writers: np.ndarray, N: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows and the latest writer of each (a row may read several tensors)."""
    if len(rows) < 2 or (np.diff(rows) > 0).all():
        return rows, writers
    top = np.full(N, -1, dtype=np.int64)
    np.maximum.at(top, rows, writers)
    got = np.flatnonzero(top >= 0)
    return got, top[got]


def _cross(cols, rcol, rcv, jrows, E) -> tuple[np.ndarray, np.ndarray]:
    """(row, row it waits for on another device), by row: only a recv (its send, rcol) and a member
    of a collective (its other members' waits) wait across devices; lanes and writers are per device."""
    N, dev = len(cols), cols.dev
    xr, xw = rcv[:0], rcv[:0]
    if len(rcv):
        w = rcol[rcv] // 2
        on = w < N
        on[on] = dev[w[on]] != dev[rcv[on]]
        xr, xw = rcv[on], w[on].astype(np.int64)
    if len(jrows):
        ew = E // 2
        on = ew < N
        on[on] = dev[ew[on]] != np.broadcast_to(dev[jrows][:, None], ew.shape)[on]
        i, _ = np.nonzero(on)
        xr, xw = np.concatenate([xr, jrows[i]]), np.concatenate([xw, ew[on].astype(np.int64)])
        o = np.argsort(xr, kind="stable")
        xr, xw = xr[o], xw[o]
    return xr, xw


RUN = 64     # rows priced in one step after an anchor at most (bounds the padding of `_times`)


def _any_eq(cols: list, x: np.ndarray) -> np.ndarray:
    """Is x equal to one of the columns (numpy reduces short rows of a 2-d array slowly)?"""
    out = cols[0] == x
    for c in cols[1:]:
        out |= c == x
    return out


def _prune(P: list) -> list:
    """Drop duplicate waits, and when a row waits for the end of the row before it, its waits for
    earlier rows of the chain of rows before it that each wait for their predecessor's end: along
    the chain end(u) <= start(u + 1) <= end(u + 1) (durations are >= 0), so the max is the same.
    Rows then often wait for their predecessor only (`_anchors`)."""
    if len(P) == 1:
        return P
    N, dt = len(P[0]), P[0].dtype
    prev_end = np.arange(-1, 2 * N - 1, 2, dtype=dt)
    has_prev = _any_eq(P, prev_end)
    # rows head(r - 1) + 1 .. r - 1 each wait for the end of the row before them, so the start or
    # end of any row u in head(r - 1) .. r - 1 is at most end(r - 1)
    heads = np.flatnonzero(~has_prev).astype(dt)          # row 0 is one (no ref is -1)
    chain = np.empty(N, dtype=dt)
    chain[0] = 0
    chain[1:] = np.repeat(2 * heads, np.diff(np.append(heads, N)))[:-1]
    chain[~has_prev] = prev_end[~has_prev]                # no chain: drop nothing
    out = []
    for i, x in enumerate(P):
        drop = x >= chain
        drop &= x < prev_end
        if i:
            drop |= _any_eq(P[:i], x)
        out.append(np.where(drop, dt.type(2 * N), x))
    return out


def _anchors(cols, P, jrows) -> np.ndarray:
    """Rows whose only wait is the end of the row before them on their device are priced in one
    step with it, by an exact running sum (`_times`); the others are anchors of such runs."""
    N = len(cols)
    prev = np.arange(-1, 2 * N - 1, 2, dtype=P[0].dtype)
    count = (P[0] < 2 * N).astype(np.int8)
    for c in P[1:]:
        count += c < 2 * N
    single = (count == 1) & _any_eq(P, prev)
    single[np.searchsorted(cols.dev, np.arange(cols.n_devices))[:min(cols.n_devices, N)]] = False
    single[jrows] = False
    anchor = ~single
    at = np.flatnonzero(anchor)
    size = np.diff(np.append(at, N))
    if len(size) and size.max() > RUN:               # split runs longer than RUN
        run = np.arange(N) - np.repeat(at, size)
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
    g, K = int(size.max()), len(P)
    E = np.full((len(srt), g * K), 2 * len(cols), dtype=np.int64)
    for k in range(g):       # member k of each collective contributes its waits to all members
        has = k < size
        at = srt[first[has] + k]
        E[has, k * K:(k + 1) * K] = np.stack([c[at] for c in P], axis=1)
    out = np.empty_like(E)
    out[order] = E
    return out
