"""A Trace held as columns (start, duration, device, lane, ...), its events built on first use.

The vectorised clock (`simulator.cost.clock_columns`) prices a million-instruction program in a
fraction of a second; building a million `TraceEvent` objects would take longer than that. So its
trace keeps numpy columns and materialises `events` only when a consumer reads them (viz, the
Chrome/CSV exports, statistics): every consumer of `Trace` works unchanged. The makespan is read
from the columns directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trace import Trace, TraceEvent, merged_segments

LANE_NAMES = ("compute", "comm")


@dataclass(frozen=True, eq=False)
class EventColumns:
    """One row per event. meta indexes `metas`: (name format with {j} for the micro-batch, phase,
    kind, group); microbatch and flow are -1 for None."""

    device: np.ndarray
    lane: np.ndarray
    meta: np.ndarray
    start_s: np.ndarray
    duration_s: np.ndarray
    nbytes: np.ndarray
    flops: np.ndarray
    microbatch: np.ndarray
    flow: np.ndarray
    metas: tuple

    def __len__(self) -> int:
        return len(self.device)


class ColumnTrace(Trace):
    """A `Trace` whose events live in `EventColumns` until first read (module docstring)."""

    def __init__(self, n_devices: int, columns: EventColumns, name: str = "", step: int = 0):
        super().__init__(n_devices, name=name)
        self.columns, self.step = columns, step
        self._events = None
        self._lane_order = None

    @property
    def events(self) -> list[TraceEvent]:
        if self._events is None:
            self._events = materialise(self.columns, self.step)
        return self._events

    @events.setter
    def events(self, value) -> None:
        self._events = value

    def lane_order(self) -> tuple[np.ndarray, np.ndarray]:
        """`lane_order` of the columns, computed once (statistics and drawing share it)."""
        if self._lane_order is None:
            self._lane_order = lane_order(self.columns, self.n_devices)
        return self._lane_order

    @property
    def makespan_s(self) -> float:
        if self._events is not None or len(self.columns) == 0:
            return Trace.makespan_s.fget(self)
        c = self.columns
        return float((c.start_s + c.duration_s).max())


def materialise(c: EventColumns, step: int) -> list[TraceEvent]:
    """The TraceEvent objects of the columns, in row order."""
    names = []
    for fmt, *_ in c.metas:
        names.append(fmt if "{" not in fmt else None)
    out = []
    add, new = out.append, TraceEvent
    metas, lanes = c.metas, LANE_NAMES
    for d, ln, m, s, du, nb, fl, mb, fw in zip(c.device.tolist(), c.lane.tolist(), c.meta.tolist(),
                                                 c.start_s.tolist(), c.duration_s.tolist(), c.nbytes.tolist(),
                                                 c.flops.tolist(), c.microbatch.tolist(), c.flow.tolist()):
        fmt, phase, kind, group = metas[m]
        name = names[m]
        if name is None:
            name = fmt.format(j=mb)
        add(new(d, lanes[ln], name, s, du, phase, kind, nb, fl, None if mb < 0 else mb, step,
                None if fw < 0 else fw, 0, group))
    return out


def time_order(group: np.ndarray, start: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): the rows by group, then by start, ties in row order (a stable sort by
    (group, start)); group g's rows are order[bounds[g]:bounds[g + 1]]. A device's lane is mostly
    in time order already (its program order), so only groups that are not are sorted."""
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(n_groups + 1))
    st = start[order]
    late = np.flatnonzero(st[1:] < st[:-1]) + 1          # rows that start before the row before them
    if len(late):
        for g in np.unique(np.searchsorted(bounds, late, side="right") - 1).tolist():
            lo, hi = bounds[g], bounds[g + 1]
            order[lo:hi] = order[lo:hi][np.argsort(st[lo:hi], kind="stable")]
    return order, bounds


def lane_order(c: EventColumns, n_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """`time_order` of the rows by lane group device * 2 + lane (compute 0, comm 1), then start."""
    k = len(LANE_NAMES)
    return time_order(c.device * k + c.lane, c.start_s, n_devices * k)


def lane_busy_s(c: EventColumns, n_devices: int, order=None) -> tuple[list[float], list[float], list[float]]:
    """Per device: busy time of its compute lane, of its comm lane, and of either: the interval
    unions of `trace.union_length` (the same segments summed in the same order, so the same floats).
    order: `lane_order(c, n_devices)` when the caller has it."""
    order, bounds = order or lane_order(c, n_devices)
    end = c.start_s + c.duration_s
    out: tuple[list[float], list[float], list[float]] = ([], [], [])
    for d in range(n_devices):
        lanes = []
        for g in (2 * d, 2 * d + 1):
            rows = order[bounds[g]:bounds[g + 1]]
            lanes.append(merged_segments(c.start_s[rows], end[rows]))
        s = np.concatenate([lanes[0][0], lanes[1][0]])
        e = np.concatenate([lanes[0][1], lanes[1][1]])
        by_start = np.argsort(s, kind="stable")
        lanes.append(merged_segments(s[by_start], e[by_start]))
        for k, (heads, reach) in enumerate(lanes):
            out[k].append(sum((reach - heads).tolist()))
    return out
