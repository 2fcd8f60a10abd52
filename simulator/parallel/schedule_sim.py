"""Timing of a pipeline schedule with fixed per-action times (a unit-time model).

Each device runs its action list in order; an action starts when the device is free and its
inputs have arrived (t_comm later if they crossed devices). Durations: F t_f, B t_b, W t_w,
BW t_b + t_w. Times are per action: for an interleaved schedule a chunk is 1/v of a device's
layers, so pass t_f/v, t_b/v, ... to compare with a non-interleaved schedule.

Quantities (Huang et al. 2019, GPipe; Narayanan et al. 2021, Sec. 2.2; Qi et al. 2023, zero bubble):
  bubble_time[d]   = makespan - busy time of device d
  bubble_fraction  = sum_d bubble_time[d] / (p * makespan)   ((p-1)/(m+p-1) for GPipe and 1F1B)
  span_bubble_time[d] = idle inside device d's own [first start, last end]: the bubble when the
    step has no synchronisation at its end (Qi et al. 2023's optimizer post-validation), the
    sense in which ZB-H2 has zero bubble
  peak_in_flight[d] = the most micro-batch activations device d holds at once. F adds one; the
    backward that frees them subtracts one: BW, or W in split schedules (W still reads the
    stored input activations to form dW = x^T dy, so B alone frees nothing). With v > 1 every
    (micro-batch, chunk) counts as one; a chunk holds 1/v of a stage's activations.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from simulator.errors import ParasimError
from simulator.parallel.schedule_check import action_arrays, check_counts, execute
from simulator.parallel.schedules import Schedule


@dataclass(frozen=True, eq=False)
class SimResult:
    """Timed schedule. `timeline[d]` = ((action, start, end), ...) in device d's order; the raw
    times are flat arrays over all actions, device d owning offsets[d]:offsets[d+1]."""

    schedule: Schedule
    starts: np.ndarray        # (n_actions,) start time of each action
    ends: np.ndarray          # (n_actions,)
    offsets: np.ndarray       # (p + 1,)
    makespan: float
    bubble_time: tuple        # per device, in the time unit of t_f
    bubble_fraction: float    # idle / (p * makespan)
    peak_in_flight: tuple     # per device, micro-batch (chunk) activations held at once
    span_bubble_time: tuple   # per device, idle between its own first start and last end

    @functools.cached_property
    def timeline(self) -> tuple:
        """Per device ((action, start, end), ...); built on first use (p*m*2 tuples can be many)."""
        s, e, off = self.starts.tolist(), self.ends.tolist(), self.offsets.tolist()
        return tuple(tuple(zip(row, s[off[d]:off[d + 1]], e[off[d]:off[d + 1]]))
                     for d, row in enumerate(self.schedule.actions))

    @property
    def busy_time(self) -> tuple:
        return tuple(self.makespan - b for b in self.bubble_time)

    def to_dict(self) -> dict:
        """Plain data: the schedule's name, p, m, v and the timing per device (no timeline).
        dataclasses.asdict also works (it copies the schedule and the raw time arrays)."""
        s = self.schedule
        return {"schedule": s.name, "p": s.p, "m": s.m, "v": s.v, "makespan": float(self.makespan),
                "bubble_fraction": float(self.bubble_fraction), "bubble_time": [float(x) for x in self.bubble_time],
                "span_bubble_time": [float(x) for x in self.span_bubble_time],
                "peak_in_flight": [int(x) for x in self.peak_in_flight]}

    def __repr__(self) -> str:
        return (f"SimResult({self.schedule.name}, p={self.schedule.p}, m={self.schedule.m}, "
                f"v={self.schedule.v}: makespan {self.makespan:g}, bubble {self.bubble_fraction:.3f}, "
                f"peak in flight {max(self.peak_in_flight)})")


def peak_in_flight(schedule: Schedule) -> tuple[int, ...]:
    """Per device, the most (micro-batch, chunk) activations it holds at once (module docstring):
    counted along its own action list, which needs no timing."""
    arrays = action_arrays(schedule)
    return _peaks(arrays[0], arrays[4])


def _peaks(kind: np.ndarray, offsets: np.ndarray) -> tuple[int, ...]:
    # +1 per F, -1 per BW or W (the action that frees the activations); B changes nothing
    lo, hi = offsets[:-1], offsets[1:]
    held = np.cumsum(np.select([kind == 0, (kind == 2) | (kind == 3)], [1, -1], 0))
    before = np.concatenate([[0], held])[lo]  # running count at each device's start
    return tuple(int(max(held[a:b].max() - base, 0)) if b > a else 0 for a, b, base in zip(lo, hi, before))


# one stage's forward, input-gradient and weight-gradient time per micro-batch, and the stage-to-stage
# transfer: the defaults of every door that times a schedule (simulate_schedule,
# schedule_registry.time_schedule, sweep and the app's Pipelines page)
DEFAULT_TIMES = {"t_f": 1.0, "t_b": 1.0, "t_w": 1.0, "t_comm": 0.0}


def simulate_schedule(schedule: Schedule, t_f: float = DEFAULT_TIMES["t_f"], t_b: float = DEFAULT_TIMES["t_b"],
                      t_w: float = DEFAULT_TIMES["t_w"], t_comm: float = DEFAULT_TIMES["t_comm"]) -> SimResult:
    """Event-driven timing of `schedule`; raises ParasimError if it is invalid or deadlocks."""
    if min(t_f, t_b, t_w, t_comm) < 0:
        raise ParasimError(f"times must be >= 0, got t_f={t_f}, t_b={t_b}, t_w={t_w}, t_comm={t_comm}")
    arrays = action_arrays(schedule)
    check_counts(schedule, arrays)
    starts, ends = execute(schedule, {"F": t_f, "B": t_b, "W": t_w, "BW": t_b + t_w}, t_comm, arrays)
    kind, offsets = arrays[0], arrays[4]
    p, lo, hi = schedule.p, offsets[:-1], offsets[1:]
    makespan = float(ends.max()) if len(ends) else 0.0
    has = hi > lo  # devices with at least one action; shapes (p,)
    busy = np.array([math.fsum(ends[a:b] - starts[a:b]) for a, b in zip(lo, hi)])
    first = np.where(has, starts[np.minimum(lo, len(starts) - 1)] if len(starts) else 0.0, 0.0)
    last = np.where(has, ends[np.maximum(hi - 1, 0)] if len(ends) else 0.0, 0.0)
    peaks = _peaks(kind, offsets)
    bubbles = tuple(float(makespan - x) for x in busy)
    spans = tuple(float(x) for x in np.where(has, last - first - busy, 0.0))
    fraction = math.fsum(bubbles) / (p * makespan) if makespan > 0 else 0.0
    return SimResult(schedule, starts, ends, offsets, makespan, bubbles, fraction, tuple(peaks), spans)
