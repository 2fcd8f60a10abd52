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

LANES = ("compute", "comm")
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

    # ---- statistics -------------------------------------------------------------------------
    @property
    def makespan_s(self) -> float:
        return max((e.end_s for e in self.events), default=0.0)

    def lane_busy_s(self, device: int, lane: str) -> float:
        """Union length of the device's intervals on one lane."""
        return _union_length([(e.start_s, e.end_s) for e in self.events if e.device == device and e.lane == lane])

    def device_stats(self) -> list[dict]:
        """Per device: compute, communication (union of the comm lane), exposed communication
        (comm not hidden under compute), idle time of the compute lane, and fractions of the step."""
        span = self.makespan_s or 1.0
        stats = []
        for d in range(self.n_devices):
            comp = [(e.start_s, e.end_s) for e in self.events if e.device == d and e.lane == "compute"]
            comm = [(e.start_s, e.end_s) for e in self.events if e.device == d and e.lane == "comm"]
            compute_s, comm_s = _union_length(comp), _union_length(comm)
            exposed = _union_length(comp + comm) - compute_s
            stats.append({
                "device": d, "compute_s": compute_s, "comm_s": comm_s, "exposed_comm_s": exposed,
                "idle_s": span - compute_s - exposed,
                "compute_fraction": compute_s / span, "comm_fraction": comm_s / span,
                "idle_fraction": (span - compute_s - exposed) / span,
            })
        return stats

    def bubble_fraction(self) -> float:
        """Fraction of device-time in the step when a device neither computes nor waits on
        exposed communication: sum(idle) / (devices x makespan). For a pipeline with equal
        micro-batch times and free communication this is (p-1)/(m+p-1) of the step
        (Narayanan et al. 2021, Sec. 2.2); communication time is reported apart."""
        span = self.makespan_s
        if span <= 0:
            return 0.0
        return sum(s["idle_s"] for s in self.device_stats()) / (self.n_devices * span)

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
            "simulated_time_s": self.makespan_s, "wall_time_s": self.wall_time_s,
            "bubble_fraction": self.bubble_fraction(), "bytes_by_collective": self.bytes_by_collective(),
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
    def to_chrome(self) -> dict:
        """Chrome trace event format: one process per device, one thread per lane, times in us;
        flow events ("s"/"f") draw an arrow from each send to its receive; "C" counters draw memory."""
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
                       "ts": e.start_s * 1e6, "dur": e.duration_s * 1e6, "args": args})
            if e.flow is not None and e.kind in ("send", "recv"):
                ph = "s" if e.kind == "send" else "f"
                # Perfetto binds "s" (and "f" with bp=e) to the slice enclosing ts on its thread: the
                # midpoint is strictly inside this send/recv, its edges touch back-to-back neighbours
                ts = e.start_s + e.duration_s / 2
                flow = {"ph": ph, "name": "p2p", "cat": "p2p", "id": e.flow, "pid": e.device, "tid": tid,
                        "ts": ts * 1e6}
                if ph == "f":
                    flow["bp"] = "e"
                ev.append(flow)
        for s in self.memory:
            ev.append({"ph": "C", "name": "memory bytes", "pid": s.device, "ts": s.time_s * 1e6,
                       "args": dict(s.bytes_by_category)})
        return {"traceEvents": ev, "displayTimeUnit": "ms",
                "otherData": {"name": self.name, "wall_time_s": self.wall_time_s}}

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


def _union_length(intervals: list[tuple[float, float]]) -> float:
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
