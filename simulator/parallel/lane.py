"""The layer emitter of one sharded lane: tensor rank `t` of `tp` (Megatron-LM, Shoeybi et al. 2019),
with sequence parallelism (`sp`, Korthikanti et al. 2022), on context rank `c` of `cp` (ring or
all-to-all attention, cp_attention.py) (issue 24, item 4).

One class for every degree: what a layer becomes on the lane is read from the degrees, not from
a tower of subclasses.

- A layer described by steps (the transformer block, models/block_plan.dense_block; the LM head,
  block_plan.lm_head) is its steps through `block_lane.lane_items` (the transforms in their fixed
  order: TP/SP, then CP) and block_lane's one emitter. The MoE block adds EP on top
  (expert_parallel.ExpertLane), ZeRO-2/3 wraps the lane (zero.ZeroStage23), the pipeline drives it
  (emit.Stages).
- The embedding: vocabulary-parallel when tp > 1 (rank t holds rows [t V/tp, (t+1) V/tp); a masked
  lookup, then the row-parallel reduction: AllReduce, or ReduceScatter under SP), the positions of
  this rank's tokens added after it (its sequence slice under SP, its chunks under CP); one kernel
  on this rank's tokens when tp = 1.
- The loss: Megatron's vocab_parallel_cross_entropy when tp > 1 (AllReduce(max) of the local
  maxima, then AllReduce(sum) of the local sum of exp and of the target logit); the plain
  cross entropy on this rank's tokens when tp = 1.
- Zero-bubble schedules split every backward (bw_split.py): B keeps the input-gradient chain with
  its collectives, W the weight gradients; the tp = 1 embedding keeps its dy in B.

Every tensor-group collective moves this rank's T/cp tokens; its activations shrink by cp (and by
tp under SP). Names follow emit.py: act/cache/{layer}/mb{j}/... kept for backward, act/tp/{layer}/
mb{j}/... temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..models import Embedding
from ..program import Collective
from . import cp_kernels, tp_kernels  # noqa: F401 -- register the cp_* / tp_* / vp_ce_* kernels emitted here
from .block_lane import emit_backward, emit_forward, lane_items, sp_partial_grads
from .bw_split import SplitBackward
from .cp_attention import ContextAttention
from .emit import Replica, grad, param
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
        return lane_items(steps, self.tp, self.sp, self.cp_attention)

    # ---- layers -----------------------------------------------------------------------------------
    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, Embedding):  # a transformer block or the LM head (logits of V/tp words)
            return emit_forward(self, r, li, lyr, self.block_items(lyr.steps), {"x": x}, {"y": y}, j)
        b, (c, T) = self.builder, self._names(li, j)
        kw = {"phase": "forward", "microbatch": j}
        if self.tp == 1:
            return b.compute(r, "cp_embed_fwd", [x, param(li, "wte"), param(li, "wpe")], [y, c],
                             attrs={"positions": self.positions[self.c]}, label=f"F{j} {lyr.name}", **kw)
        rows = lyr.vocab // self.tp
        b.compute(r, "tp_embed_fwd", [x, param(li, "wte")], [f"{T}/e_part", f"{c}/tokens"],
                  attrs={"start": self.t * rows}, label=f"F{j} {lyr.name} lookup", **kw)
        self._reduce(r, f"{T}/e_part", f"{T}/e", j, f"{li}/e/mb{j}")
        if self.cp_attention:
            b.compute(r, "cp_embed_pos", [f"{T}/e", param(li, "wpe")], [y], attrs={"positions": self.positions[self.c]},
                      label=f"F{j} {lyr.name} +pos", **kw)
        else:
            offset = self.t * lyr.seq_len // self.tp if self.sp else 0
            b.compute(r, "tp_embed_pos", [f"{T}/e", param(li, "wpe")], [y], attrs={"offset": offset},
                      label=f"F{j} {lyr.name} +pos", **kw)
        self._drop(r, f"{T}/e")

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, Embedding):
            return emit_backward(self, r, li, lyr, self.block_items(lyr.steps), {"y": dy}, {"x": dx}, j, accumulate)
        b, (c, T) = self.builder, self._names(li, j)
        G = [grad(li, n) for n in ("wte", "wpe")]
        if self.tp == 1:
            b.compute(r, "cp_embed_bwd", [c, dy, *(G if accumulate else [])], G,
                      attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                      label=f"B{j} {lyr.name}", phase="backward", microbatch=j)
            return b.free(r, c)
        rows = lyr.vocab // self.tp
        attrs = {"start": self.t * rows, "rows": rows, "seq": lyr.seq_len}
        if self.cp_attention:
            self.grad_op(r, li, j, "cp_tp_embed_bwd", [f"{c}/tokens", dy], [], ("wte", "wpe"), accumulate,
                         attrs={**attrs, "positions": self.positions[self.c]}, label=lyr.name)
            return self._drop(r, f"{c}/tokens")
        dyf = self._gather(r, dy, f"{T}/dy", j, f"{li}/dy/mb{j}")
        self.grad_op(r, li, j, "tp_embed_bwd", [f"{c}/tokens", dyf], [], ("wte", "wpe"), accumulate, attrs=attrs,
                     label=lyr.name)
        self._drop(r, f"{c}/tokens", *([dyf] if self.sp else []))

    # ---- zero-bubble schedules: B (input gradients and their collectives) now, W (weights) later ----
    def emit_layer_backward_input(self, r, li, dy, dx, j):
        lyr = layer_of(self.config, li)
        if not (isinstance(lyr, Embedding) and self.tp == 1):
            return self.split_backward_input(r, li, dy, dx, j)
        # the whole embedding has no input gradient: keep dy for W
        self.builder.compute(r, "copy", [dy], [f"act/wcache/{li}/mb{j}"], label=f"B{j} {lyr.name} keep dy",
                             phase="backward", microbatch=j)

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        lyr = layer_of(self.config, li)
        if not (isinstance(lyr, Embedding) and self.tp == 1):
            return self.split_backward_weight(r, li, j, accumulate)
        c, w = f"act/cache/{li}/mb{j}", f"act/wcache/{li}/mb{j}"
        G = [grad(li, n) for n in ("wte", "wpe")]
        self.builder.compute(r, "cp_embed_bwd", [c, w, *(G if accumulate else [])], G,
                             attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                             label=f"W{j} {lyr.name}", phase="wgrad", microbatch=j)
        self.builder.free(r, c, w)

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
        self._coll(r, "all_reduce", f"{T}/sumexp", f"{T}/sumexp", j, f"loss/sumexp/mb{j}", nb)
        self._coll(r, "all_reduce", f"{T}/zt", f"{T}/zt", j, f"loss/target/mb{j}", nb)
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
        """Under SP, sum the partial layer-norm and bias gradients over the tensor group once the
        last micro-batch's are in (before the data-parallel synchronisation)."""
        lyr = layer_of(self.config, li)
        if self.sp and hasattr(lyr, "steps"):  # the blocks' and the head's norms and reduced biases
            for n in sp_partial_grads(self.block_items(lyr.steps)):
                size = int(np.prod(lyr.param_shapes()[n]))
                self._coll(r, "all_reduce", grad(li, n), grad(li, n), None, f"sp/{li}/{n}", 8 * size)
