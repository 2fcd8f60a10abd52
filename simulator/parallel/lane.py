"""The layer emitter of one sharded lane: tensor rank `t` of `tp` (Megatron-LM, Shoeybi et al. 2019),
with sequence parallelism (`sp`, Korthikanti et al. 2022), on context rank `c` of `cp` (ring or
all-to-all attention, cp_attention.py) (issue 24, item 4).

One class for every degree: what a layer becomes on the lane is read from the degrees, not from
a tower of subclasses.

- A layer is its steps through `block_lane.lane_items` (the transforms in their fixed order:
  TP/SP, then CP) and block_lane's one emitter. The MoE block adds EP on top
  (expert_parallel.ExpertLane), ZeRO-2/3 wraps the lane (zero.ZeroStage23), the pipeline drives it
  (emit.Stages).
- Every layer is described by steps: the embedding (block_plan.embedding), the transformer block
  (block_plan.dense_block), the LM head (block_plan.lm_head). Under TP the embedding is
  vocabulary-parallel (rank t's rows [t V/tp, (t+1) V/tp), a masked lookup, then an AllReduce),
  the learned positions added after it; under SP the whole sequence is then cut to this rank's
  slice (Megatron-Core's LanguageModelEmbedding with learned positions: scatter to the
  sequence-parallel region, its backward an AllGather); under CP the positions are this rank's chunks.
- The loss: Megatron's vocab_parallel_cross_entropy when tp > 1 (AllReduce(max) of the local
  maxima, then AllReduce(sum) of the local sum of exp and of the target logit); the plain
  cross entropy on this rank's tokens when tp = 1.
- Zero-bubble schedules split every backward (bw_split.py): B keeps the input-gradient chain with
  its collectives, W the weight gradients; the embedding (no input gradient) keeps its inputs in B.

Every tensor-group collective moves this rank's T/cp tokens; its activations shrink by cp (and by
tp under SP). Names follow emit.py: act/cache/{layer}/mb{j}/... kept for backward, act/tp/{layer}/
mb{j}/... temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..program import Collective
from . import cp_kernels, tp_kernels  # noqa: F401 -- register the cp_* / tp_* / vp_ce_* kernels emitted here
from .block_lane import emit_backward, emit_forward, lane_items, sp_partial_grads
from .bw_split import SplitBackward
from .cp_attention import ContextAttention
from .emit import Replica, grad
from .layer_kernels import layer_of


@dataclass
class ShardedLane(ContextAttention, SplitBackward, Replica):
    """The lane of (tensor rank t, context rank c): the same schedule as every other lane of its
    tensor and context groups, so their collectives meet in the same order. `cp_attention`: the
    blocks' attention runs over the context group (any lane of a context-parallel run, cp = 1
    included: the blockwise kernels on a ring of one)."""

    tp: int = 1
    t: int = 0
    sp: bool = False
    tp_group_of: dict = field(default_factory=dict)  # rank -> its tensor group
    cp_attention: bool = False
    _sp_partial: dict = field(default_factory=dict)  # rank -> [(grad tensor, shape)] summed by finish_step

    # ---- collectives over the tensor group ------------------------------------------------------
    def _coll(self, r, kind, src, out, j, tag, nbytes, op="sum"):
        self.builder.add(r, Collective(kind, src, out, self.tp_group_of[r], op=op, axis=1, nbytes=nbytes,
                                       tag=tag, microbatch=j))

    def _full_nbytes(self, width: int) -> int:
        """(mb, s/cp, width) float64: this rank's tokens, whole over the tensor group."""
        return 8 * self.microbatch_size * self.config.seq_len * width // self.cp

    def _reduce(self, r, part, out, j, tag, width=None):
        """Row-parallel output: AllReduce (g), or ReduceScatter along the sequence under SP."""
        nb = self._full_nbytes(width or self.config.hidden)
        self._coll(r, "reduce_scatter" if self.sp else "all_reduce", part, out, j, tag, nb)
        self.builder.free(r, part)

    def _gather(self, r, x, out, j, tag) -> str:
        """Column-parallel input: identity, or AllGather along the sequence under SP."""
        if not self.sp:
            return x
        self._coll(r, "all_gather", x, out, j, tag, self._full_nbytes(self.config.hidden) // self.tp)
        return out

    def _drop(self, r, *names):
        self.builder.free(r, *dict.fromkeys(names))

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // (self.tp if self.sp else 1) // self.cp

    def boundary_group(self, r: int) -> tuple:
        """The tensor group splits a stage-boundary tensor (`emit.Stages`), unless SP already has."""
        return self.tp_group_of[r] if self.tp > 1 and not self.sp else ()

    def block_items(self, steps: tuple) -> tuple:
        """A layer's steps as this lane runs them (block_lane.lane_items: TP/SP, then CP)."""
        return lane_items(steps, self.tp, self.sp, self.cp_attention, t=self.t,
                          positions=tuple(self.positions[self.c]) if self.cp_attention else ())

    # ---- layers: every one is its steps (block_plan) through the transforms -------------------------
    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        emit_forward(self, r, li, lyr, self.block_items(lyr.steps), {"x": x}, {"y": y}, j)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        lyr = layer_of(self.config, li)
        emit_backward(self, r, li, lyr, self.block_items(lyr.steps), {"y": dy}, {"x": dx} if dx else {}, j,
                      accumulate)

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        self.split_backward_input(r, li, dy, dx, j)

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        self.split_backward_weight(r, li, j, accumulate)

    # ---- the loss -----------------------------------------------------------------------------------
    def emit_loss_forward(self, r, x, j):
        """Vocabulary-parallel cross-entropy (tp > 1): three AllReduces of (mb, s/cp) statistics."""
        if self.tp == 1:
            return super().emit_loss_forward(r, x, j)
        b, T, yv = self.builder, f"act/tp/loss/mb{j}", f"data/y/mb{j}"
        kw = dict(phase="forward", microbatch=j)
        start = self.t * self.config.vocab // self.tp
        nb = self._full_nbytes(1)
        b.compute(r, "vp_ce_max", [x], [f"{T}/max"], label=f"F{j} loss max", **kw)
        self._coll(r, "all_reduce", f"{T}/max", f"{T}/max", j, f"loss/max/mb{j}", nb, op="max")
        b.compute(r, "vp_ce_stats", [x, f"{T}/max", yv], [f"{T}/sumexp", f"{T}/zt"], attrs={"start": start},
                  label=f"F{j} loss sum-exp", **kw)
        # Megatron-LM's order (tensor_parallel/cross_entropy.py): the target logit, then the sum of exp
        self._coll(r, "all_reduce", f"{T}/zt", f"{T}/zt", j, f"loss/target/mb{j}", nb)
        self._coll(r, "all_reduce", f"{T}/sumexp", f"{T}/sumexp", j, f"loss/sumexp/mb{j}", nb)
        b.compute(r, "vp_ce_loss", [x, f"{T}/max", f"{T}/sumexp", f"{T}/zt", yv],
                  [f"out/loss/mb{j}", f"act/cache/loss/mb{j}"], attrs={"start": start}, label=f"F{j} loss", **kw)
        self._drop(r, f"{T}/max", f"{T}/sumexp", f"{T}/zt")

    def emit_loss_backward(self, r, dy, j):
        if self.tp == 1:
            return super().emit_loss_backward(r, dy, j)
        self.builder.compute(r, "vp_ce_bwd", [f"act/cache/loss/mb{j}"], [dy], attrs={"scale": self.scale},
                             phase="backward", microbatch=j, label=f"B{j} loss")
        self._drop(r, f"act/cache/loss/mb{j}")

    def grads_complete(self, r: int, li: int) -> None:
        """Under SP, note layer li's partial layer-norm and bias gradients (`finish_step` sums them)."""
        lyr = layer_of(self.config, li)
        if self.sp and hasattr(lyr, "steps"):  # the blocks' and the head's norms and reduced biases
            shapes = lyr.param_shapes()
            self._sp_partial.setdefault(r, []).extend(
                (grad(li, n), shapes[n]) for n in sp_partial_grads(self.block_items(lyr.steps)))

    def finish_step(self, r: int) -> None:
        """Under SP, after the data-parallel synchronisation: the partial gradients of every norm and
        reduced bias on rank r, flattened into ONE all-reduce over the tensor group (Megatron-LM's
        finalize_model_grads -> _allreduce_non_tensor_model_parallel_grads; `cost/tp_ends.py`)."""
        entries = sorted(self._sp_partial.pop(r, []), key=lambda e: int(e[0].split("/")[1]))
        if not entries:
            return
        b, flat = self.builder, "grad/sp_partial"
        b.compute(r, "flatten", [t for t, _ in entries], [flat], phase="other", label="pack sp partial grads")
        b.free(r, *[t for t, _ in entries])
        self._coll(r, "all_reduce", flat, flat, None, "sp/partial", 8 * sum(int(np.prod(s)) for _, s in entries))
        b.compute(r, "unflatten", [flat], [t for t, _ in entries], attrs={"shapes": tuple(s for _, s in entries)},
                  phase="other", label="unpack sp partial grads")
        b.free(r, flat)
