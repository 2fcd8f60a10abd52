"""A collective drawn as what it is: every step of its algorithm, every chunk transfer of a step.

`step_events` turns one priced collective (its plan, group, start time on the clock) into trace
events: for step k of the plan (which lasts, as in `comm.plan_time`, the slowest message of the
step: latency + bytes / bandwidth, Hockney 1994), each transfer is a "send" event on the source's
send lane and a "recv" event on the destination's recv lane, with its bytes and chunk id, sharing
a flow id so Perfetto draws an arrow from the send to its receive. A device that sends (or
receives) several chunks in one step gets them side by side in equal parts of the step. The
receive is named "reduce" when the chunk is added into the destination's slot, "copy" otherwise.
The steps add up exactly to the collective's priced duration (same formula, same links).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..collectives.plan import Plan
from ..trace import TraceEvent


def step_durations(plan: Plan, link: Callable[[int, int], tuple[float, float]], group: Sequence[int]) -> list[float]:
    """Per step: max over (src, dst) messages of latency + bytes / bandwidth (comm.plan_time's terms)."""
    out = []
    for st in plan.steps:
        worst = 0.0
        for (a, b), nbytes in st.links().items():
            lat, bw = link(group[a], group[b])
            worst = max(worst, lat + nbytes / bw)
        out.append(worst)
    return out


def step_events(plan: Plan, group: Sequence[int], start_s: float, link, *, step: int = 0, label: str = "",
                microbatch: int | None = None, first_flow: int = 0) -> tuple[list[TraceEvent], int]:
    """The send/recv events of every step of `plan` run by `group` from `start_s`; returns them
    and the next free flow id."""
    events: list[TraceEvent] = []
    flow = first_flow
    t = start_s
    n_steps = len(plan.steps)
    name = label or f"{plan.kind}/{plan.algo}"
    for k, (st, dur) in enumerate(zip(plan.steps, step_durations(plan, link, group))):
        sends = {r: st.sends_of(r) for r in range(plan.n)}
        recvs = {r: st.recvs_of(r) for r in range(plan.n)}
        for tr in st.transfers:
            flow += 1
            src, dst = group[tr.src], group[tr.dst]
            js, ms = sends[tr.src].index(tr), len(sends[tr.src])
            jr, mr = recvs[tr.dst].index(tr), len(recvs[tr.dst])
            how = "reduce" if tr.reduce else "copy"
            events.append(TraceEvent(src, "send", f"{name} step {k + 1}/{n_steps}: chunk {tr.src_chunk} -> {dst}",
                                     t + dur * js / ms, dur / ms, "comm", "send", tr.nbytes, 0.0, microbatch, step,
                                     flow, chunk=tr.src_chunk))
            events.append(TraceEvent(dst, "recv", f"{name} step {k + 1}/{n_steps}: {how} chunk {tr.dst_chunk} "
                                     f"<- {src}", t + dur * jr / mr, dur / mr, "comm", "recv", tr.nbytes, 0.0,
                                     microbatch, step, flow, chunk=tr.dst_chunk))
        t += dur
    return events, flow


class DrawSteps:
    """Wraps a device model (same prices) and asks the clock to draw collective steps as well."""

    draw_collective_steps = True

    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)
