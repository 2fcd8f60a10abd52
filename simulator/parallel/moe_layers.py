"""Emitting a mixture-of-experts block on one rank of any lane (GShard, Lepikhin et al. 2020;
Megatron-LM's MoE layer with its AllToAll token dispatcher).

    attention half     (whole sequence; or this rank's T/cp tokens with ring / all-to-all attention;
                        or this tensor rank's a/tp heads with Megatron's AllReduce): x -> x1, m = ln2(x1)
    [AllGather]        under context parallelism, the expert choices of the cp group's tokens, so every
                       rank numbers the capacity slots of a sequence exactly as one device does
    dispatch           router, top-k, capacity slots -> buffer (E, B C, h)
    AllToAll           over the expert-parallel group: each rank gets the slots of its E/ep experts
    experts            its experts' MLPs (whole: the expert tensor-parallel size is 1; every tensor
                       rank of a group routes the same tokens and holds the same experts)
    AllToAll           the outputs back to the ranks their tokens came from
    combine            y = x1 + sum of gate x expert output

Backward runs the two AllToAlls in reverse (the backward of AllToAll is AllToAll), then the
router's backward, then the attention half's; under zero-bubble schedules B keeps that chain and W
computes the expert, router and attention-half weight gradients later (bw_split.py). The attention
half is the dense block's own steps through the lane's transforms (`StepsAttentionHalf`);
`ExpertLayers` emits everything else.

Names on a rank for layer li and micro-batch j: act/moe/{li}/mb{j}/... (the dispatch cache is kept
for backward, with the expert outputs); the attention half uses its lane's act/cache and act/tp
or act/cp names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..program import Collective
from . import moe_kernels  # noqa: F401 -- registers the moe_* kernels this emitter uses
from .block_lane import emit_backward, emit_forward
from .bw_split import SplitBackward
from .emit import param
from .experts import EXPERT_PARAMS, MoEBlock
from .layer_kernels import layer_of


@dataclass
class ExpertLayers(SplitBackward):
    """Mixed in before a Replica class: its MoE blocks dispatch over `ep_group_of[rank]`; their
    backward splits into B and W for zero-bubble schedules (bw_split.py)."""

    ep_group_of: dict = field(default_factory=dict)  # rank -> its expert-parallel group

    def _ep(self, r: int) -> int:
        return len(self.ep_group_of.get(r, (r,)))

    def _a2a(self, r: int, src: str, dst: str, nbytes: int, tag: str, j: int) -> str:
        if self._ep(r) == 1:
            return src
        self.builder.add(r, Collective("all_to_all", src, dst, self.ep_group_of[r], axis=0, nbytes=nbytes, tag=tag,
                                       microbatch=j))
        self.builder.free(r, src)
        return dst

    def _moe_tokens(self) -> int:
        """Tokens of each sequence on this rank."""
        return self.config.seq_len // getattr(self, "cp", 1)

    def _buf_nbytes(self, lyr: MoEBlock) -> int:
        """The (E, B C, h) float64 dispatch buffer, the same on every rank (C slots per sequence)."""
        return 8 * lyr.experts * self.microbatch_size * lyr.capacity * lyr.hidden

    def _expert_flops(self, lyr: MoEBlock) -> float:
        """4 h f per slot over the E B C slots this rank's experts serve (ep ranks x E/ep experts x B C)."""
        return 4.0 * lyr.hidden * lyr.expert_hidden * lyr.experts * lyr.capacity * self.microbatch_size

    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, MoEBlock):
            return super().emit_layer_forward(r, li, x, y, j)
        b, a = self.builder, f"act/moe/{li}/mb{j}"
        at, kw = {"config": self.config, "layer": li}, {"phase": "forward", "microbatch": j}
        x1, m = self.emit_moe_attention_forward(r, li, lyr, x, j)
        ins, attrs = [m, param(li, "w_router")], dict(at)
        if getattr(self, "cp", 1) > 1:
            b.compute(r, "moe_choose", ins, [f"{a}/choice"], attrs=at, label=f"F{j} {lyr.name} top-k", **kw)
            nb = 8 * self.microbatch_size * self._moe_tokens() * lyr.top_k
            b.add(r, Collective("all_gather", f"{a}/choice", f"{a}/choices", self.cp_group_of[r], axis=1, nbytes=nb,
                                tag=f"choices{j}:{li}", microbatch=j))
            b.free(r, f"{a}/choice")
            ins.append(f"{a}/choices")
            attrs.update(order=sum(self.positions, ()), mine=self.positions[self.c])
        router = 2.0 * self.microbatch_size * self._moe_tokens() * lyr.hidden * lyr.experts
        b.compute(r, "moe_dispatch", ins, [f"{a}/disp", f"{a}/route", f"{a}/stats"], attrs=attrs, flops=router,
                  label=f"F{j} {lyr.name} route", **kw)
        b.free(r, m, *ins[2:])
        b.compute(r, "add", [f"out/moe/{li}", f"{a}/stats"], [f"out/moe/{li}"], phase="other", label="count")
        b.free(r, f"{a}/stats")
        ep, nb = self._ep(r), self._buf_nbytes(lyr)
        buf = self._a2a(r, f"{a}/disp", f"{a}/xin", nb, f"dispatch{j}:{li}", j)
        b.compute(r, "moe_experts_fwd", [buf, *(param(li, n) for n in EXPERT_PARAMS)], [f"{a}/eo", f"{a}/ecache"],
                  attrs={**at, "ep": ep}, flops=self._expert_flops(lyr), label=f"F{j} {lyr.name} experts", **kw)
        b.free(r, buf)
        back = self._a2a(r, f"{a}/eo", f"{a}/eout", nb, f"combine{j}:{li}", j)
        b.compute(r, "moe_combine", [f"{a}/route", x1, back], [y], attrs=at, label=f"F{j} {lyr.name} combine", **kw)
        b.free(r, x1)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, MoEBlock):
            return super().emit_layer_backward(r, li, dy, dx, j, accumulate)
        b, a = self.builder, f"act/moe/{li}/mb{j}"
        at, kw = {"config": self.config, "layer": li}, {"phase": "backward", "microbatch": j}
        ep, nb = self._ep(r), self._buf_nbytes(lyr)
        back = f"{a}/eout" if ep > 1 else f"{a}/eo"
        b.compute(r, "moe_post_bwd", [f"{a}/route", back, dy], [f"{a}/deo", f"{a}/dgates"], attrs=at,
                  label=f"B{j} {lyr.name} combine", **kw)
        b.free(r, back)
        dbuf = self._a2a(r, f"{a}/deo", f"{a}/dout", nb, f"combine-b{j}:{li}", j)
        self.grad_op(r, li, j, "moe_experts_bwd", [f"{a}/ecache", dbuf, *(param(li, n) for n in EXPERT_PARAMS)],
                     [f"{a}/dxin"], EXPERT_PARAMS, accumulate, (self._expert_flops(lyr),) * 2,
                     attrs={**at, "ep": ep}, label=f"{lyr.name} experts")
        b.free(r, f"{a}/ecache", dbuf)
        ddisp = self._a2a(r, f"{a}/dxin", f"{a}/ddisp", nb, f"dispatch-b{j}:{li}", j)
        router = 2.0 * self.microbatch_size * self._moe_tokens() * lyr.hidden * lyr.experts
        self.grad_op(r, li, j, "moe_dispatch_bwd", [f"{a}/route", ddisp, f"{a}/dgates", param(li, "w_router")],
                     [f"{a}/dm"], ("w_router",), accumulate, (router, router), attrs=at, label=f"{lyr.name} route")
        b.free(r, f"{a}/route", ddisp, f"{a}/dgates")
        self.emit_moe_attention_backward(r, li, lyr, dy, f"{a}/dm", dx, j, accumulate)
        b.free(r, f"{a}/dm")

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        if isinstance(layer_of(self.config, li), MoEBlock):
            return self.split_backward_input(r, li, dy, dx, j)
        return super().emit_layer_backward_input(r, li, dy, dx, j)

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        if isinstance(layer_of(self.config, li), MoEBlock):
            return self.split_backward_weight(r, li, j, accumulate)
        return super().emit_layer_backward_weight(r, li, j, accumulate)


class StepsAttentionHalf:
    """The dense block's attention half (block_plan.attention_half: ln1 .. ln2) through the lane's
    transforms (block_lane.lane_items: Megatron's column / row split on this tensor rank's a/tp heads,
    ring or all-to-all attention over the context group), by block_lane's one emitter."""

    def emit_moe_attention_forward(self, r, li, lyr, x, j):
        c, _ = self._names(li, j)
        out = {"x1": f"{c}/x1", "m": f"{c}/m"}
        emit_forward(self, r, li, lyr, self.block_items(lyr.attention_steps), {"x": x}, out, j)
        return out["x1"], out["m"]

    def emit_moe_attention_backward(self, r, li, lyr, dy, dm, dx, j, accumulate):
        out = dx or f"act/moe/{li}/mb{j}/dx"
        emit_backward(self, r, li, lyr, self.block_items(lyr.attention_steps), {"x1": dy, "m": dm}, {"x": out}, j,
                      accumulate)
        self.builder.free(r, *([] if dx else [out]))


class WholeAttention(StepsAttentionHalf):
    """tp = cp = 1: the attention half's steps as they are, one Compute each way."""

    def block_items(self, steps: tuple) -> tuple:
        return steps

    def _names(self, li, j):
        return f"act/cache/{li}/mb{j}", f"act/tp/{li}/mb{j}"
