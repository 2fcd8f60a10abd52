"""Closed-form step time of GPT-style training under (t, p, d, b, B, schedule, recompute, SP, ZeRO).

`estimate(model, config, hardware)` is a pure function returning an `AnalyticResult`.

Per micro-batch and transformer layer, on one tensor-parallel rank (T = b s tokens):
  matmuls (forward)                       # (rows, cols, contracted)
    QKV   (T, (h + 2 kv)/t, h)   proj (T, h, h/t)   MLP up (T, f/t or 2f/t, h)   down (T, h, f/t)
    scores (s, s, h/a) and context (s, h/a, s), batched over b a / t heads
  backward = input gradients "B" (m, k, n) + weight gradients "W" (k, n, m) of each forward matmul;
  every matmul is timed by the roofline of `simulator.cost.compute` (utilisation by shape).
  element-wise traffic (16-bit), forward: layer norms 8 sbh, bias-dropout-add 14 sbh (both /t
  with sequence parallelism), bias-GeLU 4 s b f / t, scaled masked softmax + attention dropout
  9 a b s^2 / t (Megatron-LM 2021 fused kernels, no flash attention); backward ~ 2x forward.
  tensor parallel: 2 all-reduces of T h 2 bytes in the forward, 2 in the backward, 2 more in a
  fully recomputed forward (Shoeybi et al. 2019; with SP each becomes all-gather +
  reduce-scatter of the same volume, Korthikanti et al. 2022). Not overlapped (`Assumptions`).
  recompute: full adds the whole forward to B; selective adds the attention core only.
Last stage adds the logits (T, V/t, h) and cross-entropy traffic; stages hold L/p layers.

Step (p stages, m micro-batches, v chunks; F, B, W per-stage means, M = slowest stage F+B+W):
  step = m M + bubble + exposed p2p + exposed DP sync + embedding all-reduce + optimizer
  bubble: GPipe/1F1B (p-1)(F+B+W); interleaved (p-1)(F+B+W)/v; ZB-H1 (p-1)(F+B-W);
          ZB-H2 (p-1)(F+B-2W), floored at 0 (REFERENCES 4; Qi et al. 2023).
  p2p: Megatron's scatter/gather: each TP rank sends T h 2 / t bytes to the next stage, then an
       intra-node all-gather; one forward and one backward exchange per micro-batch per chunk,
       blocking, so 2 (m v + p - 1) exchanges sit on the critical path.
  DP sync of the stage's gradients (fp32): ZeRO 0 all-reduce; 1-2 reduce-scatter of gradients +
       all-gather of 16-bit parameters; 3 reduce-scatter + two parameter all-gathers (3 Psi).
  optimizer: Adam is memory-bound, 30 bytes per (sharded) parameter.
Outputs: TFLOP/s per GPU as Narayanan et al. 2021 eq. 3 counts it (hardware FLOPs, including
recomputation, factor 96 for full recompute), model TFLOP/s and MFU by PaLM's 6N + 12 L H Q T.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType

from simulator.cost.comm import collective_time_s
from simulator.cost.compute import matmul_time_s, memory_time_s
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    in_flight_microbatches,
    logits_bytes,
    model_state_bytes_per_device,
)
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.errors import ParasimError

ADAM_BYTES_PER_PARAM = 30   # read fp32 param, grad, m, v (16); write param, m, v (12) + 16-bit copy (2)


@dataclass(frozen=True)
class AnalyticResult:
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float             # hardware FLOPs incl. recomputation (Narayanan eq. 3)
    model_tflops_per_gpu: float       # PaLM model FLOPs (no recomputation)
    mfu: float
    hfu: float
    bubble_fraction: float            # bubble / step
    bubble_time_s: float
    compute_time_s: float             # m x slowest stage (F + B + W), comm excluded
    comm_time_by_kind: MappingProxyType  # seconds per step on one device, by what it serves
    comm_time_s: float
    exposed_comm_s: float
    optimizer_time_s: float
    memory: MemoryBreakdown
    microbatches: int
    gpus: int
    flops_per_step: float

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def oom(self) -> bool:
        return self.memory.oom

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("memory", "comm_time_by_kind")}
        d["comm_time_by_kind"] = dict(self.comm_time_by_kind)
        d["memory_per_gpu_bytes"] = self.memory_per_gpu_bytes
        d["memory"] = {"model_state_bytes": self.memory.model_state_bytes,
                       "activation_bytes": self.memory.activation_bytes,
                       "logits_bytes": self.memory.logits_bytes,
                       "capacity_bytes": self.memory.capacity_bytes}
        d["oom"] = self.oom
        return d

    def __repr__(self) -> str:
        return (f"AnalyticResult(step {self.step_time_s:.4g} s, {self.tflops_per_gpu:.4g} TFLOP/s/GPU, "
                f"MFU {self.mfu:.1%}, bubble {self.bubble_fraction:.1%}, exposed comm "
                f"{self.exposed_comm_s:.3g} s, {self.memory!r})")


@dataclass(frozen=True)
class _Layer:
    """Times of one layer for one micro-batch on one TP rank (seconds)."""
    fwd: float
    bwd_input: float
    bwd_weight: float
    attn_fwd: float       # attention core forward (what selective recompute repeats)
    tp_comm_fwd: float    # exposed TP collectives of one forward


def _check(model: ModelSpec, cfg: ParallelConfig) -> None:
    t, chunks = cfg.tp, cfg.pp * cfg.virtual_stages
    if model.heads % t:
        raise ParasimError(f"tp={t} must divide the {model.heads} attention heads")
    if model.layers % chunks:
        raise ParasimError(f"{model.layers} layers cannot be split evenly into pp x v = {chunks} chunks")


def _layer(model: ModelSpec, cfg: ParallelConfig, hw: Hardware, A: Assumptions, tp_ar_s: float) -> _Layer:
    s, b, h, t = model.seq, cfg.micro_batch_size, model.hidden, cfg.tp
    T, hd, f = b * s, model.head_dim, model.ffn_hidden
    dt = A.dtype
    mm = lambda m, n, k, batch=1: matmul_time_s(m, n, k, hw, dt, batch)  # noqa: E731
    linears = [(T, (h + 2 * model.kv_dim) / t, h),                     # QKV
               (T, h, h / t),                                          # output projection
               (T, (2 if model.gated_mlp else 1) * f / t, h),          # MLP up (+ gate)
               (T, h, f / t)]                                          # MLP down
    heads = b * model.heads / t
    fwd_mm = sum(mm(*x) for x in linears)
    attn_mm = mm(s, s, hd, heads) + mm(s, hd, s, heads)                # scores, context
    bwd_in = sum(mm(m, k, n) for m, n, k in linears)
    bwd_w = sum(mm(k, n, m) for m, n, k in linears)
    attn_bwd = 2 * mm(s, hd, s, heads) + mm(s, s, hd, heads) + mm(s, hd, s, heads)
    rep = 1 / t if cfg.sequence_parallel else 1.0
    softmax_bytes = 9 * model.heads * b * s * s / t
    ew_fwd_bytes = 22 * s * b * h * rep + (6 if model.gated_mlp else 4) * s * b * f / t + softmax_bytes
    attn_fwd = attn_mm + memory_time_s(softmax_bytes, hw)
    fwd = fwd_mm + attn_mm + memory_time_s(ew_fwd_bytes, hw)
    bwd_input = bwd_in + attn_bwd + memory_time_s(2 * ew_fwd_bytes, hw)
    comm = 0.0 if A.overlap_tp_comm else 2 * tp_ar_s
    return _Layer(fwd, bwd_input, bwd_w, attn_fwd, comm)


def _logits(model: ModelSpec, cfg: ParallelConfig, hw: Hardware, A: Assumptions) -> tuple[float, float, float]:
    T, h, Vt = cfg.micro_batch_size * model.seq, model.hidden, model.vocab / cfg.tp
    mm = lambda m, n, k: matmul_time_s(m, n, k, hw, A.dtype)  # noqa: E731
    ce = memory_time_s(12 * T * Vt, hw)     # fp32 logits written, read for softmax, written again
    return mm(T, Vt, h) + ce, mm(T, h, Vt) + 2 * ce / 3, mm(h, Vt, T)


def estimate(model: ModelSpec | str, config: ParallelConfig, hardware: Hardware | str,
             assumptions: Assumptions = Assumptions()) -> AnalyticResult:
    """Closed-form step time, throughput and memory of one configuration (module docstring)."""
    model, hw, cfg, A = get_model(model), get_hardware(hardware), config, assumptions
    _check(model, cfg)
    t, p, d, v, m = cfg.tp, cfg.pp, cfg.dp, cfg.virtual_stages, cfg.microbatches
    s, b, h, L = model.seq, cfg.micro_batch_size, model.hidden, model.layers
    topo = hw.topology(cfg.gpus, A.link_efficiency)
    algo = A.collective_algo
    act_bytes = 2 * b * s * h                                       # one (s, b, h) 16-bit tensor

    tp_ar = collective_time_s("all_reduce", act_bytes, cfg.tp_group(), topo, algo)
    lay = _layer(model, cfg, hw, A, tp_ar)
    Ls = L // p
    rc_extra = {"none": 0.0, "selective": lay.attn_fwd, "full": lay.fwd + lay.tp_comm_fwd}[cfg.recompute]
    F = Ls * (lay.fwd + lay.tp_comm_fwd)
    Bw = Ls * (lay.bwd_input + lay.tp_comm_fwd + rc_extra)
    W = Ls * lay.bwd_weight
    lf, lb, lw = _logits(model, cfg, hw, A)
    stages = [(F, Bw, W)] * p
    stages[-1] = (F + lf, Bw + lb, W + lw)
    slowest = max(sum(x) for x in stages)
    Fm, Bm, Wm = (sum(x[i] for x in stages) / p for i in range(3))
    bubble = (p - 1) * {"gpipe": Fm + Bm + Wm, "1f1b": Fm + Bm + Wm, "interleaved": (Fm + Bm + Wm) / v,
                        "zb-h1": max(0.0, Fm + Bm - Wm), "zb-h2": max(0.0, Fm + Bm - 2 * Wm)}[cfg.schedule]
    compute = m * slowest

    # pipeline p2p: each TP rank sends its 1/t slice over the stage boundary, then all-gathers
    p2p = 0.0
    if p > 1:
        src, dst = cfg.rank(0, 0, 0), cfg.rank(0, 0, 1)
        p2p = topo.link(src, dst).time_s(act_bytes / t)
        if t > 1:
            p2p += collective_time_s("all_gather", act_bytes, cfg.tp_group(), topo, algo)
    p2p_total = 2 * (m * v + p - 1) * p2p if p > 1 else 0.0

    # data-parallel synchronisation of the largest stage's gradients
    emb = model.vocab * h / t
    stage_params = model.layer_params() / t * Ls + emb
    grad_b, param_b = A.grad_reduce_bytes * stage_params, 2 * stage_params
    grp = cfg.dp_group()
    if cfg.zero_stage == 0:
        dp_by = {"all_reduce": collective_time_s("all_reduce", grad_b, grp, topo, algo)}
    else:
        n_ag = 2 if cfg.zero_stage == 3 else 1
        dp_by = {"reduce_scatter": collective_time_s("reduce_scatter", grad_b, grp, topo, algo),
                 "all_gather": n_ag * collective_time_s("all_gather", param_b, grp, topo, algo)}
    dp_time = sum(dp_by.values())
    last_bwd = stages[-1][1] + stages[-1][2]
    dp_exposed = max(0.0, dp_time - last_bwd) if A.overlap_grad_reduce else dp_time
    emb_ar = 0.0
    if p > 1 and model.tied_embeddings:   # first and last stage sum their embedding gradients
        emb_ar = collective_time_s("all_reduce", A.grad_reduce_bytes * emb,
                                   [cfg.rank(0, 0, 0), cfg.rank(0, 0, p - 1)], topo, algo)
    shard = d if cfg.zero_stage >= 1 else 1
    optimizer = memory_time_s(ADAM_BYTES_PER_PARAM * stage_params / shard, hw)

    tp_total = m * 2 * Ls * tp_ar * (3 if cfg.recompute == "full" else 2)
    step = compute + bubble + p2p_total + dp_exposed + emb_ar + optimizer
    by_kind = {"tensor_parallel": tp_total, "pipeline_p2p": p2p_total,
               "data_parallel": dp_time, "embedding_all_reduce": emb_ar}
    comm_total = sum(by_kind.values())
    exposed = (0.0 if A.overlap_tp_comm else tp_total) + p2p_total + dp_exposed + emb_ar

    # FLOPs: forward matmul FLOPs per token, times 3 (fwd + bwd) plus recomputation
    per_tok_layer = 2 * (h * (h + 2 * model.kv_dim) + h * h + (3 if model.gated_mlp else 2) * h * model.ffn_hidden)
    attn_tok = 4 * s * h
    rc = {"none": 0.0, "selective": attn_tok, "full": per_tok_layer + attn_tok}[cfg.recompute]
    tokens = cfg.global_batch * s
    hw_flops = tokens * (L * (3 * (per_tok_layer + attn_tok) + rc) + 3 * 2 * h * model.vocab)
    model_flops = tokens * model.model_flops_per_token()
    peak = hw.peak(A.dtype)

    memory = _memory(model, cfg, hw, stage_params, Ls)
    return AnalyticResult(
        step_time_s=step, tokens_per_s=tokens / step,
        tflops_per_gpu=hw_flops / step / cfg.gpus / 1e12,
        model_tflops_per_gpu=model_flops / step / cfg.gpus / 1e12,
        mfu=model_flops / step / cfg.gpus / peak, hfu=hw_flops / step / cfg.gpus / peak,
        bubble_fraction=bubble / step, bubble_time_s=bubble, compute_time_s=compute,
        comm_time_by_kind=MappingProxyType(by_kind), comm_time_s=comm_total, exposed_comm_s=exposed,
        optimizer_time_s=optimizer, memory=memory, microbatches=m, gpus=cfg.gpus, flops_per_step=hw_flops)


def _memory(model: ModelSpec, cfg: ParallelConfig, hw: Hardware, stage_params: float, Ls: int) -> MemoryBreakdown:
    """Peak of the first stage (most micro-batches in flight) and the last (logits); approximation:
    the last stage holds one micro-batch (m for GPipe), full recompute adds one layer recomputed."""
    s, b, h, a, t = model.seq, cfg.micro_batch_size, model.hidden, model.heads, cfg.tp
    p, m = cfg.pp, cfg.microbatches
    states = model_state_bytes_per_device(stage_params, cfg.dp, cfg.zero_stage)
    per_layer = activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel, cfg.recompute)
    working = 0.0
    if cfg.recompute != "none":   # the layer being recomputed holds its full activations
        working = activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel, "none")
    first = per_layer * Ls * in_flight_microbatches(cfg.schedule, p, m, cfg.virtual_stages) + working
    last = per_layer * Ls * (m if cfg.schedule == "gpipe" else 1) + working
    logit = logits_bytes(s, b, model.vocab, t)
    if p == 1 or first >= last + logit:
        return MemoryBreakdown(states, first, logit if p == 1 else 0.0, hw.memory_bytes)
    return MemoryBreakdown(states, last, logit, hw.memory_bytes)
