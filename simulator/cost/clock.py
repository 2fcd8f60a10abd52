"""The simulated clock: execute a Program's walk on a device model and stamp a Trace.

The clock consumes exactly the event order the real runtimes execute (`Program.walk()`), so a
trace is the same whichever runtime ran the program, and deterministic. Each device has two lanes:
compute and communication.

Timing rules (alpha-beta, Hockney 1994; overlap as in PyTorch DDP / Megatron async collectives):
- Compute starts when the compute lane is free and its inputs are ready; lasts
  `model.compute_time_s(instr)`.
- A point-to-point transfer starts when the tensor is ready at the sender and both devices' comm
  lanes are free; lasts latency + nbytes / bandwidth of the link. The receiver's tensor is ready
  at its end; the receiver waits only when it uses the tensor. Each device's comm lane is taken
  in its own program order: the sender's lane is read (and reserved) when the walk reaches the
  Send, the receiver's when it reaches the Recv. (The walk runs a device ahead until it blocks,
  so reading the sender's lane at the Recv would charge it for comm it issues later.)
- A collective starts when every member's input is ready and its comm lane is free (and, for a
  blocking one, its compute lane too); it lasts the priced plan: the sum over the algorithm's
  steps of the slowest transfer of the step. A blocking collective holds the compute lane until
  it ends; a non-blocking one overlaps whatever compute follows until its output is used.
- Non-blocking collectives run on their own stream (as NCCL calls on a side CUDA stream: PyTorch
  DDP's reducer, Megatron's overlapped gradient reduce): they queue behind each other but neither
  wait for nor delay the blocking collectives and transfers of the comm lane (both are drawn on
  the comm lane; sharing of link bandwidth between the two streams is not modelled).
- A device model may define `price_collective(ins) -> (time_s, bytes_sent_per_member) | None`
  to price a collective itself (e.g. a one-member collective standing for a data-parallel group
  of replicas that are simulated once, `simulator.cost.scale_device.ScaleDeviceModel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..collectives.algorithms import make_plan
from ..collectives.plan import Plan
from ..program import Collective, Compute, Free, Program, no_gc
from ..program_columns import ColumnarProgram
from ..trace import MemorySample, Trace, TraceEvent
from .clock_columns import price_columns
from .comm import plan_time


class DeviceModel(Protocol):
    def compute_time_s(self, ins: Compute) -> float: ...

    def link(self, src: int, dst: int) -> tuple[float, float]:
        """(latency_s, bandwidth_Bps) of the link from global rank src to dst."""
        ...


@dataclass(frozen=True)
class SimpleDeviceModel:
    """A plain roofline device and one uniform link (defaults: a modest accelerator).
    compute time = max(flops / flops_per_s, nbytes / memory_bandwidth_Bps) (Williams et al. 2009)."""

    flops_per_s: float = 100e12
    memory_bandwidth_Bps: float = 1e12
    latency_s: float = 5e-6
    bandwidth_Bps: float = 100e9

    def compute_time_s(self, ins: Compute) -> float:
        return max(ins.flops / self.flops_per_s, ins.nbytes / self.memory_bandwidth_Bps)

    def link(self, src: int, dst: int) -> tuple[float, float]:
        return self.latency_s, self.bandwidth_Bps


def plan_time_s(plan: Plan, group: tuple[int, ...], model: DeviceModel) -> float:
    """Sum over steps of max over the step's transfers of (latency + nbytes / bandwidth):
    `simulator.cost.comm.plan_time` on the model's links (one definition)."""
    return plan_time(plan, model.link, group)


def plan_of(ins: Collective) -> Plan:
    """The algorithm's plan for one collective instruction. make_plan takes the size S of the
    whole array as nccl-tests counts it: all_gather's S is the gathered result (member input x n)."""
    n = len(ins.group)
    whole = ins.nbytes * n if ins.kind == "all_gather" else ins.nbytes
    root = ins.group.index(ins.root) if ins.root is not None and ins.root in ins.group else 0
    return make_plan(ins.kind, ins.algo, n, whole, root=root)


def simulate(program: Program, model: DeviceModel | None = None, *, step: int = 0,
             memory: dict[tuple[int, int], dict[str, int]] | None = None, name: str = "",
             collective_steps: bool = False) -> Trace:
    """Price `program` on `model`. `memory` maps (rank, instruction index) to the bytes a real run
    measured after that instruction; the samples are placed at the instruction's simulated end.
    collective_steps: also draw every step of every collective's algorithm as send/recv events
    with chunk ids and flow arrows (cost/collective_steps.py); the timing is unchanged. A device
    model with `draw_collective_steps = True` asks for the same (the training loops pass theirs)."""
    model = model or SimpleDeviceModel()
    steps = collective_steps or getattr(model, "draw_collective_steps", False)
    if isinstance(program, ColumnarProgram) and not memory and not steps:
        cache: dict = {}
        with no_gc():       # thousands of small numpy calls; no cycles (program.no_gc)
            return price_columns(program.columns, model, lambda ins: collective_cost(ins, model, cache), step,
                                 name or program.name, on_deadlock=program.walk)
    with no_gc():
        trace = _simulate(program, model, step, memory, name)
    if steps:
        trace.events += _collective_step_events(program, trace, model, step)
    return trace


def _collective_step_events(program: Program, trace: Trace, model: DeviceModel, step: int) -> list[TraceEvent]:
    """The step events of every collective the clock priced from its plan (not the ones a device
    model priced itself, which have no plan), placed at the collective's start on the clock."""
    from .collective_steps import step_events

    price = getattr(model, "price_collective", None)
    flow = max((e.flow for e in trace.events if e.flow is not None), default=0)
    out: list[TraceEvent] = []
    seen: dict[tuple, int] = {}
    starts: dict[tuple, list[float]] = {}
    for e in trace.events:
        if e.lane == "comm" and e.group:
            starts.setdefault((e.device, e.kind, e.name, e.microbatch), []).append(e.start_s)
    for ev in program.walk():
        if ev.kind != "collective":
            continue
        r0, i0 = ev.at[0]
        ins = program.code[r0][i0]
        if price is not None and price(ins) is not None:
            continue
        times = starts.get((r0, ins.kind, ins.label, ins.microbatch))
        if not times:
            continue
        key = (r0, ins.kind, ins.tensor, ins.microbatch)
        k = seen[key] = seen.get(key, -1) + 1  # the k-th such collective: the k-th such bar
        events, flow = step_events(plan_of(ins), ins.group, times[min(k, len(times) - 1)], model.link, step=step,
                                   label=ins.label, microbatch=ins.microbatch, first_flow=flow)
        out += events
    return out


def _simulate(program: Program, model: DeviceModel, step: int, memory, name: str) -> Trace:
    clock = _Clock(program, model, step, keep_ends=bool(memory))
    clock.run(program.walk())
    trace = Trace(program.n_devices, clock.events, name=name or program.name)
    if memory:
        end_of = clock.end_of
        trace.memory = sorted((MemorySample(r, end_of.get((r, i), 0.0), dict(b), step)
                               for (r, i), b in memory.items()), key=lambda s: (s.time_s, s.device))
    return trace


class _Clock:
    """The timing rules of the module docstring, one method per kind of event. This readable clock
    is the definition; `clock_columns.price_columns` is its measured optimisation for columnar
    programs, tested event for event against it (tests/test_clock_equivalence.py)."""

    def __init__(self, program: Program, model: DeviceModel, step: int, keep_ends: bool):
        n = program.n_devices
        self.code, self.model, self.step, self.keep_ends = program.code, model, step, keep_ends
        self.t_comp = [0.0] * n    # when each device's compute lane is next free
        self.t_comm = [0.0] * n    # ... its comm lane (sends, receives, blocking collectives)
        self.t_async = [0.0] * n   # ... its stream of non-blocking collectives
        self.ready: list[dict[str, float]] = [dict() for _ in range(n)]  # tensor -> when it is ready
        self.sent_at: dict[tuple[int, int], float] = {}    # a Send's start, until its Recv is priced
        self.end_of: dict[tuple[int, int], float] = {}     # (rank, index) -> end (for memory samples)
        self.events: list[TraceEvent] = []
        self.plans: dict[tuple, tuple[float, list[int]]] = {}
        self.links: dict[tuple[int, int], tuple[float, float]] = {}
        self.flow_id = 0

    def run(self, walk) -> None:
        on = {"local": self.local, "send": self.send, "recv": self.recv, "collective": self.collective}
        for kind, at in walk:
            on[kind](at)

    def link(self, src: int, dst: int) -> tuple[float, float]:
        got = self.links.get((src, dst))
        if got is None:
            got = self.links[(src, dst)] = self.model.link(src, dst)
        return got

    def ended(self, r: int, i: int, end: float) -> None:
        if self.keep_ends:
            self.end_of[(r, i)] = end

    def local(self, at) -> None:
        """Compute starts when its lane is free and its inputs are ready; a Free takes no time."""
        r, i = at[0]
        ins = self.code[r][i]
        if type(ins) is Free:
            return self.ended(r, i, self.t_comp[r])
        ready = self.ready[r]
        start = max([self.t_comp[r]] + [ready.get(x, 0.0) for x in ins.inputs])
        dur = self.model.compute_time_s(ins)
        end = self.t_comp[r] = start + dur
        for x in ins.outputs:
            ready[x] = end
        self.ended(r, i, end)
        self.events.append(TraceEvent(r, "compute", ins.label or ins.op, start, dur, ins.phase, ins.op,
                                      ins.nbytes, ins.flops, ins.microbatch, self.step))

    def send(self, at) -> None:
        """The sender's comm lane is read and reserved in its own program order (module docstring)."""
        r, i = at[0]
        ins = self.code[r][i]
        lat, bw = self.link(r, ins.dst)
        start = max(self.ready[r].get(ins.tensor, 0.0), self.t_comm[r])
        self.sent_at[(r, i)] = start
        self.t_comm[r] = start + lat + ins.nbytes / bw

    def recv(self, at) -> None:
        """The transfer starts when the send started and the receiver's comm lane is free."""
        (dst, j), (src, i) = at
        send, recv = self.code[src][i], self.code[dst][j]
        lat, bw = self.link(src, dst)
        start = max(self.sent_at.pop((src, i)), self.t_comm[dst])
        dur = lat + send.nbytes / bw
        end = self.t_comm[dst] = self.ready[dst][recv.tensor] = start + dur
        self.ended(src, i, end)
        self.ended(dst, j, end)
        self.flow_id += 1
        flow, add, step = self.flow_id, self.events.append, self.step
        add(TraceEvent(src, "comm", f"send {send.tensor} to {dst}", start, dur, "comm", "send", send.nbytes,
                       0.0, send.microbatch, step, flow))
        add(TraceEvent(dst, "comm", f"recv {send.tensor} from {src}", start, dur, "comm", "recv", send.nbytes,
                       0.0, send.microbatch, step, flow))

    def collective(self, at) -> None:
        """Starts when every member's input is ready and its lane is free (a blocking one: its
        compute lane too); lasts the priced plan; a blocking one holds the compute lane to its end."""
        code, ready, t_comp = self.code, self.ready, self.t_comp
        ins0: Collective = code[at[0][0]][at[0][1]]
        blocking = ins0.blocking
        lane = self.t_comm if blocking else self.t_async
        start = max(max(ready[r].get(code[r][i].tensor, 0.0), lane[r], t_comp[r] if blocking else 0.0)
                    for r, i in at)
        start = max(start, 0.0)
        dur, sent = collective_cost(ins0, self.model, self.plans)
        end = start + dur
        for g, (r, i) in enumerate(at):
            ins = code[r][i]
            lane[r] = ready[r][ins.out] = end
            self.ended(r, i, end)
            if ins.blocking and t_comp[r] < end:
                t_comp[r] = end
            self.events.append(TraceEvent(r, "comm", ins.label, start, dur, ins.phase, ins.kind,
                                          sent[g], 0.0, ins.microbatch, self.step, group=ins.group))


def collective_cost(ins: Collective, model: DeviceModel, cache: dict) -> tuple[float, list[int]]:
    """(duration, bytes each member sends) of a collective, by the device model's
    `price_collective` or from the algorithm's plan; `cache` keeps one answer per
    (kind, algo, group, nbytes, tag)."""
    key = (ins.kind, ins.algo, ins.group, ins.nbytes, ins.tag)
    got = cache.get(key)
    if got is None:
        price = getattr(model, "price_collective", None)
        priced = price(ins) if price is not None else None
        if priced is not None:
            got = (priced[0], [priced[1]] * len(ins.group))
        else:
            plan = plan_of(ins)
            got = (plan_time_s(plan, ins.group, model), plan.bytes_sent_per_rank())
        cache[key] = got
    return got
