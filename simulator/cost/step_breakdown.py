"""Where one training step goes: the one breakdown the closed form and the event clock both report.

    step = compute + exposed tp + exposed cp + exposed ep + exposed pp + exposed dp
           + bubble + optimizer + other                      (exactly, `StepBreakdown.step_s`)

- compute: the model's kernels (forward, backward, weight gradients, recomputation, logits and
  cross-entropy, gradient accumulation), communication excluded;
- exposed communication by what it serves, each counted only while no kernel runs on the device:
  tp tensor-parallel collectives, cp context-parallel ring or all-to-all, ep the expert
  dispatch/combine collectives (all-to-all, and the expert-tensor all-gather / reduce-scatter, or
  the all-gather dispatcher's, `cost.moe`), pp pipeline send/recv and the tensor-parallel all-gather that
  rebuilds a received activation (Megatron's scatter/gather optimisation), dp the
  data-parallel gradient reduction and ZeRO parameter gathers, with the tied-embedding all-reduce
  between the first and last stage (Megatron-LM's finalize_model_grads does both);
- bubble: the device idle (neither lane busy), waiting on another device;
- optimizer: the optimizer step; other: any other kernel (bucket packing; 0 s in both models).

The closed form (`analytic.estimate`) builds it from its terms, for the slowest pipeline stage.
The clock (`trace_breakdown`) partitions one device's timeline of a scale program
(`trace.priority_partition`, the rule real-run traces use too): every instant of
[0, makespan) is compute, optimizer or other when a kernel of that phase runs, else exposed
communication of the first kind in `COMM_KINDS` order whose collective is in flight, else bubble.
It reports the device that waits least (the bottleneck stage; the lowest rank among equals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from simulator.cost.fsdp import is_fsdp
from simulator.parallel.schedule_registry import schedule_spec
from simulator.trace import priority_partition
from simulator.trace_columns import LANE_NAMES

COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
COMM_PURPOSE = MappingProxyType({"tp": "tensor_parallel", "cp": "context_parallel", "ep": "expert_all_to_all",
                                 "pp": "pipeline_p2p", "dp": "data_parallel"})
# A scale program's collective tags (`scale_program`) -> the kind it serves; untagged: tensor parallel.
TAG_KIND = MappingProxyType({"tp": "tp", "cp": "cp", "ep": "ep", "ep_flex": "ep", "etp": "ep", "tp_ep": "ep", "dp": "dp", "dpr": "dp", "edp": "dp",
                             "emb": "dp"})
_WORK = ("compute", "optimizer", "other")


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one step by where they go (module docstring); the parts add up to `step_s`."""

    compute_s: float
    exposed_comm_s: MappingProxyType      # kind (COMM_KINDS) -> seconds
    bubble_s: float
    optimizer_s: float
    other_s: float = 0.0
    device: int | None = None             # the clock's device (program rank); None: the closed form

    def parts(self) -> dict[str, float]:
        """Every part, in order: compute, exposed_<kind> for each kind, bubble, optimizer, other."""
        out = {"compute": self.compute_s}
        out.update({f"exposed_{k}": self.exposed_comm_s.get(k, 0.0) for k in COMM_KINDS})
        out.update(bubble=self.bubble_s, optimizer=self.optimizer_s, other=self.other_s)
        return out

    @property
    def step_s(self) -> float:
        return math.fsum(self.parts().values())

    @property
    def exposed_total_s(self) -> float:
        return math.fsum(self.exposed_comm_s.get(k, 0.0) for k in COMM_KINDS)

    def to_dict(self) -> dict:
        d = {f"{k}_s": v for k, v in self.parts().items()}
        d.update(step_s=self.step_s, device=self.device)
        return d

    def __repr__(self) -> str:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in self.parts().items() if v)
        return f"StepBreakdown({self.step_s:.4g} s = {shown})"


def breakdown_from_parts(compute_s: float, exposed: dict, bubble_s: float, optimizer_s: float,
                         other_s: float = 0.0) -> StepBreakdown:
    unknown = set(exposed) - set(COMM_KINDS)
    if unknown:
        raise ValueError(f"unknown communication kinds {sorted(unknown)}; known: {', '.join(COMM_KINDS)}")
    return StepBreakdown(compute_s, MappingProxyType({k: float(exposed.get(k, 0.0)) for k in COMM_KINDS}),
                         bubble_s, optimizer_s, other_s)


def collective_tag(name: str) -> str:
    """The tag a collective's trace name carries in brackets (`Collective.label`), else ""."""
    return name[name.rfind("[") + 1:-1] if name.endswith("]") else ""


def comm_kind(kind: str, name: str) -> str:
    """What a comm event of a scale trace serves: a send/recv of a ring tensor ("cp/..."), cp; other
    send/recv, and the all-gather that rebuilds a received stage-boundary activation (tensor "r...",
    Megatron's scatter/gather), pp; else the
    collective's tag by `TAG_KIND`; untagged: tp."""
    words = name.split(" ", 2)
    if kind in ("send", "recv") and len(words) > 1 and words[1].startswith("cp/"):
        return "cp"       # the context-parallel ring (`scale_cp`)
    if kind in ("send", "recv") or (len(words) > 1 and words[1].startswith("r")):
        return "pp"
    return TAG_KIND.get(collective_tag(name), "tp")


def work_part(phase: str) -> str:
    return phase if phase in ("optimizer", "other") else "compute"


def _rows(trace):
    """(device, is_comm, part index, start, end) arrays of the trace's non-empty events; part index
    indexes _WORK for kernels, COMM_KINDS for communication."""
    cols = getattr(trace, "columns", None)
    if cols is not None and getattr(trace, "_events", None) is None:
        as_comm = np.array([COMM_KINDS.index(comm_kind(kind, fmt)) for fmt, _p, kind, *_ in cols.metas] or [0])
        as_work = np.array([_WORK.index(work_part(phase)) for _f, phase, *_ in cols.metas] or [0])
        comm = np.asarray(cols.lane) == LANE_NAMES.index("comm")
        meta = np.asarray(cols.meta)
        return (np.asarray(cols.device), comm, np.where(comm, as_comm[meta], as_work[meta]),
                np.asarray(cols.start_s), np.asarray(cols.start_s) + np.asarray(cols.duration_s))
    ev = trace.events
    comm = np.array([e.lane != "compute" for e in ev], dtype=bool)
    part = np.array([COMM_KINDS.index(comm_kind(e.kind, e.name)) if e.lane != "compute"
                     else _WORK.index(work_part(e.phase)) for e in ev], dtype=np.int64)
    start = np.array([e.start_s for e in ev], dtype=float)
    end = start + np.array([e.duration_s for e in ev], dtype=float)
    return np.array([e.device for e in ev], dtype=np.int64), comm, part, start, end


def _device_parts(comm, part, start, end) -> dict[str, float]:
    """Seconds per part: kernels by phase first, then communication by kind (`priority_partition`)."""
    cls = np.where(comm, len(_WORK) + part, part)
    names = _WORK + COMM_KINDS
    return dict(zip(names, priority_partition(start, end, cls, len(names))))


def trace_breakdown(trace, span_s: float | None = None) -> tuple[StepBreakdown, list[StepBreakdown]]:
    """(the bottleneck device's breakdown, every device's) of a one-step scale trace (module docstring)."""
    span = trace.makespan_s if span_s is None else span_s
    device, comm, part, start, end = _rows(trace)
    order = np.argsort(device, kind="stable")
    device, comm, part, start, end = device[order], comm[order], part[order], start[order], end[order]
    bounds = np.searchsorted(device, np.arange(trace.n_devices + 1))
    rows = []
    for d in range(trace.n_devices):
        lo, hi = bounds[d], bounds[d + 1]
        got = _device_parts(comm[lo:hi], part[lo:hi], start[lo:hi], end[lo:hi])
        exposed = {k: got.get(k, 0.0) for k in COMM_KINDS}
        named = [got.get("compute", 0.0), got.get("optimizer", 0.0), got.get("other", 0.0), *exposed.values()]
        b = breakdown_from_parts(named[0], exposed, span - math.fsum(named), named[1], named[2])
        rows.append(StepBreakdown(b.compute_s, b.exposed_comm_s, b.bubble_s, b.optimizer_s, b.other_s, d))
    slowest = min(range(len(rows)), key=lambda d: (rows[d].bubble_s, d)) if rows else 0
    return (rows[slowest] if rows else breakdown_from_parts(0.0, {}, span, 0.0)), rows


# What the closed form leaves out, by name: where the event clock's program is priced differently
# (docs/step-model.md gives each one's size on the grid of tests/test_step_model.py).
LEAVES_OUT = MappingProxyType({
    "ring-attention-overlap": "ring attention (cp p2p): the closed form charges each ring step the part of its "
                              "transfers (2 forward, 4 backward, one after another on the comm lane) its core kernel "
                              "does not hide; the clock runs Transformer Engine's order step by step, where a "
                              "backward step's dK/dV sum also waits for the previous rank's kernel (within 4% on "
                              "tests/test_step_model.py's extra ring grid), and counts an idle send as bubble",
    "gradient-bucket-tail": "overlapped gradient reduction: the closed form hides it under the last micro-batch's "
                            "backward as one sum; the clock's 25 MB buckets leave the last one (and the embedding "
                            "gradient) exposed",
    "zero-per-micro-batch": "ZeRO-2/3: the closed form adds DeepSpeed's per-sub-module gather latencies and hides "
                            "each micro-batch's reduction as one sum; the clock gathers one collective per layer and "
                            "reduce-scatters one per bucket",
    "async-p2p": "the schedules the closed form plays (zero-bubble, looped BFS, V-shaped): it charges every "
                 "stage-boundary exchange as blocking (Megatron-LM's p2p, exact for 1F1B and interleaved); the "
                 "clock's exchanges run asynchronously on the comm lane, and the weight-gradient work or the "
                 "other chunk the schedule places next hides part of them (the clock's step a few percent shorter: tests/test_step_model.py's "
                 "random grid)",
    "fsdp-pipeline": "FSDP with a pipeline: the closed form stretches the schedule's bubble by the waits of the "
                     "bottleneck device's first forward and last backward for their gathers (and blocking "
                     "reductions), and prices each pass's overlapped reductions within the pass; the clock plays "
                     "every stage's waits, and drains the reductions in the pipeline's idle time",
    "fsdp-mixed-streams": "Megatron-FSDP with one of --overlap-param-gather and --overlap-grad-reduce: the "
                          "closed form runs the prefetched gathers and the blocking reductions (or the blocking "
                          "gathers and the overlapped reductions) on one stream in program order; the clock runs "
                          "the blocking ones on the comm lane beside the asynchronous stream",
    "param-gather-fill": "ZeRO-1/2 with --overlap-param-gather and a pipeline: the closed form hides the parameter "
                         "gather under the first forward of the device with the most parameters; the clock's "
                         "stages also hide it in the pipeline's fill, and the bubble it measures shrinks",
    "tp-comm-overlap": "--tp-comm-overlap: the closed form hides tensor-parallel collectives under the layer's "
                       "weight-gradient GEMMs; the clock's program runs them blocking",
    "moe-overlap-one-stream": "a MoE overlap option with FSDP: the clock's one asynchronous stream queues the MoE "
                              "dispatch and combine behind FSDP's gathers and reduce-scatters (Megatron-Core gives "
                              "each its own stream); the closed form prices them apart",
})


def closed_form_leaves_out(cfg, A) -> tuple[str, ...]:
    """The `LEAVES_OUT` names that apply to a configuration (`cfg`: ParallelConfig, `A`: Assumptions)."""
    dp = cfg.dp * cfg.cp
    out = []
    if cfg.cp > 1 and cfg.cp_comm_type == "p2p":
        out.append("ring-attention-overlap")
    if dp > 1 and A.overlap_grad_reduce and cfg.zero_stage < 2:
        out.append("gradient-bucket-tail")
    if dp > 1 and cfg.zero_stage >= 2 and not is_fsdp(cfg):     # FSDP's per-layer units: both models alike
        out.append("zero-per-micro-batch")
    spec = schedule_spec(cfg.schedule, priced=False)
    if cfg.pp > 1 and spec.per_chunk:
        out.append("async-p2p")
    if cfg.pp > 1 and is_fsdp(cfg) and dp > 1:
        out.append("fsdp-pipeline")
    if is_fsdp(cfg) and dp > 1 and cfg.fsdp == "megatron_fsdp" and A.overlap_param_gather != A.overlap_grad_reduce:
        out.append("fsdp-mixed-streams")
    if cfg.pp > 1 and dp > 1 and cfg.zero_stage in (1, 2) and A.overlap_param_gather:
        out.append("param-gather-fill")
    if cfg.tp > 1 and A.overlap_tp_comm:
        out.append("tp-comm-overlap")
    if (A.overlap_moe_comm or A.shared_expert_overlap) and is_fsdp(cfg) and dp > 1:
        out.append("moe-overlap-one-stream")
    return tuple(out)
