"""Simulate a training step far beyond this machine: compile a scale program, run the clock, read it.

    res = simulate_at_scale("gpt3-175b", ParallelConfig(tp=8, pp=12, dp=16, global_batch=1536,
                         recompute="full"), "a100-80gb")
    res.step_time_s, res.mfu, res.bubble_fraction, res.exposed_comm_s
    res.trace.save_chrome("gpt3.json")          # both lanes of every simulated rank

The program (`scale_program.build_scale_program`) is one data-parallel replica; the clock
(`clock.simulate`) prices it on `scale_device.ScaleDeviceModel` built from a
`HardwareDeviceModel` of the whole cluster, which prices compute kernels by their matmul shapes
and the data-parallel collectives for their real groups. Memory is the closed-form peak of
`simulator.cost.memory` (Rajbhandari et al. 2020; Korthikanti et al. 2022): the closed form's
most loaded device (as `analytic`) and, per pipeline device, with the in-flight micro-batches of
the real schedule (`memory_per_device`).

Outputs (same definitions as `analytic.AnalyticResult`):
  tokens/s = B s / step;  model FLOP/s per GPU = B s (6N + 12 L h s) / step / GPUs and
  MFU = that / peak (PaLM, Chowdhery et al. 2022, App. B); hardware FLOP/s = FLOPs the simulated
  ranks executed (recomputation included) x d c / step / GPUs (Narayanan et al. 2021 eq. 3 counts
  the same); `breakdown` = the bottleneck device's step as compute, exposed communication by kind,
  bubble, optimizer and other, adding up to the step (`step_breakdown.trace_breakdown`), and
  compute_time_s, exposed_comm_s and bubble_fraction (bubble / step) are its parts; time per
  collective kind and per purpose (tensor_parallel, context_parallel, expert_all_to_all,
  pipeline_p2p, data_parallel, embedding_all_reduce) of the busiest device.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from types import MappingProxyType

import numpy as np

from simulator.cost.analytic import estimate
from simulator.cost.clock import simulate
from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.layer_kinds import chunk_dense_layers
from simulator.cost.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    logits_bytes,
    model_state_bytes_per_device,
)
from simulator.cost.memory_report import activation_widening, stage_param_split
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_device import ScaleDeviceModel
from simulator.cost.scale_kernels import padded_vocab
from simulator.cost.scale_program import DEFAULT_BUCKET_NBYTES, build_scale_program
from simulator.cost.step_breakdown import COMM_PURPOSE, StepBreakdown, collective_tag, comm_kind, trace_breakdown
from simulator.trace_columns import ColumnTrace, lane_busy_s


@dataclass(frozen=True, eq=False)
class ScaleResult:
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    tflops_per_gpu: float                 # hardware FLOP/s incl. recomputation
    hfu: float
    bubble_fraction: float
    comm_time_by_kind: MappingProxyType   # purpose -> seconds on the busiest device
    time_by_collective: MappingProxyType  # collective kind (and send) -> seconds on the busiest device
    comm_time_s: float                    # comm-lane busy time of the busiest device
    exposed_comm_s: float                 # the breakdown's exposed communication (all kinds)
    compute_time_s: float                 # the breakdown's compute (kernels, no communication)
    memory: MemoryBreakdown               # closed form of the most loaded device (analytic.estimate_memory)
    memory_per_device_bytes: tuple        # per pipeline device, from the schedule's real in-flight counts
    gpus: int
    simulated_ranks: int
    instructions: int
    trace: ColumnTrace
    breakdown: StepBreakdown              # the bottleneck device's step, part by part (`step_breakdown`)

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def oom(self) -> bool:
        return self.memory.oom or max(self.memory_per_device_bytes) > self.memory.capacity_bytes

    def to_dict(self) -> dict:
        """Plain data (JSON-able): every number of the result, tables as dicts."""
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("memory", "trace", "comm_time_by_kind", "time_by_collective", "breakdown")}
        d["breakdown"] = self.breakdown.to_dict()
        d["comm_time_by_kind"] = dict(self.comm_time_by_kind)
        d["time_by_collective"] = dict(self.time_by_collective)
        d["memory_per_gpu_bytes"] = self.memory_per_gpu_bytes
        d["memory_per_device_bytes"] = list(self.memory_per_device_bytes)
        d["oom"] = self.oom
        return d

    as_dict = to_dict  # the older name

    def __repr__(self) -> str:
        return (f"ScaleResult(step {self.step_time_s:.4g} s, {self.tflops_per_gpu:.4g} TFLOP/s/GPU, MFU "
                f"{self.mfu:.1%}, bubble {self.bubble_fraction:.1%}, exposed comm {self.exposed_comm_s:.3g} s, "
                f"{self.simulated_ranks} ranks simulated for {self.gpus}, {self.memory!r})")


PURPOSES = (*COMM_PURPOSE.values(), "embedding_all_reduce")


def _purpose(kind: str, name: str) -> str:
    """What a comm event serves (`step_breakdown.comm_kind`), in the closed form's names
    (`AnalyticResult.comm_time_by_kind`); the tied-embedding all-reduce has its own."""
    if kind not in ("send", "recv") and collective_tag(name) == "emb":
        return "embedding_all_reduce"
    return COMM_PURPOSE[comm_kind(kind, name)]


def trace_statistics(trace: ColumnTrace) -> dict:
    """Per device compute and comm busy time (interval unions), exposed comm, idle; per-device
    seconds by purpose and by collective kind (recv counted on the send). Read from the trace's
    columns (`trace_columns`): the scale program's million events are never built as objects."""
    c, n = trace.columns, trace.n_devices
    span = trace.makespan_s
    compute_s, comm_s, either_s = lane_busy_s(c, n, trace.lane_order())
    exposed = [b - a for a, b in zip(compute_s, either_s)]
    rows = np.flatnonzero(c.lane == 1)
    metas = c.metas
    kinds = sorted({metas[m][2] for m in np.unique(c.meta[rows]).tolist()})
    kind_of = np.array([kinds.index(m[2]) if m[2] in kinds else -1 for m in metas], dtype=np.int64)
    purposes = sorted(PURPOSES)
    purpose = _purpose_codes(c, rows, purposes)
    kind = kind_of[c.meta[rows]]
    sent = kind != (kinds.index("recv") if "recv" in kinds else -1)
    dev, dur = c.device[rows].astype(np.int64), c.duration_s[rows]
    return {"compute_s": compute_s, "comm_s": comm_s, "exposed_s": exposed, "span_s": span,
            "idle_s": [span - a - x for a, x in zip(compute_s, exposed)],
            "by_purpose": _sums_by(dev, purpose, dur, n, purposes),
            "by_kind": _sums_by(dev[sent], kind[sent], dur[sent], n, kinds)}


def _purpose_codes(c, rows: np.ndarray, purposes: list[str]) -> np.ndarray:
    """Each comm row's purpose (index into `purposes`), `_purpose` of its name. A name is its
    meta's format with the micro-batch written in ("all_reduce a0.{j}"): digits or "-1", which no
    purpose prefix holds, so every micro-batch gives the format's purpose with j = 0."""
    code = np.array([purposes.index(_purpose(kind, fmt.format(j=0) if "{" in fmt else fmt))
                     for fmt, _, kind, _ in c.metas], dtype=np.int64)
    return code[c.meta[rows]]




def _sums_by(dev: np.ndarray, code: np.ndarray, dur: np.ndarray, n: int, labels: list[str]) -> list[dict]:
    """Per device, {label: summed duration} in the order the labels first appear on it (the sums
    accumulate in row order, as a loop over the events would)."""
    k = len(labels)
    flat = dev * k + code
    sums = np.bincount(flat, weights=dur, minlength=n * k)
    first = np.full(n * k, len(flat))
    np.minimum.at(first, flat, np.arange(len(flat)))
    out = []
    for d in range(n):
        seen = [j for j in range(k) if first[d * k + j] < len(flat)]
        out.append({labels[j]: float(sums[d * k + j]) for j in sorted(seen, key=lambda j: first[d * k + j])})
    return out


def memory_per_device(model: ModelSpec, cfg: ParallelConfig, A: Assumptions | None = None) -> tuple[float, ...]:
    """Peak bytes on each pipeline device k (every TP rank of it alike): ZeRO model states of its
    parameters (Megatron-LM's 18 bytes, `memory_report.stage_param_split`; the experts' over their own group) + Korthikanti activations per layer x its layers per chunk
    x the (micro-batch, chunk) activations the schedule really holds at once on k
    (`schedule_sim.peak_in_flight`), + one layer's full activations when recomputing, + the fp32
    logits on the device of the last stage."""
    from simulator.parallel.schedule_registry import make_schedule
    from simulator.parallel.schedule_sim import peak_in_flight
    A = (A or Assumptions()).resolved(model)
    s, b, h, a, t, p, v = model.seq / cfg.cp, cfg.micro_batch_size, model.hidden, model.heads, cfg.tp, cfg.pp, cfg.virtual_stages
    in_flight = peak_in_flight(make_schedule(cfg.schedule, p, cfg.microbatches, v))
    flash = "selective" if A.flash_attention else "none"     # FlashAttention keeps no s^2 scores
    f = model.ffn_hidden
    per_layer = activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel,
                                           flash if cfg.recompute == "none" else cfg.recompute, f,
                                           dropout=model.dropout)
    working = 0.0 if cfg.recompute == "none" else activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel,
                                                                             flash, f, dropout=model.dropout)
    widen = activation_widening(A.dtype)
    per_layer, working = per_layer * widen, working * widen
    chunks, V = cfg.chunk_layers(model.layers), padded_vocab(model, t)
    plain = chunk_dense_layers(model, cfg)       # a mixed model's dense layers (`layer_kinds`)
    out = []
    for k in range(p):
        n = sum(chunks[c * p + k] for c in range(v))
        dense, expert = stage_param_split(model, t, n, k == 0, k == p - 1, cfg.ep, cfg.expert_tp,
                                          sum(plain[c * p + k] for c in range(v)))
        edp = max(1, cfg.gpus // p // (cfg.ep * cfg.expert_tp))     # experts' states over their own group
        states = model_state_bytes_per_device(dense, cfg.shard_size, cfg.zero_stage, A.recipe) + (
            model_state_bytes_per_device(expert, edp, cfg.zero_stage, A.recipe) if expert else 0.0)
        # in-flight counts are (micro-batch, chunk) units of a stage's mean chunk
        mem = (states
               + per_layer * n / v * in_flight[k] + working)
        if k == p - 1:   # the logits, and each MTP module's layer in flight and logits again (`cost.mtp`)
            mtp = model.mtp_num_layers
            mem += (1 + mtp) * logits_bytes(s, b, V, t) + mtp * per_layer * in_flight[k] / v
        out.append(mem)
    return tuple(out)


def simulate_at_scale(model: ModelSpec | str, config: ParallelConfig, hardware: Hardware | str,
                   assumptions: Assumptions | None = None, *, fold_tp: bool = False,
                   bucket_nbytes: float = DEFAULT_BUCKET_NBYTES, overlap_grad_reduce: bool | None = None,
                   logits: bool = True, optimizer: bool = True) -> ScaleResult:
    """Build the scale program of `config`, run it on the clock, and summarise (module docstring).
    `overlap_grad_reduce` None: the assumptions' (one default, `simulator.vocabulary`)."""
    model, hw, cfg = get_model(model), get_hardware(hardware), config
    A = (assumptions or Assumptions()).resolved(model)
    if overlap_grad_reduce is None:
        overlap_grad_reduce = A.overlap_grad_reduce
    prog = build_scale_program(model, cfg, A, fold_tp=fold_tp, bucket_nbytes=bucket_nbytes,
                               overlap_grad_reduce=overlap_grad_reduce, logits=logits, optimizer=optimizer)
    dm = ScaleDeviceModel(HardwareDeviceModel(hw, cfg.gpus, A.matmul_dtype, link_efficiency=A.link_efficiency), cfg,
                          fold_tp=fold_tp, collective_algo=A.collective_algo, nvls=A.nvls, stack=A.profile,
                          routing=(model.num_experts, model.moe_router_topk))
    trace = simulate(prog, dm)
    st = trace_statistics(trace)
    step = st["span_s"]
    n = trace.n_devices
    tokens = cfg.global_batch * model.seq
    executed = float(trace.columns.flops.sum())               # one replica (times t if TP is folded)
    per_replica = executed * (cfg.tp if fold_tp else 1)
    hw_flops = per_replica * cfg.dp * cfg.cp                 # the program holds one context-parallel rank
    model_flops = tokens * model.model_flops_per_token(A.causal_attention_flops)   # `simulator.cost.flops`
    peak = hw.peak(A.dtype)
    busiest = max(range(n), key=lambda d: st["comm_s"][d])
    parts, _ = trace_breakdown(trace, step)
    # the stack's per-step host work where the GPU does not hide it (`Stack.exposed_step_overhead_s`,
    # the closed form's rule): after the traced step, as the breakdown's `other`
    host = A.profile.exposed_step_overhead_s(parts.exposed_comm_s["dp"])
    step += host
    parts = replace(parts, other_s=parts.other_s + host)
    memory = estimate(model, cfg, hw, A).memory
    per_device = memory_per_device(model, cfg, A)
    return ScaleResult(
        step_time_s=step, tokens_per_s=tokens / step,
        model_tflops_per_gpu=model_flops / step / cfg.gpus / 1e12, mfu=model_flops / step / cfg.gpus / peak,
        tflops_per_gpu=hw_flops / step / cfg.gpus / 1e12, hfu=hw_flops / step / cfg.gpus / peak,
        bubble_fraction=parts.bubble_s / step if step > 0 else 0.0,
        comm_time_by_kind=MappingProxyType(st["by_purpose"][busiest]),
        time_by_collective=MappingProxyType(st["by_kind"][busiest]),
        comm_time_s=st["comm_s"][busiest], exposed_comm_s=parts.exposed_total_s,
        compute_time_s=parts.compute_s, memory=memory, memory_per_device_bytes=per_device, gpus=cfg.gpus, simulated_ranks=n,
        instructions=len(prog), trace=trace, breakdown=parts)
