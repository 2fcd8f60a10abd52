"""Compile a GPT training step of any size into the Program IR, without data (a "scale program").

The same instructions the real strategies emit, at layer and micro-batch granularity, for one
data-parallel replica of (t, p, d, b, B, schedule, v, recompute, SP, ZeRO):

  program rank k w + i: pipeline device k, tensor-parallel index i (w = t, or 1 when `fold_tp`)
  per schedule action (`simulator.parallel.schedule_registry.make_schedule`, the real action lists):
    F(j, c)   model stage s = stage_map[k][c] (the schedule's placement; the loop one: c p + k):
              Recv the activation from stage s-1 unless this device runs it too (Megatron's scatter /
              gather: each TP rank receives b s h / t, then an all-gather over the TP group unless
              SP keeps activations sequence-sharded); first stage: the embedding's TP collective;
              per layer: attention (Compute; with cp > 1 cut at the ring's transfers or Ulysses'
              all-to-alls, `scale_cp`), TP all-reduce, MLP (Compute), TP all-reduce (with SP
              all-gather before, reduce-scatter after each, Korthikanti et al. 2022); last stage:
              logits + the loss's three all-reduces (`tp_ends`); Send to stage s+1.
    BW / B    Recv the gradient from stage s+1 (last stage: the logits backward and the output
              layer's TP collectives); per layer in reverse: [full recompute: the layer's forward],
              MLP backward, TP all-reduce, attention backward, TP all-reduce (SP: two all-gathers
              before each, the input gathered again, and a reduce-scatter after); first stage: the
              embedding's (SP); Send to stage s-1. W: the weight gradients (zero-bubble schedules).
  gradients: the last micro-batch's backward of each layer completes its gradient; layers are
    grouped into buckets of >= `bucket_nbytes`, each reduced by a non-blocking collective over the
    data-parallel group as soon as it is complete, overlapping the rest of the backward (PyTorch
    DDP buckets; Megatron's overlap_grad_reduce). ZeRO 0: all-reduce of fp32 gradients; 1-2:
    reduce-scatter, then all-gather of the parameters (the recipe's bytes) after the optimizer; 2-3
    (DeepSpeed): the buckets at every micro-batch, the open one flushed when its backward ends; 3:
    each layer's, the embedding's and the output layer's parameters gathered before its forward
    and again before its backward (`scale_gather`).
  FSDP (`fsdp` fsdp2 / megatron_fsdp, `simulator.cost.fsdp`): each layer, the embedding and the
    output layer are units, gathered as `fsdp.gather_flags` says (one unit ahead with prefetch) and
    reduce-scattered one by one after their backward (`grad_buckets`).
  the input embedding's gradient (and a tied output copy) joins the last bucket (not FSDP); tied
    embeddings (p > 1): after that reduction, the all-reduce of the embedding gradient between the
    first and last stage (Megatron-LM finalize_model_grads: finish_grad_sync, then _allreduce_embedding_grads).
  parameters per tensor rank (gradients, gathers, optimizer): `rank_params`, shared with the closed form.
  optimizer: Adam, memory-bound, 30 bytes per (sharded) parameter (`analytic.ADAM_BYTES_PER_PARAM`).

The data-parallel collectives are one-member collectives tagged "dp" that the device model prices
for the real group (`scale_device.ScaleDeviceModel`): replicas are symmetric, so one is simulated.

The runnable programs (`simulator.parallel`) compile the same step a second time; the two are
compared device by device over every strategy in tests/test_one_compiler.py, and where they still
differ is listed in docs/ARCHITECTURE.md ("The training step, compiled twice").
"""

from __future__ import annotations

from simulator.cost.fsdp import gather_flags, is_fsdp, overlaps, reduce_every_microbatch
from simulator.cost.grad_buckets import GradBuckets
from simulator.cost.layer_kinds import check_mixed
from simulator.cost.model_presets import ModelSpec
from simulator.cost.moe import check_moe, moe_collectives
from simulator.cost.moe_overlap import interleave, overlap_pairs
from simulator.cost.mtp import check_mtp
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import head_params_on_rank, layer_params_on_rank, output_layer_own_unit
from simulator.cost.scale_columns import program_columns
from simulator.cost.scale_cp import attention_backward, attention_forward
from simulator.cost.scale_ends import StepEnds
from simulator.cost.scale_gather import gather_layer, gathered
from simulator.cost.scale_kernels import (
    Kernel,
    LayerKernels,
    activation_nbytes,
    cp_exchange_nbytes,
    layer_kernels,
    padded_vocab,
)
from simulator.cost.scale_mlp import LayerMLP
from simulator.cost.scale_mtp import MtpEmission
from simulator.cost.tp_ends import end_collectives
from simulator.cost.zero3_fetch import zero3_pass
from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import make_schedule
from simulator.program import Collective, Compute, Program, Recv, Send, no_gc
from simulator.program_columns import ColumnarProgram
from simulator.vocabulary import DEFAULT_BUCKET_MB

DEFAULT_BUCKET_NBYTES = DEFAULT_BUCKET_MB * 1e6   # the real run's default too (`simulator.vocabulary`)


def check_scale_config(model: ModelSpec, cfg: ParallelConfig) -> None:
    if model.heads % cfg.tp:
        raise ParasimError(f"tp={cfg.tp} must divide the {model.heads} attention heads")
    check_moe(model, cfg)
    cfg.chunk_layers(model.layers)      # refuses splits that do not exist


def check_placement(cfg: ParallelConfig, sched) -> None:
    """The schedule's stage placement the scale program compiles: one model copy (not DualPipe's
    two), and uneven first / last stages (per device) on the loop placement only."""
    if sched.bidirectional:
        raise ParasimError(f"schedule {sched.name!r} runs two model copies in opposite directions; the scale "
                           f"program compiles one (run it for real: parasim train --schedule {sched.name})")
    uneven = cfg.first_stage_layers is not None or cfg.last_stage_layers is not None
    if uneven and sched.placement != "loop":
        raise ParasimError(f"first_stage_layers / last_stage_layers split the layers per device; schedule "
                           f"{sched.name!r} places its stages {sched.placement}-shaped: use an even split")


class _Emitter(StepEnds, LayerMLP, MtpEmission):
    """Emits one pipeline device's instructions for one TP index (all TP indices emit alike)."""

    def __init__(self, model, cfg, A, kernels: LayerKernels, fold_tp, bucket_nbytes, overlap, logits, optimizer,
                 sched):
        self.model, self.cfg, self.A, self.K = model, cfg, A, kernels
        self.w = 1 if fold_tp else cfg.tp
        self.fold_tp, self.bucket_nbytes, self.overlap = fold_tp, bucket_nbytes, overlap
        self.logits, self.optimizer = logits, optimizer
        # the schedule's stage placement: device k runs model stages stage_of[k] (chunk c: stage_of[k][c];
        # the loop placement c p + k, V-shaped schedules k and 2p - 1 - k), model stage s runs on dev[s]
        self.stage_of, self.dev = sched.stage_map, sched.stage_devices
        self.S, self.chunks = len(self.dev), cfg.chunk_layers(model.layers)
        # FSDP (`simulator.cost.fsdp`): one unit per layer; DeepSpeed ZeRO-2/3 reduce at every micro-batch
        self.fsdp = is_fsdp(cfg) and cfg.dp * cfg.cp > 1
        self.per_mb_grads = reduce_every_microbatch(cfg)
        self.prefetch, self.rs_overlap = overlaps(cfg, A) if self.fsdp else (A.overlap_param_gather, overlap)
        if self.fsdp:
            self.overlap = self.rs_overlap
        self.act = activation_nbytes(model, cfg, A.dtype)
        self.p2p = self.act // cfg.tp
        self.ends = end_collectives(model, cfg, A.dtype)      # the TP collectives outside the blocks (`tp_ends`)
        dense, self.expert_local = layer_params_on_rank(model, cfg.tp, cfg.ep, cfg.expert_tp)   # this rank's share
        self.layer_local = dense + self.expert_local
        self.layer_grad = A.grad_reduce_bytes * self.layer_local
        # the experts' share of it is averaged over the expert-data-parallel group (tag "edp",
        # `ParallelConfig.edp_group`), as the closed form does
        self.expert_dp = cfg.gpus // cfg.pp // (cfg.ep * cfg.expert_tp)
        # ZeRO-3 with full recomputation: elements of a layer gathered a third time (`zero3_fetch`)
        self.regather = 0 if self.fsdp else zero3_pass(model, cfg.tp, cfg.ep, 1, 0, cfg.recompute,
                                                       A.stage3_max_reuse_distance)[1]
        self.kv_local, self.qkv_a2a, self.out_a2a = cp_exchange_nbytes(model, cfg, A.dtype)
        self.moe_dispatch, self.moe_combine = moe_collectives(model, cfg, A)    # `cost.moe`
        # MoE collectives non-blocking (`moe_overlap`): inside a merged pair, or beside the shared experts
        self.moe_async = self.shared_async = A.shared_expert_overlap
        self._needs: tuple = ()       # outputs of overlapped CP collectives the next compute waits for
        self.emb_params = padded_vocab(model, cfg.tp) * model.hidden / cfg.tp     # the vocabulary matrix
        self.head_params = head_params_on_rank(model, cfg.tp)       # + the final norm
        # an untied output layer's gradient is complete after the last micro-batch's logits backward:
        # it joins the first bucket (Megatron's DDP buckets), not the step's tail
        self.head_bucketed = logits and not model.tied_embeddings and not self.fsdp
        # DeepSpeed's per-micro-batch reductions (ZeRO-2/3, not FSDP): each micro-batch's backward
        # ends its buckets, the ends' gradients (`ends_left`) in its last one
        self.mb_buckets = self.per_mb_grads and not self.fsdp
        # ZeRO-3 (FSDP or DeepSpeed): the embedding and the output layer are gathered as units of their
        # own, the output layer on the last device (not the tied p = 1 embedding)
        self.ends_gathered = cfg.zero_stage == 3 and cfg.dp * cfg.cp > 1
        self.head_unit = self.ends_gathered and logits and output_layer_own_unit(model, cfg.pp)
        self._priced: dict = {}      # kernel -> (flops, nbytes, attrs), shared by its instructions
        self.copy_kernels: dict = {}  # FSDP2 copy-out Kernel by size (`scale_gather.copied_out`)
        self.layer_kinds()
        self.mtp_setup()

    # ---- helpers ------------------------------------------------------------------------------
    def comp(self, out, kern: Kernel, x: str, phase: str, j, label: str, extra=(), needs=()):
        got = self._priced.get(kern)
        if got is None:
            got = self._priced[kern] = (kern.flops, int(kern.nbytes()), {"kernel": kern})
        needs, self._needs = needs + self._needs, ()
        out.append(Compute(kern.name, (x,) + needs, (x,) + extra, got[0], got[1], got[2], phase, j, label))

    def group_comm(self, out, r, x, j, tag, kind, nbytes, blocking=True):
        """A collective over this rank's real context- ("cp") or expert-parallel ("ep") group,
        written as a one-member collective the device model prices for that group. Non-blocking
        ones overlap what follows; the next compute waits."""
        if nbytes <= 0:
            return
        y = f"{tag}{kind[0]}{len(out)}.{x}"
        out.append(Collective(kind, x, y, (r,), nbytes=nbytes, tag=tag, microbatch=j, blocking=blocking))
        if not blocking:
            self._needs += (y,)

    def grad_name(self, c, l, j) -> str:
        return f"grad{c}.{l}.{j}" if self.per_mb_grads else f"grad{c}.{l}"

    def tp_comm(self, out, r, x, j, kinds, dst=None):
        self.tp_sized(out, r, x, j, tuple((k, self.act // self.cfg.tp if k == "all_gather" else self.act)
                                          for k in kinds), dst)

    def tp_sized(self, out, r, x, j, items, dst=None):
        if self.cfg.tp == 1:     # collectives (kind, program bytes) over the tensor group (`tp_ends`' form)
            return
        group, tag = (((r,), "tp") if self.fold_tp else (self._tp_group(r), ""))
        for kind, nbytes in items:
            out.append(Collective(kind, x, dst or x, group, nbytes=nbytes, tag=tag, microbatch=j))

    def recv(self, out, r, x, src, tag, j):
        """Receive a stage boundary tensor into x: the 1/t slice, then (no SP) the TP all-gather."""
        if self.cfg.tp == 1 or self.cfg.sequence_parallel:
            out.append(Recv(x, src, tag, self.p2p, j))
        else:
            out.append(Recv("r" + x, src, tag, self.p2p, j))
            self.tp_comm(out, r, "r" + x, j, ("all_gather",), dst=x)

    def _tp_group(self, r):
        base = (r // self.w) * self.w
        return tuple(range(base, base + self.w))

    def tp_in(self, backward=False):
        """Before a layer half's kernel, SP's all-gather of its input (backward: of the output gradient,
        then of the input again for the weight gradients, as Megatron-LM's and Transformer Engine's
        linears do, Korthikanti et al. 2022 Sec. 4.2.2); after it `tp_out`."""
        return (("all_gather",) * (1 + backward)) if self.cfg.sequence_parallel else ()

    def tp_out(self):
        return ("reduce_scatter",) if self.cfg.sequence_parallel else ("all_reduce",)

    def layer_fwd(self, out, r, x, j, s, l, label="F", needs=()):
        K = self.kernels(s, l)
        self.tp_comm(out, r, x, j, self.tp_in())
        if K.cp_parts:      # context parallelism: the attention cut at its exchanges (`scale_cp`)
            attention_forward(self, out, r, x, j, f"{label}{j} s{s} L{l}", needs)
        else:
            self.comp(out, K.attn_fwd, x, "forward", j, f"{label}{j} s{s} L{l} attn_fwd", needs=needs)
        self.tp_comm(out, r, x, j, self.tp_out())
        self.tp_comm(out, r, x, j, self.tp_in())
        self.mlp(out, r, x, j, s, l, K.mlp_fwd, "forward", f"{label}{j} s{s} L{l} mlp_fwd", needs=needs)
        self.tp_comm(out, r, x, j, self.tp_out())

    # ---- actions ------------------------------------------------------------------------------
    def forward(self, out, k, r, j, c, gather=True):
        s, w = self.stage_of[k][c], self.w
        x = f"a{s}.{j}"
        if s > 0 and self.dev[s - 1] != k:
            self.recv(out, r, x, self.dev[s - 1] * w + r % w, f"f{s}.{j}", j)
        units: list = list(range(self.chunks[s]))
        if self.ends_gathered:      # ZeRO-3 gathers the embedding and output layer too
            units = ["emb"] * (s == 0) + units + ["head"] * (s == self.S - 1 and self.head_unit)
        carry = head = ()
        emb = s == 0        # the vocabulary-parallel embedding's collectives come before the first layer
        for l, needs in gathered(self, out, r, c, j, "f", units, x if self.fsdp else "params", gather):
            if l == "emb":
                carry = needs
            elif l == "head":
                head = needs
            else:
                if emb:
                    self.tp_sized(out, r, x, j, self.ends.emb_fwd)
                    emb = False
                if j == 0 and c == len(self.stage_of[k]) - 1 and l == self.chunks[s] - 1:
                    carry += self.prefetched_params()
                self.layer_fwd(out, r, x, j, s, l, needs=needs + carry)
                carry = ()
        if emb:
            self.tp_sized(out, r, x, j, self.ends.emb_fwd)
        if s == self.S - 1:
            if self.mtp:         # multi-token prediction's modules before the output layer (`scale_mtp`)
                self.mtp_forward(out, r, x, j, s)
            if self.logits:
                self.tp_sized(out, r, x, j, self.ends.head_fwd)
                self.comp(out, self.K.logits_fwd, x, "forward", j, f"F{j} logits", needs=head)
                self.tp_sized(out, r, x, j, self.ends.loss)
        elif self.dev[s + 1] != k:
            out.append(Send(x, self.dev[s + 1] * w + r % w, f"f{s + 1}.{j}", self.p2p, j))

    def backward(self, out, k, r, j, c, kind, grads_done, last, gather=True):
        """kind BW (input and weight gradients) or B (input gradients only); `last`: the
        micro-batch that completes the gradients (`is_last`); `gather`: FSDP gathers the units."""
        s, w = self.stage_of[k][c], self.w
        g = f"g{s}.{j}"
        last_mb = kind == "BW" and last
        if s < self.S - 1:
            if self.dev[s + 1] != k:
                self.recv(out, r, g, self.dev[s + 1] * w + r % w, f"b{s}.{j}", j)
        elif self.logits:
            self.logits_backward(out, r, c, s, j, kind, last_mb, grads_done)
        if s == self.S - 1 and self.mtp:     # multi-token prediction's modules (`scale_mtp`)
            self.mtp_backward(out, r, c, s, j, kind, last_mb, grads_done)
        x = g if self.fsdp else "params"
        for l, needs in gathered(self, out, r, c, j, "b", reversed(range(self.chunks[s])), x, gather):
            self.layer_bwd(out, r, c, g, j, s, l, kind, self.grad_name(c, l, j) if last_mb else None, needs)
            if last_mb and not (self.fsdp and not self.per_mb_grads):
                grads_done(out, r, c, l, j)
        if last_mb and self.fsdp and not self.per_mb_grads:   # pipelined FSDP2: after the stage's last backward
            for l in reversed(range(self.chunks[s])):
                grads_done(out, r, c, l, j)
        if s == 0:          # the embedding's backward (SP: the all-gather of its gradient)
            if self.ends_gathered and not self.fsdp:        # DeepSpeed ZeRO-3 gathers it again for it
                gather_layer(self, out, r, c, "emb", j, "b")
            self.tp_sized(out, r, g, j, self.ends.emb_bwd)
        if s > 0 and self.dev[s - 1] != k:
            out.append(Send(g, self.dev[s - 1] * w + r % w, f"b{s - 1}.{j}", self.p2p, j))

    def layer_bwd(self, out, r, c, g, j, s, l, kind, grad, needs=()) -> None:
        """Layer l of stage s's backward of kind BW or B; `grad`: the gradient its last kernel
        completes (None: none)."""
        if self.cfg.recompute == "full":
            self.layer_fwd(out, r, g, j, s, l, label="R", needs=needs)
            # the sub-modules DeepSpeed released after the recomputed forward (`zero3_fetch`)
            needs = needs + gather_layer(self, out, r, c, l, j, "3", self.regather)
        K = self.kernels(s, l)
        for kb in (K.mlp_b, K.attn_b):
            kern = self.bw[kb] if kind == "BW" else kb
            done = (grad,) if grad and kb is K.attn_b else ()
            self.tp_comm(out, r, g, j, self.tp_in(backward=True))
            if kb is K.mlp_b:
                self.mlp(out, r, g, j, s, l, kern, "backward", f"{kind}{j} s{s} L{l} {kb.name}", done, needs)
            elif K.cp_parts:
                attention_backward(self, out, r, g, j, f"{kind}{j} s{s} L{l}", kind == "BW", done, needs)
            else:
                self.comp(out, kern, g, "backward", j, f"{kind}{j} s{s} L{l} {kb.name}", done, needs)
            self.tp_comm(out, r, g, j, self.tp_out())

    def logits_backward(self, out, r, c, s, j, kind, last_mb, grads_done) -> None:
        """The last stage's logits backward (DeepSpeed ZeRO-3 gathers the output layer again for it;
        FSDP keeps its ends) and, with the last micro-batch, the untied output layer's gradient."""
        g = f"g{s}.{j}"
        kern = self.K.logits_b + self.K.logits_w if kind == "BW" else self.K.logits_b
        head = last_mb and self.head_bucketed
        held = gather_layer(self, out, r, c, "head", j, "b") if self.head_unit and not self.fsdp else ()
        self.tp_sized(out, r, f"a{s}.{j}", j, self.ends.head_bwd_in)
        out.append(Compute(kern.name, (f"a{s}.{j}",) + held, (g,) + (("grad_head",) if head else ()), kern.flops,
                           int(kern.nbytes()), {"kernel": kern}, "backward", j, f"B{j} logits"))
        self.tp_sized(out, r, g, j, self.ends.head_bwd_out)
        if head:
            grads_done(out, r, None, None, j, "grad_head", self.A.grad_reduce_bytes * self.head_params)

    def wgrad(self, out, r, j, c, grads_done, last):
        s = self.stage_of[r // self.w][c]
        last_mb = last
        if s == self.S - 1 and self.logits:
            head = last_mb and self.head_bucketed
            self.comp(out, self.K.logits_w, f"g{s}.{j}", "wgrad", j, f"W{j} logits", ("grad_head",) if head else ())
            if head:
                grads_done(out, r, None, None, j, "grad_head", self.A.grad_reduce_bytes * self.head_params)
            if self.mtp:
                self.mtp_wgrad(out, r, s, j, last_mb, grads_done)
        for l in reversed(range(self.chunks[s])):
            K = self.kernels(s, l)
            for kern in (K.mlp_w, K.attn_w):
                done = (self.grad_name(c, l, j),) if last_mb and kern is K.attn_w else ()
                self.comp(out, kern, f"g{s}.{j}", "wgrad", j, f"W{j} s{s} L{l} {kern.name}", done)
            if last_mb:
                grads_done(out, r, c, l, j)

    # ---- one device ---------------------------------------------------------------------------
    def is_last(self, j: int) -> bool:
        """Does micro-batch j's backward complete the gradients (the last one; every one when
        DeepSpeed reduces per micro-batch)?"""
        return j == self.cfg.microbatches - 1 or self.per_mb_grads

    def gathers(self, actions) -> list[bool]:
        """Per schedule action: does it gather its chunk's parameters (`fsdp.gather_flags`)?"""
        if not self.fsdp:
            return [True] * len(actions)
        return gather_flags(self.cfg, [(a.kind, a.chunk) for a in actions])

    def device(self, k: int, r: int, actions) -> list:
        out, buckets = [], GradBuckets(self, r)
        self.prologue(out, r)
        gathers = self.gathers(actions)
        groups = overlap_pairs(actions) if self.A.overlap_moe_comm else [(i,) for i in range(len(actions))]
        for group in groups:
            parts = []
            self.moe_async = len(group) == 2 or self.shared_async      # a merged pair (`moe_overlap`)
            for i in sorted(group):                 # emitted in schedule order (bucket and gather state)
                a, part = actions[i], []
                self.action(part, k, r, a.kind, a.microbatch, a.chunk, self.is_last(a.microbatch), buckets,
                            gathers[i])
                parts.append((i, part))
            self.moe_async = self.shared_async
            got = dict(parts)
            out += interleave(got[group[0]], got[group[1]]) if len(group) == 2 else got[group[0]]
        self.epilogue(out, k, r, buckets)
        return out

    def action(self, out, k, r, kind, j, c, last, buckets, gather=True) -> None:
        """One schedule action (F, BW, B or W) of micro-batch j, chunk c."""
        if kind == "F":
            self.forward(out, k, r, j, c, gather)
        elif kind in ("BW", "B"):
            self.backward(out, k, r, j, c, kind, buckets.done, last, gather)
            if kind == "BW" and last and self.mb_buckets:
                self.microbatch_buckets(out, k, r, j, c, buckets)
        else:
            self.wgrad(out, r, j, c, buckets.done, last)

def build_scale_program(model: ModelSpec, cfg: ParallelConfig, assumptions: Assumptions | None = None, *,
                        fold_tp: bool = False, bucket_nbytes: float = DEFAULT_BUCKET_NBYTES,
                        overlap_grad_reduce: bool | None = None, logits: bool = True, optimizer: bool = True) -> Program:
    """One data-parallel replica's Program (module docstring); `fold_tp` keeps one rank per stage;
    `overlap_grad_reduce` None: the assumptions' (`simulator.vocabulary`)."""
    check_scale_config(model, cfg)
    assumptions = (assumptions or Assumptions()).resolved(model)
    if overlap_grad_reduce is None:
        overlap_grad_reduce = assumptions.overlap_grad_reduce
    if not bucket_nbytes > 0:
        raise ParasimError(f"bucket_nbytes must be > 0, got {bucket_nbytes}")
    sched = make_schedule(cfg.schedule, cfg.pp, cfg.microbatches, cfg.virtual_stages)
    check_placement(cfg, sched)
    check_mixed(model, cfg, assumptions)
    check_mtp(model, cfg, assumptions)
    em = _Emitter(model, cfg, assumptions, layer_kernels(model, cfg, assumptions), fold_tp, bucket_nbytes,
                  overlap_grad_reduce, logits, optimizer, sched)
    n = cfg.pp * em.w

    def code():
        with no_gc():       # a million small objects, no cycles (program.no_gc)
            return [em.device(k, k * em.w + i, sched.actions[k]) for k in range(cfg.pp) for i in range(em.w)]
    with no_gc():
        cols = program_columns(em, sched, n)
    return ColumnarProgram(cols, code, f"{model.name} {cfg!r} (one replica of {cfg.dp})")
