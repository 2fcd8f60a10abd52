"""Traces: what each device did and when, on the simulated clock, with wall time kept beside it.

Timestamps come from a clock that prices the program (simulator/cost/clock.py), so a trace is
deterministic and identical whichever runtime executed the program. Memory samples are the bytes
a device really held after an instruction (counted by the runtime), placed at that instruction's
simulated end time. Exports: Chrome trace JSON (opens in Perfetto, with flow arrows from each
send to its receive, and memory counters) and CSV.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field, replace

import numpy as np

LANES = ("compute", "comm")
# The five parts of a step, defined in Trace.step_breakdown (they add up to 100%)
STEP_PARTS = ("compute", "exposed_comm", "bubble", "other_idle", "optimizer")
STEP_PART_LABELS = {"compute": "compute", "exposed_comm": "exposed communication", "bubble": "pipeline bubble",
                    "other_idle": "other idle", "optimizer": "optimizer"}
# The steps of a collective, expanded (simulate(collective_steps=True)): each chunk transfer as a
# send on the source's "send" lane and a receive on the destination's "recv" lane, one flow
# arrow between them. Apart from "comm" so its statistics (bytes, busy time) count each byte once.
STEP_LANES = ("send", "recv")


@dataclass(slots=True)
class TraceEvent:
    """One bar of the timeline. Treated as a value (never mutated; use dataclasses.replace), but
    not frozen: a frozen dataclass is 7x slower to build, and a paper-scale trace holds ~1e6."""

    device: int
    lane: str  # compute | comm
    name: str
    start_s: float
    duration_s: float
    phase: str = "forward"  # forward | backward | wgrad | optimizer | comm | other (faults: lost | failure | recovery)
    kind: str = ""  # collective kind, "send"/"recv", or the kernel name
    nbytes: int = 0
    flops: float = 0.0
    microbatch: int | None = None
    step: int = 0
    flow: int | None = None  # send/recv pairs share a flow id
    attempt: int = 0  # 0: first execution of the step; k > 0: its k-th replay after a failure

    @property
    def replayed(self) -> bool:
        return self.attempt > 0
    group: tuple[int, ...] = ()  # a collective's ranks (which mesh axis it runs on)
    chunk: int | None = None  # the chunk (slot) a collective step moves (send/recv lanes)

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class MemorySample:
    device: int
    time_s: float
    bytes_by_category: dict[str, int]
    step: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_category.values())


@dataclass
class Trace:
    n_devices: int
    events: list[TraceEvent] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    wall_time_s: float | None = None  # measured by a real run, kept beside the simulated time
    name: str = ""
    # Is every step a pipeline (idle time is its bubble)? None: a step is when its devices send/recv
    pipelined: bool | None = None

    # ---- statistics -------------------------------------------------------------------------
    @property
    def makespan_s(self) -> float:
        return max((e.end_s for e in self.events), default=0.0)

    def lane_busy_s(self, device: int, lane: str) -> float:
        """Union length of the device's intervals on one lane."""
        return union_length([(e.start_s, e.end_s) for e in self.events if e.device == device and e.lane == lane])

    def device_stats(self) -> list[dict]:
        """Per device: the five parts of `step_breakdown` in seconds (compute_s, exposed_comm_s,
        bubble_s, other_idle_s, optimizer_s; they add up to the makespan), the communication lane's
        busy time comm_s (hidden or not), idle_s = bubble_s + other_idle_s, and fractions of the run."""
        span = self.makespan_s
        if self.pipelined is None:
            pipelined_steps = {e.step for e in self.events if e.kind in ("send", "recv")}
        else:
            pipelined_steps = {e.step for e in self.events} if self.pipelined else set()
        step_spans = step_windows(self.events)
        by_device: dict[int, list[TraceEvent]] = {d: [] for d in range(self.n_devices)}
        for e in self.events:
            by_device.setdefault(e.device, []).append(e)
        stats = []
        for d in range(self.n_devices):
            mine = by_device[d]
            # kernels first, then the optimizer, then communication (`priority_partition`)
            cls = np.array([2 if e.lane == "comm" else int(e.phase == "optimizer") for e in mine], dtype=np.int64)
            start = np.array([e.start_s for e in mine], dtype=float)
            end = np.array([e.end_s for e in mine], dtype=float)
            compute_s, optimizer_s, exposed_s = priority_partition(start, end, cls, 3)
            idle = uncovered(sorted(zip(start.tolist(), end.tolist())), 0.0, span)
            bubble_s = sum(_overlap(idle, w) for k, w in step_spans.items() if k in pipelined_steps)
            idle_s = max(span - (compute_s + optimizer_s + exposed_s), 0.0)
            comm = [(e.start_s, e.end_s) for e in mine if e.lane == "comm"]
            row = {"device": d, "compute_s": compute_s, "optimizer_s": optimizer_s,
                   "exposed_comm_s": exposed_s, "bubble_s": min(bubble_s, idle_s),
                   "other_idle_s": max(idle_s - bubble_s, 0.0), "comm_s": union_length(comm), "idle_s": idle_s}
            row.update({f"{k[:-2]}_fraction": (row[k] / span if span > 0 else 0.0)
                        for k in ("compute_s", "optimizer_s", "exposed_comm_s", "bubble_s", "other_idle_s", "comm_s",
                                  "idle_s")})
            stats.append(row)
        return stats

    @property
    def steps(self) -> int:
        """Number of training steps the trace holds (distinct `step` values; at least 1)."""
        return max(len({e.step for e in self.events}), 1)

    @property
    def step_time_s(self) -> float:
        """Simulated time of one step: the makespan divided by the number of steps."""
        return self.makespan_s / self.steps

    def step_breakdown(self) -> dict[str, float]:
        """Where the devices' time goes, as fractions of devices x simulated time (they add up to 1).
        This is parasim's one accounting of a step (the CLI's JSON, the app and the lessons use it):

        - compute: a device runs a kernel of the model (forward, backward, weight gradient; also work
          later lost to a failure, and the recovery);
        - exposed communication: its communication lane is busy while its compute lane is not (a
          collective or a send/recv that nothing hides);
        - pipeline bubble: it is idle (neither lane busy) inside a step whose program passes
          activations between devices (send/recv): a stage waits for its input or its gradient;
        - other idle: idle outside such steps (waiting for a slower device, a straggler);
        - optimizer: it updates the weights (the optimizer phase).

        For a pipeline with equal micro-batch times and free communication the bubble is
        (p-1)/(m+p-1) (Narayanan et al. 2021, Sec. 2.2); a data-parallel step has no bubble, and the
        time its devices wait for the gradient all-reduce is exposed communication."""
        span = self.makespan_s
        if span <= 0:
            return {k: 0.0 for k in STEP_PARTS}
        stats = self.device_stats()
        return {k: sum(s[f"{k}_s"] for s in stats) / (self.n_devices * span) for k in STEP_PARTS}

    def bubble_fraction(self) -> float:
        """The pipeline bubble's share of devices x simulated time (see `step_breakdown`)."""
        return self.step_breakdown()["bubble"]

    def bytes_by_collective(self) -> dict[str, int]:
        """Bytes sent by all devices, per collective kind (and 'send' for point-to-point)."""
        out: dict[str, int] = {}
        for e in self.events:
            if e.lane == "comm" and e.kind != "recv":
                out[e.kind] = out.get(e.kind, 0) + e.nbytes
        return out

    def time_by_collective(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for e in self.events:
            if e.lane == "comm" and e.kind != "recv":
                out[e.kind] = out.get(e.kind, 0.0) + e.duration_s
        return out

    def peak_memory_bytes(self) -> list[int]:
        peak = [0] * self.n_devices
        for s in self.memory:
            peak[s.device] = max(peak[s.device], s.total_bytes)
        return peak

    def summary(self) -> dict:
        return {
            "simulated_time_s": self.makespan_s, "steps": self.steps, "step_time_s": self.step_time_s,
            "wall_time_s": self.wall_time_s, "bubble_fraction": self.bubble_fraction(),
            "step_breakdown": self.step_breakdown(), "bytes_by_collective": self.bytes_by_collective(),
            "peak_memory_bytes_per_device": self.peak_memory_bytes(),
        }

    # ---- composition ------------------------------------------------------------------------
    def append(self, other: "Trace") -> "Trace":
        """Concatenate `other` after this trace (for multi-step runs); returns self."""
        t0 = self.makespan_s
        self.events += [replace(e, start_s=e.start_s + t0) for e in other.events]
        self.memory += [replace(s, time_s=s.time_s + t0) for s in other.memory]
        if other.wall_time_s is not None:
            self.wall_time_s = (self.wall_time_s or 0.0) + other.wall_time_s
        return self

    # ---- exports ----------------------------------------------------------------------------
    def chrome_time_scale(self) -> float:
        """The factor (a power of 10, at least 1) by which `to_chrome` stretches time so that the
        shortest event lasts at least 1 ns: Perfetto stores timestamps in whole nanoseconds and
        drops shorter slices (a tiny model priced on an H100 has sub-ns kernels)."""
        shortest = min((e.duration_s for e in self.events if e.duration_s > 0), default=1.0)
        scale = 1.0
        while shortest * scale < 1e-9 and scale < 1e12:
            scale *= 10.0
        return scale

    def to_chrome(self, time_scale: float | None = None) -> dict:
        """Chrome trace event format: one process per device, one thread per lane, times in us
        (multiplied by `time_scale`, by default `chrome_time_scale()`; the factor is recorded in
        otherData and in the trace's name); flow events ("s"/"f") draw an arrow from each send to its
        receive; "C" counters draw memory."""
        k = self.chrome_time_scale() if time_scale is None else float(time_scale)
        us = 1e6 * k
        ev = []
        used = {e.lane for e in self.events}
        lanes = LANES + tuple(lane for lane in STEP_LANES if lane in used)
        for d in range(self.n_devices):
            ev.append({"ph": "M", "name": "process_name", "pid": d, "args": {"name": f"device {d}"}})
            for tid, lane in enumerate(lanes):
                name = lane if lane in LANES else f"comm steps: {lane}"
                ev.append({"ph": "M", "name": "thread_name", "pid": d, "tid": tid, "args": {"name": name}})
        for e in self.events:
            args = {"phase": e.phase, "kind": e.kind, "nbytes": e.nbytes, "flops": e.flops, "step": e.step}
            if e.microbatch is not None:
                args["microbatch"] = e.microbatch
            if e.attempt:
                args["attempt"], args["replayed"] = e.attempt, True
            if e.group:
                args["group"] = list(e.group)
            if e.chunk is not None:
                args["chunk"] = e.chunk
            tid = lanes.index(e.lane)
            ev.append({"ph": "X", "name": e.name, "cat": e.phase, "pid": e.device, "tid": tid,
                       "ts": e.start_s * us, "dur": e.duration_s * us, "args": args})
            if e.flow is not None and e.kind in ("send", "recv"):
                ph = "s" if e.kind == "send" else "f"
                # Perfetto binds "s" (and "f" with bp=e) to the slice enclosing ts on its thread: the
                # midpoint is strictly inside this send/recv, its edges touch back-to-back neighbours
                ts = e.start_s + e.duration_s / 2
                flow = {"ph": ph, "name": "p2p", "cat": "p2p", "id": e.flow, "pid": e.device, "tid": tid,
                        "ts": ts * us}
                if ph == "f":
                    flow["bp"] = "e"
                ev.append(flow)
        for s in self.memory:
            ev.append({"ph": "C", "name": "memory bytes", "pid": s.device, "ts": s.time_s * us,
                       "args": dict(s.bytes_by_category)})
        name = self.name if k == 1 else f"{self.name} (time x{k:g}: 1 us shown = {1 / k:g} us simulated)"
        return {"traceEvents": ev, "displayTimeUnit": "ns" if k > 1 or self.makespan_s < 1e-3 else "ms",
                "otherData": {"name": name, "wall_time_s": self.wall_time_s, "time_scale": k}}

    def to_chrome_json(self) -> str:
        return json.dumps(self.to_chrome())

    def save_chrome(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.to_chrome_json())

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = ["device", "lane", "name", "start_s", "duration_s", "phase", "kind", "nbytes", "flops",
                "microbatch", "step"]
        w = csv.writer(buf)
        w.writerow(cols)
        for e in self.events:
            w.writerow([getattr(e, c) for c in cols])
        return buf.getvalue()


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping [start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def merged_segments(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The merged segments (first start, reach) of intervals sorted by start: `trace.union_length`'s
    segments, the same floats. An interval starting where the one before it starts never opens one."""
    if len(start) == 0:
        return start, end
    reach = np.maximum.accumulate(end)             # the merged segment's end so far
    first = np.ones(len(start), dtype=bool)
    first[1:] = start[1:] > reach[:-1]             # a gap before it: a new segment starts
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], len(start)) - 1
    return start[heads], reach[tails]


def priority_partition(start: np.ndarray, end: np.ndarray, cls: np.ndarray, n_classes: int) -> list[float]:
    """One device's timeline split among classes taken in priority order: class i holds the
    instants that an interval of class i covers and no interval of an earlier class does (the
    union of classes 0..i less that of 0..i-1); every instant goes to one class at most, the rest
    is idle. The one rule by which a step is divided, for real-run traces
    (`Trace.device_stats`: kernels, optimizer, communication) and scale traces
    (`cost.step_breakdown.trace_breakdown`: kernels by phase, communication by what it serves)."""
    order = np.argsort(start, kind="stable")
    start, end, cls = start[order], end[order], cls[order]
    out, before = [], 0.0
    for i in range(n_classes):
        sel = cls <= i
        heads, reach = merged_segments(start[sel], end[sel])
        total = sum((reach - heads).tolist())
        out.append(total - before)
        before = total
    return out


def step_windows(events) -> dict[int, tuple[float, float]]:
    """Per step: (first start, last end) over all devices."""
    out: dict[int, tuple[float, float]] = {}
    for e in events:
        lo, hi = out.get(e.step, (e.start_s, e.end_s))
        out[e.step] = (min(lo, e.start_s), max(hi, e.end_s))
    return out


def uncovered(sorted_intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of [lo, hi] that no interval covers."""
    out, cur = [], lo
    for s, e in sorted_intervals:
        if s > cur:
            out.append((cur, min(s, hi)))
        cur = max(cur, e)
    if cur < hi:
        out.append((cur, hi))
    return [(a, b) for a, b in out if b > a]


def _overlap(intervals: list[tuple[float, float]], window: tuple[float, float]) -> float:
    lo, hi = window
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)
