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

from .trace import Trace, TraceEvent

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

    @property
    def events(self) -> list[TraceEvent]:
        if self._events is None:
            self._events = materialise(self.columns, self.step)
        return self._events

    @events.setter
    def events(self, value) -> None:
        self._events = value

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
