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
  reduce-scatter of the same volume, Korthikanti et al. 2022, and the backward gathers each
  half's input again). Not overlapped (`Assumptions`). Outside the blocks, per micro-batch: the
  embedding's, the output layer's and the loss's collectives, and under SP one all-reduce of the
  partial norm and bias gradients per step (`tp_ends`, what the scale program emits).
  recompute: full adds the whole forward to B; selective adds the attention core only, or under
  torchtitan's op-level policy every element-wise op and every second matmul (the stack's).
Last stage adds the logits (T, V/t, h) and cross-entropy traffic; stages hold L/p layers. Each
stage's W adds `Assumptions.grad_accum_bytes` of HBM traffic per parameter it holds (0 by default).

Step (p stages, m micro-batches, v chunks; F, B, W per-stage means, M = slowest stage F+B+W):
  step = m M + bubble + exposed p2p + exposed DP sync + embedding all-reduce + optimizer
  bubble: GPipe/1F1B (p-1)(F+B+W); interleaved (p-1)(F+B+W)/v; ZB-H1 (p-1)(F+B-W);
          ZB-H2 (p-1)(F+B-2W), floored at 0 (Narayanan et al. 2021, Sec. 2.2; Qi et al. 2023),
          of the other stages' mean F, B, W (the bottleneck waits for their work once).
  The step is the sum of `step_breakdown.StepBreakdown`'s parts (docs/step-model.md).
  p2p (`analytic_comm.p2p_exposed`): Megatron's scatter/gather: each TP rank sends T h 2 / t bytes over the
       boundary, then (no SP) an all-gather; blocking on both sides, so the bottleneck device pays its
       own 4 exchanges per micro-batch and chunk (fewer on the end stages), each over its real link,
       and its bubble the first activation's and last gradient's way through every boundary.
  DP sync of the stage's gradients (fp32): ZeRO 0 all-reduce; 1-2 reduce-scatter of gradients
       (ZeRO-1 with `Assumptions.dp_grad_all_reduce`: all-reduce) + all-gather of the parameters (`Assumptions.param_bytes`: 16-bit in the mixed recipes); 3 reduce-scatter + two parameter all-gathers (3 Psi) per
       micro-batch, one per sub-module, a third for what full recomputation re-gathers (`zero3_fetch`).
  optimizer: Adam is memory-bound, 30 bytes per (sharded) parameter.
Outputs: TFLOP/s per GPU as Narayanan et al. 2021 eq. 3 counts it (hardware FLOPs, including
recomputation, factor 96 for full recompute), model TFLOP/s and MFU by PaLM's 6N + 12 L H Q T, or
6N + 6 L H Q T with `Assumptions.causal_attention_flops` (the conventions and who uses which:
`simulator.cost.flops`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType

from simulator.cost.analytic_comm import chunk_times, dp_sync, p2p_exposed
from simulator.cost.comm import NVLS, collective_time_s
from simulator.cost.compute import memory_time_s
from simulator.cost.fsdp import copy_out_bytes, fsdp_sync, is_fsdp
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.layer_kinds import check_mixed, chunk_dense_flags, device_dense_layers
from simulator.cost.memory import MemoryBreakdown
from simulator.cost.memory_report import memory_report
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.moe import (
    check_moe,
    exposed_moe_s,
    moe_collective_time_s,
    moe_collectives,
    moe_group,
)
from simulator.cost.moe_overlap import overlap_exposed_per_layer, shared_halves
from simulator.cost.mtp import check_mtp, mtp_parts, mtp_times_s
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import (
    embedding_copy,
    heads_on,
    layer_params_on_rank,
    stage_params_on_rank,
)
from simulator.cost.scale_kernels import cp_exchange_nbytes, layer_kernels, padded_vocab
from simulator.cost.step_breakdown import StepBreakdown, breakdown_from_parts, closed_form_leaves_out
from simulator.cost.step_flops import hardware_flops_per_step
from simulator.cost.tp_ends import end_times_s, sp_grad_time_s
from simulator.cost.zero3_fetch import zero3_first_gathers, zero3_pass
from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import executed_idle, schedule_spec

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
    compute_time_s: float             # m x slowest stage's kernels (F + B + W), communication excluded
    comm_time_by_kind: MappingProxyType  # seconds per step on one device, by what it serves
    comm_time_s: float
    exposed_comm_s: float             # the breakdown's exposed communication, every kind
    optimizer_time_s: float
    memory: MemoryBreakdown
    microbatches: int
    gpus: int
    flops_per_step: float
    breakdown: StepBreakdown          # the step, part by part; adds up to step_time_s (`step_breakdown`)
    leaves_out: tuple = ()            # what this estimate leaves out that the event clock prices (`LEAVES_OUT`)

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def oom(self) -> bool:
        return self.memory.oom

    def to_dict(self) -> dict:
        """Plain data (JSON-able): every number of the result, tables as dicts."""
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("memory", "comm_time_by_kind", "breakdown")}
        d["breakdown"] = self.breakdown.to_dict()
        d["leaves_out"] = list(self.leaves_out)
        d["comm_time_by_kind"] = dict(self.comm_time_by_kind)
        d["memory_per_gpu_bytes"] = self.memory_per_gpu_bytes
        d["memory"] = self.memory.as_dict()
        d["oom"] = self.oom
        return d

    as_dict = to_dict  # the older name

    def __repr__(self) -> str:
        return (f"AnalyticResult(step {self.step_time_s:.4g} s, {self.tflops_per_gpu:.4g} TFLOP/s/GPU, "
                f"MFU {self.mfu:.1%}, bubble {self.bubble_fraction:.1%}, exposed comm "
                f"{self.exposed_comm_s:.3g} s, {self.memory!r})")


def check_estimate(model: ModelSpec, cfg: ParallelConfig, A: Assumptions | None = None) -> None:
    t, c = cfg.tp, cfg.cp
    if model.heads % t:
        raise ParasimError(f"tp={t} must divide the {model.heads} attention heads")
    if model.kv_heads % t:
        raise ParasimError(f"tp={t} must divide the {model.kv_heads} key/value heads (query groups)")
    if c > 1 and cfg.cp_comm_type == "p2p" and model.seq % (2 * c):
        raise ParasimError(f"context parallelism c={c} needs the sequence {model.seq} divisible by 2c = {2 * c} "
                           f"(load-balanced causal chunks, Megatron-Core)")
    if c > 1 and cfg.cp_comm_type == "a2a" and model.heads % (t * c):
        raise ParasimError(f"Ulysses (a2a) context parallelism needs tp x cp = {t * c} to divide the "
                           f"{model.heads} heads")
    check_moe(model, cfg, A)
    cfg.chunk_layers(model.layers)          # refuses layer splits that do not exist
    if A is not None:
        check_mixed(model, cfg, A)
    check_mtp(model, cfg, A)


def _slowest_link(topo, ranks):
    return topo.inter if topo.spans_nodes(ranks) else topo.intra


def _layer_comm(model, cfg, hw, A, K, topo) -> dict:
    """Seconds of one layer's communication for one micro-batch, forward and backward, exposed
    after the overlaps of `Assumptions` (module docstring)."""
    t, c, b, s, h = cfg.tp, cfg.cp, cfg.micro_batch_size, model.seq, model.hidden
    T = b * s / c
    act = 2 * T * h                                                # one (s/c, b, h) 16-bit tensor
    ar_algo = NVLS if A.nvls else A.collective_algo
    half = half_b = 0.0        # one layer half's collectives, forward and backward
    if t > 1:
        grp = cfg.tp_group()
        if cfg.sequence_parallel:  # the backward gathers the input again (the scale program's `tp_in`)
            ag = collective_time_s("all_gather", act, grp, topo, A.collective_algo)
            half = ag + collective_time_s("reduce_scatter", act, grp, topo, A.collective_algo)
            half_b = half + ag
        else:
            half = half_b = collective_time_s("all_reduce", act, grp, topo, ar_algo)
    tp, tp_b = 2 * half, 2 * half_b
    if A.overlap_tp_comm:      # chunks pipelined with the layer's linear GEMMs (weight-gradient shapes)
        gemms = K.attn_w.time_s(hw, A.matmul_dtype, A.profile) + K.mlp_w.time_s(hw, A.matmul_dtype, A.profile)
        tp, tp_b = max(0.0, tp - gemms), max(0.0, tp_b - gemms)
    cp_f = cp_b = cp_total = 0.0
    if c > 1:
        grp = cfg.cp_group()
        kv, qkv, out = cp_exchange_nbytes(model, cfg, A.dtype)   # the scale program's sizes
        if cfg.cp_comm_type == "p2p":   # TE's ring (`cp_attention.ring_order`), as the clock runs it
            # one transfer; a device's send and receive of a ring step take its comm lane one after the
            # other (the clock's rule), beside the step's core kernel: forward 2 transfers per step
            # (K/V out, the next in), backward 4 (K/V and the dK/dV sum, each way) beside the step's
            # kernel and its dK/dV sum, c - 1 steps each way
            step = _slowest_link(topo, grp).time_s(kv)
            P, kt = K.cp_parts, lambda k: k.time_s(hw, A.matmul_dtype, A.profile)  # noqa: E731
            cp_total = 3 * (c - 1) * step
            cp_f = (c - 1) * max(0.0, 2 * step - kt(P.core_fwd))
            cp_b = (c - 1) * max(0.0, 4 * step - kt(P.core_b) - kt(P.dkv_add))
        else:                           # Ulysses: q, k, v in and the output back, each way
            x = (collective_time_s("all_to_all", qkv, grp, topo, A.collective_algo)
                 + collective_time_s("all_to_all", out, grp, topo, A.collective_algo))
            cp_f = cp_b = x
            cp_total = 2 * x
    dispatch, combine = moe_collectives(model, cfg, A)     # one MoE layer's forward (`cost.moe`)
    moe_d, moe_c = (sum(moe_collective_time_s(x.kind, x.group, x.nbytes, moe_group(cfg, x.group), topo,
                                              A.collective_algo, model.num_experts, model.moe_router_topk)
                        for x in xs) for xs in (dispatch, combine))
    return {"tp_fwd": tp, "tp_bwd": tp_b, "tp_total_fwd": 2 * half, "tp_total_bwd": 2 * half_b, "cp_fwd": cp_f, "cp_bwd": cp_b, "cp_total": cp_total,
            "moe": moe_d + moe_c, "moe_dispatch": moe_d, "moe_combine": moe_c}


def layer_times(model: ModelSpec, cfg: ParallelConfig, hw: Hardware, A: Assumptions, topo=None) -> tuple:
    """One layer and micro-batch on one rank, as `estimate` prices it: (kernels, `_layer_comm`, forward
    kernel seconds, exposed communication by kind, F, B, W seconds with their exposed communication).
    Depends on t, c, b, SP, e, etp and recomputation only (not on p, d, the schedule, v, the stage split
    or ZeRO: the tensor-, context- and expert-parallel groups of rank 0 are the same ranks whatever p
    and d, `ParallelConfig.rank`), so the search (`search_bound`) computes it once for all of those."""
    topo = topo or hw.topology(cfg.gpus, A.link_efficiency)
    dt = A.matmul_dtype
    K = layer_kernels(model, cfg, A)
    stack = A.profile
    kt = lambda k: k.time_s(hw, dt, stack)  # noqa: E731
    cm = _layer_comm(model, cfg, hw, A, K, topo)
    full = cfg.recompute == "full"
    # one layer and micro-batch: kernels, and the exposed communication of each kind (a fully
    # recomputed forward repeats the forward's kernels and collectives)
    f_comp = kt(K.attn_fwd) + kt(K.mlp_fwd)
    rc_comp = f_comp if full else 0.0     # selective: K.attn_b already repeats the attention core
    # MoE dispatch / combine, exposed after the overlaps of `Assumptions` (`moe.exposed_moe_s`)
    shared = [tuple(map(kt, shared_halves(x, x is K.shared_fwd))) for x in (K.shared_fwd, K.shared_b)]
    D, C = cm["moe_dispatch"], cm["moe_combine"]
    ep_l = exposed_moe_s(A, D, C, 3 if full else 2, *shared)
    # one forward pass's share (the merged pairs put all of it in the backward's line, `moe_overlap`)
    f_moe = 0.0 if A.overlap_moe_comm else exposed_moe_s(A, D, C, 2, *shared) - exposed_moe_s(A, D, C, 1, *shared)
    comm_l = {"tp": cm["tp_fwd"] * (2 if full else 1) + cm["tp_bwd"], "cp": cm["cp_fwd"] * (2 if full else 1) + cm["cp_bwd"],
              "ep": ep_l}
    f_l = f_comp + cm["tp_fwd"] + cm["cp_fwd"] + f_moe
    b_l = kt(K.attn_b) + kt(K.mlp_b) + rc_comp + comm_l["tp"] + comm_l["cp"] + comm_l["ep"] - (f_l - f_comp)
    w_l = kt(K.attn_w) + kt(K.mlp_w)
    return K, cm, f_comp, comm_l, f_l, b_l, w_l


def estimate(model: ModelSpec | str, config: ParallelConfig, hardware: Hardware | str,
             assumptions: Assumptions | None = None, *, layer: tuple | None = None,
             memory: MemoryBreakdown | None = None) -> AnalyticResult:
    """Closed-form step time, throughput and memory of one configuration (module docstring).
    `assumptions` (default: the vocabulary's, FlashAttention as the model preset has it) is
    resolved on the model once (`Assumptions.resolved`). `layer` and `memory`: `layer_times` and
    `estimate_memory` of this configuration when the caller has them (the search reuses them)."""
    model, hw, cfg = get_model(model), get_hardware(hardware), config
    A = (assumptions or Assumptions()).resolved(model)
    check_estimate(model, cfg, A)
    t, p, d, v, m, c = cfg.tp, cfg.pp, cfg.dp, cfg.virtual_stages, cfg.microbatches, cfg.cp
    s, h, L = model.seq, model.hidden, model.layers
    topo = hw.topology(cfg.gpus, A.link_efficiency)
    algo = A.collective_algo
    K, cm, f_comp, comm_l, f_l, b_l, w_l = layer_times(model, cfg, hw, A, topo) if layer is None else layer
    comm_l = dict(comm_l)             # its "ep" becomes the slowest stage's below (`layer` may be shared)
    full = cfg.recompute == "full"
    stack = A.profile                  # the software stack's kernels and overheads (`simulator.cost.stack`)
    kt = lambda k: k.time_s(hw, A.matmul_dtype, stack)  # noqa: E731
    layers = cfg.stage_layers(L)
    # a mixed model's dense layers (`layer_kinds`): per device their count, and one's times
    plain = device_dense_layers(model, cfg)
    f_d, b_d, w_d = layer_times(model.dense_layer(), cfg, hw, A, topo)[4:] if any(plain) else (0.0, 0.0, 0.0)
    ep_l = comm_l["ep"]
    lf, lb, lw = kt(K.logits_fwd), kt(K.logits_b), kt(K.logits_w)
    ep_k = [ep_l] * p       # the overlap merges micro-batches by the schedule's pairs (`moe_overlap`)
    if A.overlap_moe_comm:  # MTP modules' layers are MoE layers here (`check_mtp`)
        mtp_blobs = (mtp_parts(model, cfg, A, topo, (lf, lb, lw), kt)[:4],) * model.mtp_num_layers
        ep_k = overlap_exposed_per_layer(cfg, cm["moe_dispatch"], cm["moe_combine"],
                                         kt(K.attn_fwd) + cm["tp_fwd"] + cm["cp_fwd"], kt(K.mlp_fwd), kt(K.mlp_b),
                                         kt(K.mlp_w), kt(K.attn_b) + cm["tp_bwd"] + cm["cp_bwd"], kt(K.attn_w),
                                         chunk_dense_flags(model, cfg), (f_d, b_d, w_d), mtp_blobs)
    # parameters held by each stage, per tensor-parallel rank (embedding/head on the end stages)
    emb = padded_vocab(model, t) * h / t
    last = cfg.last_device            # the LM head's device: p - 1, or 0 for a V-shaped placement
    heads = [heads_on(model, k, p, last) for k in range(p)]
    dense_k, expert_k = zip(*(stage_params_on_rank(model, t, cfg.ep, layers[k], k, p, cfg.expert_tp, last, plain[k])
                              for k in range(p)))
    stages = [[(n - nd) * f_l + nd * f_d, (n - nd) * (b_l - ep_l + ep_k[k]) + nd * b_d, (n - nd) * w_l + nd * w_d]
              for k, (n, nd) in enumerate(zip(layers, plain))]
    for i, x in enumerate((lf, lb, lw)):
        stages[last][i] += x
    # the tensor-parallel collectives outside the blocks, per micro-batch (`tp_ends`), and SP's
    # all-reduce of partial gradients once per step
    ef, eb, hf, hb = end_times_s(model, cfg, A, topo)
    ends_k = [0.0] * p
    for k, i, x in ((0, 0, ef), (0, 1, eb), (last, 0, hf), (last, 1, hb)):
        stages[k][i] += x
        ends_k[k] += x
    # multi-token prediction's modules on the last device, each with its layer (`simulator.cost.mtp`)
    mtp = model.mtp_num_layers
    mtp_kind = model.mtp_layer()
    mtp_fbw = (f_l, b_l - ep_l + ep_k[last], w_l) if mtp_kind is model else layer_times(mtp_kind, cfg, hw, A, topo)[4:]
    mf, mb, mw, mtp_comm = mtp_times_s(model, cfg, A, topo, mtp_fbw, (lf, lb, lw), kt)
    for i, x in enumerate((mf, mb, mw)):
        stages[last][i] += x
    ends_k[last] += mtp_comm
    sp_k = [sp_grad_time_s(model, cfg, A, topo, layers[k], k == last, plain[k]) for k in range(p)]
    for k in range(p):   # gradient accumulation outside the GEMMs, after every micro-batch (`Assumptions`)
        stages[k][2] += memory_time_s(A.grad_accum_bytes * (dense_k[k] + expert_k[k]), hw, stack)
    # pipeline p2p: each TP rank sends its 1/t slice over the stage boundary, then all-gathers; the
    # bottleneck is the device with the most work and exposed exchanges of its own (a middle stage of
    # an uneven split pays four exchanges per micro-batch, the ends two)
    p2p_k = p2p_exposed(cfg, topo, 2 * cfg.micro_batch_size * s * h / c, algo) if p > 1 else [(0.0, 0.0)] * p
    slowest_k = max(range(p), key=lambda k: m * sum(stages[k]) + p2p_k[k][0] + sp_k[k])
    slowest = sum(stages[slowest_k])
    comm_l["ep"] = ep_k[slowest_k]
    # the slowest stage waits, once, for the work of every other stage (warmup and cooldown): for
    # equal stages the schedule's (p-1)(F+B+W)/v (Narayanan et al. 2021 Sec. 2.2); with a heavier
    # stage (the logits of a large vocabulary, uneven splits) the others' mean, not the mean of all
    others = [stages[k] for k in range(p) if k != slowest_k] or stages
    Fm, Bm, Wm = (sum(x[i] for x in others) / len(others) for i in range(3))
    spec = schedule_spec(cfg.schedule, priced=True)
    if spec.per_chunk and p > 1:     # the executed order, each chunk its own times (`executed_idle`)
        ends = {0: (ef, eb, 0.0), p * v - 1: (lf + hf + mf, lb + hb + mb, lw + mw)}
        bubble = executed_idle(cfg.schedule, p, m, v, chunk_times(cfg, L, stages, ends))[slowest_k]
    else:
        bubble = spec.bubble(p, m, Fm, Bm, Wm, v)

    sched_bubble = bubble
    p2p_total, p2p_fill = p2p_k[slowest_k]
    bubble += p2p_fill

    # data-parallel synchronisation of the largest stage's gradients (module docstring)
    k_big = max(range(p), key=lambda k: dense_k[k] + expert_k[k])
    dense, expert = dense_k[k_big], expert_k[k_big]
    fetch = zero3_pass(model, t, cfg.ep, layers[k_big], heads[k_big], cfg.recompute, A.stage3_max_reuse_distance)
    if is_fsdp(cfg) and d * c > 1:        # per-layer units on the bottleneck device (`simulator.cost.fsdp`)
        unit = layer_params_on_rank(model, t, cfg.ep, cfg.expert_tp)    # (dense, expert), as the clock's
        copy_s = tuple(memory_time_s(copy_out_bytes(cfg, x), hw, stack) for x in (sum(unit), emb))
        units = None       # a mixed model's dense layers: units of their own (`layer_kinds`)
        if any(plain):
            pu = (layer_params_on_rank(model.dense_layer(), t)[0], 0.0)
            units = (chunk_dense_flags(model, cfg), pu, (f_d, b_d + w_d),
                     memory_time_s(copy_out_bytes(cfg, pu[0]), hw, stack))
        dp_by, dp_exposed, fsdp_copy, held = fsdp_sync(cfg, A, topo, slowest_k, cfg.chunk_layers(L), unit,
                                                       emb, (f_l, b_l + w_l), lf, True, heads[slowest_k], copy_s,
                                                       units)
        if p > 1:
            # the gathers (and blocking reductions) each micro-batch waits for stretch every stage's
            # share of the fill and drain as they stretch its work: the bubble grows in proportion
            bubble += sched_bubble * held / max(Fm + Bm + Wm, 1e-30)
    else:
        fsdp_copy = 0.0
        # the overlapped ZeRO-1/2 gather hides under the first forward up to its last layer
        window = stages[k_big][0] - f_l - (lf + hf if k_big == last else 0.0)
        dp_by, dp_exposed = dp_sync(cfg, A, topo, dense, expert, stages[k_big], m, fetch,
                                    zero3_first_gathers(model, cfg, k_big, last), window)
    dp_time = sum(dp_by.values())
    emb_ar = 0.0
    if last != 0 and (model.tied_embeddings or embedding_copy(model, last)):   # first and last sum theirs
        emb_ar = collective_time_s("all_reduce", A.grad_reduce_bytes * emb,
                                   [cfg.rank(0, 0, 0), cfg.rank(0, 0, last)], topo, algo)
    shard = cfg.shard_size if cfg.zero_stage >= 1 else 1   # HSDP: d c / dp_replicate (`cost.fsdp`)
    def optimizer_of(k):
        return memory_time_s(ADAM_BYTES_PER_PARAM * (dense_k[k] + expert_k[k]) / shard, hw, stack)
    # the breakdown is the slowest stage's (as the clock's, its bottleneck device's); the step ends
    # with the largest stage's optimizer (the position table makes the first stage the larger end),
    # which the slowest stage waits for
    optimizer = optimizer_of(slowest_k)
    bubble += max(0.0, optimizer_of(k_big) - optimizer)

    n_fwd = 3 if full else 2
    n_mtp = mtp if slowest_k == last else 0       # its MTP modules' layers
    n_slow = layers[slowest_k] + n_mtp
    # the layers with expert all-to-alls (a dense layer's TP and CP are the same)
    n_moe = n_slow - plain[slowest_k] - (n_mtp if not mtp_kind.num_experts else 0)
    # every total is the bottleneck device's, as the clock's (its busiest comm lane) and as what is
    # exposed of it: the tensor-parallel collectives of its layers, its ends and SP's gradient sum
    tp_total = m * n_slow * (cm["tp_total_fwd"] * (n_fwd - 1) + cm["tp_total_bwd"]) \
        + m * ends_k[slowest_k] + sp_k[slowest_k]
    # the step, part by part (`step_breakdown`): the slowest stage's kernels and exposed collectives
    # over m micro-batches, the schedule's bubble, p2p, DP sync and the tied-embedding all-reduce
    exposed_by = {k: m * (n_moe if k == "ep" else n_slow) * x for k, x in comm_l.items()}
    in_layers = sum(exposed_by.values())
    exposed_by.update(pp=p2p_total, dp=dp_exposed + emb_ar)
    exposed_by["tp"] += m * ends_k[slowest_k] + sp_k[slowest_k]
    parts = breakdown_from_parts(m * (slowest - ends_k[slowest_k]) - in_layers + fsdp_copy,
                                 exposed_by, bubble, optimizer,
                                 stack.exposed_step_overhead_s(exposed_by["dp"]))
    step = parts.step_s
    by_kind = {"tensor_parallel": tp_total, "pipeline_p2p": p2p_total,
               "data_parallel": dp_time, "embedding_all_reduce": emb_ar}
    if c > 1:
        by_kind["context_parallel"] = m * n_slow * cm["cp_total"]
    if cm["moe"]:
        by_kind["expert_all_to_all"] = m * n_moe * cm["moe"] * n_fwd
    comm_total = sum(by_kind.values())

    tokens = cfg.global_batch * s
    hw_flops = hardware_flops_per_step(model, cfg, A)      # eq. 3 with recomputation (`step_flops`)
    model_flops = tokens * model.model_flops_per_token(A.causal_attention_flops)   # `simulator.cost.flops`
    peak = hw.peak(A.dtype)

    memory = estimate_memory(model, cfg, hw, A) if memory is None else memory
    return AnalyticResult(
        step_time_s=step, tokens_per_s=tokens / step,
        tflops_per_gpu=hw_flops / step / cfg.gpus / 1e12,
        model_tflops_per_gpu=model_flops / step / cfg.gpus / 1e12,
        mfu=model_flops / step / cfg.gpus / peak, hfu=hw_flops / step / cfg.gpus / peak,
        bubble_fraction=bubble / step, bubble_time_s=bubble, compute_time_s=parts.compute_s,
        comm_time_by_kind=MappingProxyType(by_kind), comm_time_s=comm_total, exposed_comm_s=parts.exposed_total_s,
        optimizer_time_s=optimizer, memory=memory, microbatches=m, gpus=cfg.gpus, flops_per_step=hw_flops,
        breakdown=parts, leaves_out=closed_form_leaves_out(cfg, A))


def estimate_memory(model: ModelSpec, cfg: ParallelConfig, hw: Hardware, A: Assumptions) -> MemoryBreakdown:
    """Peak memory per component of the most loaded stage, as Megatron-LM counts it
    (`simulator.cost.memory_report`); FlashAttention keeps no s^2 scores. `estimate`'s memory, and
    what decides its `oom` (the search checks it before pricing)."""
    return memory_report(model, cfg, hw, recipe=A.recipe, flash_attention=A.flash_attention, dtype=A.dtype,
                         grad_reduce_bytes=A.grad_reduce_bytes)
