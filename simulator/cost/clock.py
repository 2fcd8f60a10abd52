"""The simulated clock: execute a Program's walk on a device model and stamp a Trace.

The clock consumes exactly the event order the real runtimes execute (`Program.walk()`), so a
trace is the same whichever runtime ran the program, and deterministic. Each device has two lanes:
compute and communication.

Timing rules (alpha-beta, Hockney 1994; overlap as in PyTorch DDP / Megatron async collectives):
- Compute starts when the compute lane is free and its inputs are ready; lasts
  `model.compute_time_s(instr)`.
- A point-to-point transfer starts when the tensor is ready at the sender and both devices' comm
  lanes are free; lasts latency + nbytes / bandwidth of the link. The receiver's tensor is ready
  at its end; the receiver waits only when it uses the tensor.
- A collective starts when every member's input is ready and its comm lane is free (and, for a
  blocking one, its compute lane too); it lasts the priced plan: the sum over the algorithm's
  steps of the slowest transfer of the step. A blocking collective holds the compute lane until
  it ends; a non-blocking one overlaps whatever compute follows until its output is used.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from ..collectives.algorithms import make_plan
from ..collectives.plan import Plan
from ..program import Collective, Compute, Free, Program, Recv, Send
from ..trace import MemorySample, Trace, TraceEvent


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
    """Sum over steps of max over the step's transfers of (latency + nbytes / bandwidth)."""
    total = 0.0
    for step in plan.steps:
        worst = 0.0
        for t in step.transfers:
            lat, bw = model.link(group[t.src], group[t.dst])
            worst = max(worst, lat + t.nbytes / bw)
        total += worst
    return total


def plan_of(ins: Collective) -> Plan:
    """The algorithm's plan for one collective instruction. make_plan takes the size S of the
    whole array as nccl-tests counts it: all_gather's S is the gathered result (member input x n)."""
    n = len(ins.group)
    whole = ins.nbytes * n if ins.kind == "all_gather" else ins.nbytes
    root = ins.group.index(ins.root) if ins.root is not None and ins.root in ins.group else 0
    return make_plan(ins.kind, ins.algo, n, whole, root=root)


def simulate(program: Program, model: DeviceModel | None = None, *, step: int = 0,
             memory: dict[tuple[int, int], dict[str, int]] | None = None, name: str = "") -> Trace:
    """Price `program` on `model`. `memory` maps (rank, instruction index) to the bytes a real run
    measured after that instruction; the samples are placed at the instruction's simulated end."""
    model = model or SimpleDeviceModel()
    code = program.code
    t_comp = [0.0] * program.n_devices
    t_comm = [0.0] * program.n_devices
    ready: list[dict[str, float]] = [defaultdict(float) for _ in range(program.n_devices)]
    sent_at: dict[tuple[int, int], float] = {}
    end_of: dict[tuple[int, int], float] = {}
    events: list[TraceEvent] = []
    plans: dict[tuple, tuple[float, list[int]]] = {}
    flow_id = 0
    for ev in program.walk():
        if ev.kind == "local":
            r, i = ev.at[0]
            ins = code[r][i]
            if isinstance(ins, Free):
                end_of[(r, i)] = t_comp[r]
                continue
            start = max([t_comp[r]] + [ready[r][x] for x in ins.inputs])
            dur = model.compute_time_s(ins)
            t_comp[r] = start + dur
            for x in ins.outputs:
                ready[r][x] = t_comp[r]
            end_of[(r, i)] = t_comp[r]
            events.append(TraceEvent(r, "compute", ins.label or ins.op, start, dur, ins.phase, ins.op,
                                     ins.nbytes, ins.flops, ins.microbatch, step))
        elif ev.kind == "send":
            r, i = ev.at[0]
            sent_at[(r, i)] = ready[r][code[r][i].tensor]
        elif ev.kind == "recv":
            (dst, j), (src, i) = ev.at
            send, recv = code[src][i], code[dst][j]
            lat, bw = model.link(src, dst)
            start = max(sent_at.pop((src, i)), t_comm[src], t_comm[dst])
            dur = lat + send.nbytes / bw
            t_comm[src] = t_comm[dst] = ready[dst][recv.tensor] = start + dur
            end_of[(src, i)] = end_of[(dst, j)] = start + dur
            flow_id += 1
            for rank, kind, peer in ((src, "send", dst), (dst, "recv", src)):
                label = f"{kind} {send.tensor} {'to' if kind == 'send' else 'from'} {peer}"
                events.append(TraceEvent(rank, "comm", label, start, dur, "comm", kind, send.nbytes, 0.0,
                                         send.microbatch, step, flow_id))
        else:  # collective
            ins0: Collective = code[ev.at[0][0]][ev.at[0][1]]
            group = ins0.group
            start = max(max(ready[r][code[r][i].tensor], t_comm[r], t_comp[r] if ins0.blocking else 0.0)
                        for r, i in ev.at)
            key = (ins0.kind, ins0.algo, group, ins0.nbytes)
            if key not in plans:
                plan = plan_of(ins0)
                plans[key] = (plan_time_s(plan, group, model), plan.bytes_sent_per_rank())
            dur, sent = plans[key]
            end = start + dur
            for g, (r, i) in enumerate(ev.at):
                ins = code[r][i]
                t_comm[r] = ready[r][ins.out] = end_of[(r, i)] = end
                if ins.blocking:
                    t_comp[r] = max(t_comp[r], end)
                events.append(TraceEvent(r, "comm", f"{ins.kind} {ins.tensor}", start, dur, ins.phase, ins.kind,
                                         sent[g], 0.0, ins.microbatch, step, group=ins.group))
    trace = Trace(program.n_devices, events, name=name or program.name)
    if memory:
        trace.memory = sorted((MemorySample(r, end_of.get((r, i), 0.0), dict(b), step)
                               for (r, i), b in memory.items()), key=lambda s: (s.time_s, s.device))
    return trace
