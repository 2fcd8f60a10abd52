"""Timing of a pipeline schedule with fixed per-action times (a unit-time model).

Each device runs its action list in order; an action starts when the device is free and its
inputs have arrived (t_comm later if they crossed devices). Durations: F t_f, B t_b, W t_w,
BW t_b + t_w. Times are per action: for an interleaved schedule a chunk is 1/v of a device's
layers, so pass t_f/v, t_b/v, ... to compare with a non-interleaved schedule.

Quantities (/work/shared/REFERENCES.md §4):
  bubble_time[d]   = makespan - busy time of device d
  bubble_fraction  = sum_d bubble_time[d] / (p * makespan)   ((p-1)/(m+p-1) for GPipe and 1F1B)
  peak_in_flight[d] = the most micro-batch activations device d holds at once. F adds one; the
    backward that frees them subtracts one: BW, or W in split schedules (W still reads the
    stored input activations to form dW = x^T dy, so B alone frees nothing). With v > 1 every
    (micro-batch, chunk) counts as one; a chunk holds 1/v of a stage's activations.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ParasimError
from simulator.parallel.schedule_check import check_counts, execute
from simulator.parallel.schedules import Schedule


@dataclass(frozen=True)
class SimResult:
    """Timed schedule: timeline[d] = ((action, start, end), ...) in device d's order."""

    schedule: Schedule
    timeline: tuple
    makespan: float
    bubble_time: tuple        # per device, in the time unit of t_f
    bubble_fraction: float    # idle / (p * makespan)
    peak_in_flight: tuple     # per device, micro-batch (chunk) activations held at once

    @property
    def busy_time(self) -> tuple:
        return tuple(self.makespan - b for b in self.bubble_time)

    def __repr__(self) -> str:
        return (f"SimResult({self.schedule.name}, p={self.schedule.p}, m={self.schedule.m}, "
                f"v={self.schedule.v}: makespan {self.makespan:g}, bubble {self.bubble_fraction:.3f}, "
                f"peak in flight {max(self.peak_in_flight)})")


def simulate(schedule: Schedule, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0,
             t_comm: float = 0.0) -> SimResult:
    """Event-driven timing of `schedule`; raises ParasimError if it is invalid or deadlocks."""
    if min(t_f, t_b, t_w, t_comm) < 0:
        raise ParasimError(f"times must be >= 0, got t_f={t_f}, t_b={t_b}, t_w={t_w}, t_comm={t_comm}")
    check_counts(schedule)
    times = execute(schedule, {"F": t_f, "B": t_b, "W": t_w, "BW": t_b + t_w}, t_comm)
    makespan = max((row[-1][1] for row in times if row), default=0.0)
    timeline, bubbles, peaks = [], [], []
    for row, spans in zip(schedule.actions, times):
        timeline.append(tuple((a, s, e) for a, (s, e) in zip(row, spans)))
        bubbles.append(makespan - sum(e - s for s, e in spans))
        held = peak = 0
        for a in row:
            if a.kind == "F":
                held += 1
                peak = max(peak, held)
            elif a.kind in ("BW", "W"):
                held -= 1
        peaks.append(peak)
    fraction = sum(bubbles) / (schedule.p * makespan) if makespan > 0 else 0.0
    return SimResult(schedule, tuple(timeline), makespan, tuple(bubbles), fraction, tuple(peaks))
