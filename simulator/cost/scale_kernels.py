"""What one layer costs on one tensor-parallel rank, as data, and the device model of a scale program.

A scale program (`simulator.cost.scale_sim`) has no numpy data: each Compute instruction carries a
`Kernel` in `attrs["kernel"]` listing its matmul shapes and its element-wise memory traffic. The
shapes are those of `simulator.cost.analytic` (T = b s tokens, one TP rank of t):

  attention half, forward   QKV (T, (h + 2 kv)/t, h); scores (s, s, h/a) and context (s, h/a, s)
                            batched over b a / t heads; projection (T, h, h/t);
                            element-wise (norm + residual) T h (/t with SP) + rope T (q + k)/t
                            + kv_repeat 2 T (q + kv)/t (grouped K, V) + attention_copy T q/t
                            + softmax/dropout 9 a b s^2 / t bytes (without FlashAttention)
  MLP half, forward         up (T, f/t or 2 f/t, h), down (T, h, f/t);
                            element-wise (norm + residual) T h (/t with SP) + GeLU 4 (swiglu) T f / t
  the byte counts per element are the software stack's (`simulator.cost.stack`; Megatron-Core's
  fused kernels: norm 4 + residual 7 = 11 per hidden element, SwiGLU 6, RoPE 4, no K/V repeat, no
  attention copy; torchtitan's eager PyTorch: the sums of its unfused ops' reads and writes);
  backward "B" (input grads) of each linear (m, n, k): the (m, k, n) matmul; attention core
                            3 (s, hd, s) + (s, s, hd); element-wise 2x forward
  backward "W" (weight grads) of each linear: (k, n, m)
  selective recompute adds to the backward the stack's `selective_recompute`: the attention core
  forward (Megatron), or every element-wise op and every second matmul of the block (torchtitan,
  `sac_recomputed`).

`ScaleDeviceModel` prices a Kernel as the sum over its matmuls of the roofline with shape-dependent
utilisation (`simulator.cost.compute.matmul_time_s`) plus memory_time_s(element-wise bytes) --
exactly the sum the closed form makes, so a program and `analytic.estimate` agree by construction
of their parts and differ only in how the clock overlaps and orders them.

The device model that prices a scale program on the full cluster is `scale_device.ScaleDeviceModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simulator.cost.compute import matmul_time_s, memory_time_s
from simulator.cost.hardware import DTYPE_NBYTES
from simulator.cost.model_presets import ModelSpec
from simulator.cost.moe import expert_rows, routed_tokens
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.sac import sac_forward
from simulator.cost.stack import default_stack
from simulator.errors import ParasimError

FP8_CAST_BYTES = 6   # per cast element: amax read (2) + cast read (2) + FP8 write (1) + transposed write (1)
# Megatron-LM's vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py, the default
# without --cross-entropy-loss-fusion), bytes per (token, vocabulary) element of one TP rank's logits.
# Forward: .float() (read 2, write 4), max (read 4), subtract the max in place (4 + 4), exp in place
# (4 + 4), sum (read 4), divide by the sum in place, the softmax kept for the backward (4 + 4) = 38.
# Backward: softmax x grad_output in place (4 + 4), cast back to 16 bits for the output layer (4 + 2) = 14.
CROSS_ENTROPY_FWD_BYTES = 38
CROSS_ENTROPY_BWD_BYTES = 14
# Transformer Engine's userbuffers TP overlap (--tp-comm-overlap) runs its "pipeline" (proj_fprop,
# fc2_fprop: reduce-scatter after the row-parallel forward GEMMs) and "bulk" (qkv_dgrad, qkv_wgrad,
# fc1_dgrad, fc1_wgrad) overlaps with num_sm = 16 and set_sm_margin = True: those GEMMs run on 16 fewer
# SMs (transformer_engine/pytorch/module/base.py, initialize_ub get_default_config); the "ring_exchange"
# ones (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad) use 1 SM and no margin.
TE_UB_SMS = 16
# CUDA kernels one layer launches per pass besides its attention core (counted from Megatron-Core's
# Transformer Engine layer; an assumption, no profile of it is published): attention forward and
# input-gradient pass each 5 (LayerNorm + QKV GEMM, RoPE, projection GEMM, bias-dropout-add; the
# backward mirrors them), MLP 5 (LayerNorm + fc1 GEMM, activation, fc2 GEMM, bias-dropout-add), weight
# gradients one GEMM per linear; the unfused cross-entropy (CROSS_ENTROPY_*_BYTES) 6 kernels forward
# (cast, max, subtract, exp, sum, divide) and 2 backward, besides the output GEMM. Each pays the
# stack's kernel_gap_us (`simulator.cost.stack`).
LAUNCHES = {"attn": 5, "mlp": 5, "wgrad": 2, "cross_entropy_fwd": 6, "cross_entropy_bwd": 2}
GELU_BYTES = 4   # an ungated activation reads and writes each of the f elements once in 16 bits


def fp8_cast_nbytes(linears, which: str) -> float:
    """Memory traffic of Transformer Engine's FP8 casts (Transformer Engine docs, "Using FP8 with
    Transformer Engine"; current scaling: an amax pass, then a fused cast + transpose) for these
    (m, n, k) linear layers of one micro-batch. Forward ("f"): the (m, k) inputs given here are cast
    (pass only the layers whose input is not cast for free: TE fuses the casts of the QKV and first
    MLP inputs into LayerNormLinear / LayerNormMLP's norm and of the second MLP input into its
    activation, so only the attention projection's input pays). Input-gradient pass ("b"): each
    layer's (m, n) output gradient is cast. The weight-gradient GEMMs reuse both casts, and the
    weights' FP8 copies are cached across micro-batches (Megatron passes `is_first_microbatch`)."""
    if which == "f":
        return sum(FP8_CAST_BYTES * m * k for m, n, k in linears)
    if which == "b":
        return sum(FP8_CAST_BYTES * m * n for m, n, k in linears)
    raise ParasimError(f"fp8 casts are counted for the forward ('f') or the input gradient ('b'), not {which!r}")


class MatMul(NamedTuple):
    """One matmul of a Kernel: `batch` independent (m, k) @ (k, n) products (`Kernel`)."""

    m: float
    n: float
    k: float
    batch: float = 1
    time_scale: float = 1.0      # multiplies the time, not the counted FLOPs (FlashAttention)
    sixteen_bit: bool = False    # stays BF16 under FP8 (attention core, output layer)
    sms_reserved: int = 0        # SMs a concurrent communication kernel takes from it (TE_UB_SMS)
    core: bool = False           # the fused attention core: at the stack's attention_efficiency


@dataclass(frozen=True, eq=False)
class Kernel:
    """A fused piece of work: matmuls (`MatMul`, or plain (m, n, k, batch) tuples) and element-wise
    bytes. `sms_reserved`: SMs a concurrent communication kernel takes from a GEMM (TE_UB_SMS),
    which then runs sms / (sms - reserved) times longer on a GPU that lists its SMs.
    `time_scale` (default 1) multiplies a matmul's time but not its counted FLOPs: FlashAttention
    skips the blocks a causal mask hides (0.5) and recomputes the scores in its backward (5/4 of
    the 4 attention-core backward matmuls), while FLOPs stay counted as Megatron counts them
    (Narayanan et al. 2021 eq. 3). Compared and hashed by identity: a program shares one Kernel
    among all instructions that do the same work, and the device model caches its time per Kernel."""

    name: str
    matmuls: tuple[tuple[float, ...], ...] = ()
    ew_nbytes: float = 0.0
    launches: int = 0            # CUDA kernels it stands for, each paying the stack's kernel_gap_us

    @property
    def flops(self) -> float:
        return sum(2.0 * mm[0] * mm[1] * mm[2] * mm[3] for mm in self.matmuls)

    def nbytes(self, itemsize: int = 2) -> float:
        """Memory traffic: matmul operands (m k + k n + m n per batch) plus element-wise bytes."""
        return self.ew_nbytes + sum(itemsize * (mm[0] * mm[2] + mm[2] * mm[1] + mm[0] * mm[1]) * mm[3]
                                    for mm in self.matmuls)

    def time_s(self, hw, dtype: str = "bf16", stack=None) -> float:
        """Sum over its matmuls of the shape-aware roofline (x time_scale) + element-wise bytes at
        the memory bound (`simulator.cost.compute`) + `launches` x the stack's kernel gap; the
        attention core's matmuls at the stack's attention_efficiency (`simulator.cost.stack`; None:
        the default stack): the one pricing of a kernel, for the closed form and the event clock alike.

        With dtype "fp8" only the linear layers' GEMMs run in FP8 (Transformer Engine's
        `fp8_autocast` covers its Linear modules): a matmul marked 16-bit (sixth field True: the
        attention core, which TE's fused attention keeps in BF16 unless FP8 attention is asked
        for, and the output layer, a plain Megatron linear) runs at the bf16 rate. The casts to
        FP8 are element-wise bytes of the kernel (`fp8_cast_nbytes`)."""
        st = stack or default_stack()
        t = memory_time_s(self.ew_nbytes, hw, st) + self.launches * st.kernel_gap_us * 1e-6
        sms = getattr(hw, "sms", 0)
        for mm in map(lambda x: MatMul(*x), self.matmuls):
            dt = "bf16" if dtype == "fp8" and mm.sixteen_bit else dtype
            x = matmul_time_s(mm.m, mm.n, mm.k, hw, dt, mm.batch, st) * mm.time_scale
            if mm.core:
                x /= st.attention_efficiency
            if mm.sms_reserved and sms > mm.sms_reserved:
                x *= sms / (sms - mm.sms_reserved)
            t += x
        return t

    def __add__(self, other: "Kernel") -> "Kernel":
        return Kernel(f"{self.name}+{other.name}", self.matmuls + other.matmuls, self.ew_nbytes + other.ew_nbytes,
                      self.launches + other.launches)

    def __repr__(self) -> str:
        return f"Kernel({self.name}: {len(self.matmuls)} matmuls, {self.flops:.3g} FLOP, {self.ew_nbytes:.3g} B ew)"


@dataclass(frozen=True)
class LayerKernels:
    """The kernels of one transformer layer for one micro-batch on one TP rank, and the logits.
    `core_fwd`: the attention core's forward (what selective recomputation repeats)."""

    attn_fwd: Kernel
    mlp_fwd: Kernel
    attn_b: Kernel       # input gradients (+ selective recompute of the attention core)
    mlp_b: Kernel
    attn_w: Kernel       # weight gradients
    mlp_w: Kernel
    logits_fwd: Kernel
    logits_b: Kernel
    logits_w: Kernel
    core_fwd: Kernel = Kernel("core")
    shared_fwd: Kernel = Kernel("shared")   # the shared experts' share of mlp_fwd (their overlap, `cost.moe`)
    shared_b: Kernel = Kernel("shared")     # ... of mlp_b
    cp_parts: "AttentionParts | None" = None  # cp > 1: the attention cut where its exchanges go
    moe_parts: "MoEParts | None" = None       # MoE: the router apart from the experts


class MoEParts(NamedTuple):
    """A MoE layer's MLP half cut where Megatron-Core cuts it: the router (before the token
    dispatch; its input gradient after the dispatch's backward) and the experts between the dispatch
    and the combine. mlp_fwd / mlp_b / mlp_w are their sums; `*_bw` the fused input + weight gradients."""

    router_fwd: Kernel
    experts_fwd: Kernel
    experts_b: Kernel
    router_b: Kernel
    experts_bw: Kernel
    router_bw: Kernel


class AttentionParts(NamedTuple):
    """The attention half cut where context parallelism's exchanges sit (cp > 1), each kernel one
    of the runnable's (`parallel.cp_attention`): forward the QKV projection, one core step (a ring
    step of s/c keys for p2p, `cp_attention.ring_order`; Ulysses' whole core of a/c heads for a2a)
    and the output projection; backward the projection's input gradient (+ its weight gradient in
    `proj_bw`), one core step, the dK/dV sum after a ring step (`dkv_add`), the QKV input gradient
    (+ weight: `qkv_bw`). The layer's attn_fwd / attn_b / attn_w are their sums (`steps` core steps,
    `steps - 1` adds), so the closed form prices the same kernels."""

    qkv_fwd: Kernel
    core_fwd: Kernel
    proj_fwd: Kernel
    proj_b: Kernel
    core_b: Kernel
    dkv_add: Kernel
    qkv_b: Kernel
    proj_bw: Kernel
    qkv_bw: Kernel
    steps: int


def layer_kernels(model: ModelSpec, cfg: ParallelConfig, assumptions: Assumptions | None = None) -> LayerKernels:
    """One layer's work on one rank of (t, c): T = b s / c tokens (module docstring). With context
    parallelism the rank's s/c queries meet all s keys (ring attention, p2p) or its a/c heads see
    the whole sequence (Ulysses, a2a): either way 1/c of the attention core. With FlashAttention
    the core has no s^2 element-wise traffic, runs at half time for the causal mask and its
    backward recomputes the scores (Kernel.time_scale). MoE: the MLP is this rank's experts' rows
    (`moe.expert_rows`) through a 1/etp slice of the expert FFN, with an h x E router over the tokens
    the rank routes (`moe.routed_tokens`)."""
    A = (assumptions or Assumptions()).resolved(model)
    s, b, h, t, c = model.seq, cfg.micro_batch_size, model.hidden, cfg.tp, cfg.cp
    T, a = b * s / c, model.heads
    dqk, dv = model.core_dims
    rep = 1 / t if cfg.sequence_parallel else 1.0
    if cfg.cp_comm_type == "a2a":
        sq, heads = s, b * a / (t * c)
    else:
        sq, heads = s / c, b * a / t
    # the attention's linears (`ModelSpec.attention_linears`): the ones before the core, and the output
    split = {"column": lambda i, o: (T, o / t, i), "row": lambda i, o: (T, o, i / t), "replicated": lambda i, o: (T, o, i)}
    linears = [split[sp](i, o) for _n, i, o, sp in model.attention_linears()]
    qkv, proj = tuple(linears[:-1]), linears[-1]
    experts = getattr(model, "num_experts", 0)
    gate = 2 if model.gated_mlp else 1
    if experts:
        Te, f, et = expert_rows(model, cfg, A), model.moe_ffn_hidden, cfg.expert_tp
        up, down, router = (Te, gate * f / et, h), (Te, h, f / et), ((routed_tokens(model, cfg), experts, h),)
        fs = model.moe_shared_expert_hidden   # shared experts: a tensor-parallel MLP over all T tokens
        shared = ((T, gate * fs / t, h), (T, h, fs / t)) if fs else ()
    else:
        Te, f = T, model.ffn_hidden
        up, down, router, shared = (T, gate * f / t, h), (T, h, f / t), (), ()
    flash = A.flash_attention
    fs, bs = (0.5, 0.5 * 5 / 4) if flash else (1.0, 1.0)
    # the attention core stays 16-bit under FP8 (last field, `Kernel.time_s`)
    # the keys one core kernel sees: all s, or s/c per ring step (p2p, Transformer Engine launches one
    # FlashAttention kernel per step; each step half-masked with the load-balanced split, `cp_split`)
    steps = c if c > 1 and cfg.cp_comm_type != "a2a" else 1
    sk = s / steps
    step_fwd = (MatMul(sq, sk, dqk, heads, fs, True, core=True), MatMul(sq, dv, sk, heads, fs, True, core=True))
    step_bwd = tuple(MatMul(*x, bs, True, core=True) for x in ((sq, dqk, sk, heads), (sq, dv, sk, heads),
                                                                 (sq, sk, dv, heads), (sk, dqk, sq, heads)))
    core_fwd, core_bwd = step_fwd * steps, step_bwd * steps
    st = A.profile     # the stack's element-wise traffic per element (module docstring)
    softmax = 0.0 if flash else 9 * heads * sq * s
    if model.multi_latent_attention:   # the rotary part: one per query head, one key part shared by all
        rope_width, repeat_width = (model.heads / t + 1) * model.qk_pos_emb_head_dim, 0.0
    else:                              # queries and keys; grouped K and V each copied to every query head
        rope_width = (model.heads * model.head_dim + model.kv_dim) / t
        repeat_width = 2 * rope_width if model.kv_heads < model.heads else 0.0
    rope = 0.0 if model.position_embedding else st.rope_bytes * T * rope_width
    repeat = st.kv_repeat_bytes * T * repeat_width
    ew_attn = (st.norm_bytes + st.residual_bytes) * T * h * rep + rope + repeat \
        + st.attention_copy_bytes * T * model.heads * dv / t + softmax
    act = st.swiglu_bytes if model.gated_mlp else GELU_BYTES
    ew_mlp = (st.norm_bytes + st.residual_bytes) * T * h * rep + act * Te * f / (cfg.expert_tp if experts else t)

    def lin(shapes, which, ub=0):  # forward (m, n, k); input grad (m, k, n); weight grad (k, n, m)
        out = []
        for m_, n_, k_ in shapes:
            mm = {"f": (m_, n_, k_), "b": (m_, k_, n_), "w": (k_, n_, m_)}[which]
            out.append(MatMul(*mm, sms_reserved=ub))
        return tuple(out)

    ub = TE_UB_SMS if A.overlap_tp_comm and t > 1 else 0   # TE userbuffers' SM margin (TE_UB_SMS)

    def cast(shapes, which):  # Transformer Engine's FP8 casts around these linear layers' GEMMs
        return fp8_cast_nbytes(shapes, which) if A.fp8 else 0.0

    # kernels launched (`LAUNCHES`): the attention core is one fused kernel per pass, or three unfused;
    # each extra QKV GEMM (MLA's down and up projections) one more; a shared expert its fc1, activation, fc2
    core_n = 1 if flash else 3
    shared_n = 3 if shared else 0
    attn_n = LAUNCHES["attn"] + len(qkv) - 1
    attn_fwd = Kernel("attn_fwd", lin(qkv, "f") + core_fwd + lin((proj,), "f", ub), ew_attn + cast((proj,), "f"),
                      attn_n + core_n * steps)
    ew_shared = (6 if model.gated_mlp else 4) * T * model.moe_shared_expert_hidden / t if shared else 0.0
    shared_fwd = Kernel("shared_fwd", lin(shared, "f"), ew_shared, shared_n)
    shared_b = Kernel("shared_bgrad", lin(shared, "b"), 2 * ew_shared, shared_n)
    # the MoE router (Megatron-Core's TopKRouter) runs before the dispatch, its backward after the
    # dispatch's (`MoEParts`); its GEMMs count with the MLP's launches
    router_fwd = Kernel("router_fwd", lin(router, "f"))
    experts_fwd = Kernel("mlp_fwd", lin((up,), "f") + lin((down,), "f", ub) + shared_fwd.matmuls,
                         ew_mlp + ew_shared, LAUNCHES["mlp"] + shared_n)   # casts fused (fp8_cast_nbytes)
    mlp_fwd = _total("mlp_fwd", router_fwd, experts_fwd)
    op_sac = cfg.recompute == "selective" and st.selective_recompute == "every_other_matmul"
    selective = cfg.recompute == "selective" and not flash and not op_sac   # FlashAttention recomputes the core anyway
    again_attn, again_mlp = sac_forward(model, qkv, proj, up, down, gate) if op_sac else ((), ())
    attn_b = Kernel("attn_bgrad", (core_fwd if selective else ()) + lin(again_attn, "f") + lin((proj,), "b")
                    + core_bwd + lin(qkv, "b", ub),
                    (3 if op_sac else 2) * ew_attn + (softmax if selective else 0.0) + cast(qkv + (proj,), "b"),
                    attn_n * (2 if op_sac else 1) + core_n * (2 if selective else 1) * steps)
    experts_b = Kernel("mlp_bgrad", lin(again_mlp, "f") + lin((down,), "b") + lin((up,), "b", ub)
                       + shared_b.matmuls, (3 if op_sac else 2) * ew_mlp + 2 * ew_shared
                       + cast((up, down) + shared, "b"), LAUNCHES["mlp"] * (2 if op_sac else 1) + shared_n)
    router_b = Kernel("router_bgrad", lin(router, "b"))
    mlp_b = _total("mlp_bgrad", experts_b, router_b)
    attn_w = Kernel("attn_wgrad", lin((proj,), "w") + lin(qkv, "w", ub), launches=1 + len(qkv))
    experts_w = Kernel("mlp_wgrad", lin((down,), "w") + lin((up,), "w", ub) + lin(shared, "w"),
                       launches=LAUNCHES["wgrad"] + len(shared))
    router_w = Kernel("router_wgrad", lin(router, "w"))
    mlp_w = _total("mlp_wgrad", experts_w, router_w)
    moe = MoEParts(router_fwd, experts_fwd, experts_b, router_b, experts_b + experts_w, router_b + router_w) \
        if experts else None
    parts = None
    if c > 1:   # the attention cut where context parallelism's exchanges go (`AttentionParts`)
        n_pass, proj_n = (2 if op_sac else 1), 2       # the projection GEMM and bias-dropout-add (`LAUNCHES`)
        qkv_ew = ew_attn - softmax                     # norm, residual, rope, copies: with the QKV projection
        sm_b = (3 if op_sac else 2) * softmax + (softmax if selective else 0.0)
        qkv_b = Kernel("attn_qkv_bgrad", lin(qkv, "b", ub), (3 if op_sac else 2) * qkv_ew + cast(qkv + (proj,), "b"),
                       (attn_n - proj_n) * n_pass)
        proj_b = Kernel("attn_proj_bgrad", lin(again_attn, "f") + lin((proj,), "b"), 0.0, proj_n * n_pass)
        proj_w = Kernel("attn_proj_wgrad", lin((proj,), "w"), launches=1)
        qkv_w = Kernel("attn_qkv_wgrad", lin(qkv, "w", ub), launches=len(qkv))
        parts = AttentionParts(
            Kernel("attn_qkv_fwd", lin(qkv, "f"), qkv_ew, attn_n - proj_n),
            Kernel("attn_core_fwd", step_fwd, softmax / steps, core_n),
            Kernel("attn_proj_fwd", lin((proj,), "f", ub), cast((proj,), "f"), proj_n),
            proj_b, Kernel("attn_core_bgrad", (step_fwd if selective else ()) + step_bwd, sm_b / steps,
                           core_n * (2 if selective else 1)),
            Kernel("attn_dkv_add", (), 3 * cp_exchange_nbytes(model, cfg, A.dtype)[0], 1),   # 2 reads, 1 write
            qkv_b, proj_b + proj_w, qkv_b + qkv_w, steps)
        attn_fwd = _total("attn_fwd", parts.qkv_fwd, *[parts.core_fwd] * steps, parts.proj_fwd)
        attn_b = _total("attn_bgrad", proj_b, *[parts.core_b] * steps, *[parts.dkv_add] * (steps - 1), qkv_b)
        attn_w = _total("attn_wgrad", proj_w, qkv_w)
    Vt = padded_vocab(model, t) / t
    return LayerKernels(attn_fwd, mlp_fwd, attn_b, mlp_b, attn_w, mlp_w,    # output layer: 16-bit
                        Kernel("logits_fwd", (MatMul(T, Vt, h, sixteen_bit=True),), CROSS_ENTROPY_FWD_BYTES * T * Vt,
                               1 + LAUNCHES["cross_entropy_fwd"]),
                        Kernel("logits_bgrad", (MatMul(T, h, Vt, sixteen_bit=True),), CROSS_ENTROPY_BWD_BYTES * T * Vt,
                               1 + LAUNCHES["cross_entropy_bwd"]),
                        Kernel("logits_wgrad", (MatMul(h, Vt, T, sixteen_bit=True),), launches=1),
                        Kernel("core_fwd", core_fwd, softmax, core_n * steps), shared_fwd, shared_b, parts, moe)


def _total(name: str, *kernels: Kernel) -> Kernel:
    """One kernel standing for `kernels` run one after another (their matmuls, bytes and launches)."""
    return Kernel(name, sum((k.matmuls for k in kernels), ()), sum(k.ew_nbytes for k in kernels),
                  sum(k.launches for k in kernels))


def padded_vocab(model: ModelSpec, tp: int) -> int:
    """The vocabulary the logits layer multiplies by (Megatron pads it, `ModelSpec.padded_vocab`)."""
    pad = getattr(model, "padded_vocab", None)
    return pad(tp) if pad is not None else model.vocab


def activation_nbytes(model: ModelSpec, cfg: ParallelConfig, dtype: str = "bf16") -> int:
    """One (s/c, b, h) activation in the training dtype: what crosses a stage boundary."""
    return int(DTYPE_NBYTES[dtype] * cfg.micro_batch_size * model.seq * model.hidden / cfg.cp)


def cp_exchange_nbytes(model: ModelSpec, cfg: ParallelConfig, dtype: str = "bf16") -> tuple[int, int, int]:
    """One tensor rank's context-parallel exchanges of one layer, in the training dtype, over its
    b s / c tokens: (K and V: one ring step of p2p attention; q, k, v: Ulysses' all-to-all before the
    attention core; its output: the all-to-all after). The closed form (`analytic._layer_comm`) and
    the scale program price the same sizes."""
    e, T = DTYPE_NBYTES[dtype], cfg.micro_batch_size * model.seq / cfg.cp
    return (int(e * T * sum(model.qkv_widths[1:]) / cfg.tp), int(e * T * sum(model.qkv_widths) / cfg.tp),
            int(e * T * model.hidden / cfg.tp))
