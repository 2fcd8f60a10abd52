"""Emitting context-parallel attention on one rank: the ring (K/V blocks passed on with Send/Recv,
dK/dV passed on in backward) or the two all-to-alls of Ulysses. A mixin shared by the plain
context-parallel replica and the context x tensor one (context_parallel.py); the kernels are in
cp_kernels.py.

Names on a rank for layer li, micro-batch j: act/cache/{li}/mb{j}/{q,kv,att,lse,uly} are kept for
backward, act/cp/{li}/mb{j}/... are temporaries (blocks in flight, datt, dq, dkv). The ring sends
go to the next rank of the context group and arrive from the previous one; at step s rank i holds
the block of rank (i - s) mod cp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models import block_plan as plan
from ..program import Collective, Recv, Send
from .emit import param


def ring_order(n: int, backward: bool) -> tuple[tuple[str, str, int], ...]:
    """The p2p ring's order on a context group of n ranks, as (action, what, step): the one home of
    it, which the runnable lane (`ContextAttention`) and the scale program (`cost.scale_program`)
    both walk. Transformer Engine's AttnFuncWithCPAndKVP2P (`cp_comm_type p2p`): forward, step s
    sends the K/V block it holds to the next rank and receives the next one, overlapped with the
    step's attention kernel (n - 1 exchanges); backward, the ring reversed, step s posts the K/V
    block (steps 0 .. n-2) and the dK/dV summed so far (steps 1 .. n-1) to the previous rank and
    receives theirs, then runs its kernel: n - 1 exchanges of each."""
    out = []
    for s in range(n):
        if not backward:
            out += [("send", "kv", s)] * (s < n - 1) + [("step", "", s)] + [("recv", "kv", s)] * (s < n - 1)
            continue
        sends = [("send", "kv", s)] * (s < n - 1) + [("send", "dkv", s)] * (s > 0)
        recvs = [("recv", "dkv", s)] * (s > 0) + [("recv", "kv", s)] * (s < n - 1)
        out += sends + recvs + [("step", "", s)]
    return tuple(out)


@dataclass
class ContextAttention:
    """Fields and emitters of a context-parallel lane (mixed into a Replica)."""

    cp: int = 1
    c: int = 0
    kind: str = "p2p"  # Megatron's --cp-comm-type: p2p (ring attention) or a2a (Ulysses all-to-all)
    cp_group_of: dict = field(default_factory=dict)  # rank -> its context group
    positions: list = field(default_factory=list)  # cp rank -> token positions

    def _names(self, li, j):
        return f"act/cache/{li}/mb{j}", f"act/tp/{li}/mb{j}"

    def _step_tokens(self) -> int:
        return self.config.seq_len // self.cp

    # ---- the block's qkv .. o as one item (block_lane.context_parallel) -------------------------
    def external_forward(self, r, li, lyr, item, a, j) -> str:
        """QKV of this rank's heads (all a, or a/tp under tensor parallelism), ring or all-to-all
        attention over the context group, then W_o (row-parallel under tp: a partial sum; its bias is
        a step after). -> the output's tensor."""
        c, T = self._names(li, j)
        qkv, o = item.steps[0], item.steps[-1]
        B, kw = self.microbatch_size, {"phase": "forward", "microbatch": j}
        self.builder.compute(r, "cp_qkv_fwd", [a, *(param(li, n) for n in qkv.param_names)], [f"{c}/q", f"{c}/kv"],
                             flops=plan.flops((qkv,), B, self._step_tokens())[0], label=f"F{j} {lyr.name} qkv", **kw)
        self.emit_cp_attention_forward(r, li, lyr, j)
        self.builder.compute(r, "cp_o_fwd", [f"{c}/att", param(li, "w_o")], [f"{T}/o_part"],
                             flops=plan.flops((o,), B, self._step_tokens())[0], label=f"F{j} {lyr.name} W_o", **kw)
        return f"{T}/o_part"

    def external_backward(self, r, li, lyr, item, a, dout, j, accumulate) -> str:
        """-> the (partial, under tp) gradient of the attention input; the weight gradients of
        w_qkv, b_qkv, w_o."""
        c, T = self._names(li, j)
        CP, (qkv, o) = f"act/cp/{li}/mb{j}", (item.steps[0], item.steps[-1])
        fl = lambda s: plan.flops((s,), self.microbatch_size, self._step_tokens())[1:]  # noqa: E731
        self.grad_op(r, li, j, "cp_o_bwd", [f"{c}/att", dout, param(li, "w_o")], [f"{CP}/datt"], ("w_o",), accumulate,
                     fl(o), label=f"{lyr.name} W_o")
        self.emit_cp_attention_backward(r, li, lyr, j)
        self.grad_op(r, li, j, "cp_qkv_bwd", [a, f"{CP}/dq", f"{CP}/dkv", param(li, "w_qkv")], [f"{T}/da_part"],
                     qkv.param_names, accumulate, fl(qkv), label=f"{lyr.name} qkv")
        self.builder.free(r, f"{CP}/dq", f"{CP}/dkv")
        return f"{T}/da_part"

    def emit_cp_attention_forward(self, r, li, lyr, j):
        """{c}/q, {c}/kv -> {c}/att (B, T/cp, w) and what backward keeps."""
        c = f"act/cache/{li}/mb{j}"
        (self._ring_forward if self.kind == "p2p" else self._a2a_forward)(r, li, lyr, j, c)

    def emit_cp_attention_backward(self, r, li, lyr, j):
        """act/cp/{li}/mb{j}/datt -> act/cp/{li}/mb{j}/dq, dkv; frees the kept attention tensors."""
        c, T = f"act/cache/{li}/mb{j}", f"act/cp/{li}/mb{j}"
        (self._ring_backward if self.kind == "p2p" else self._a2a_backward)(r, li, lyr, j, c, T)

    def _ring(self, r):
        g = self.cp_group_of[r]
        i = g.index(r)
        return g, i, g[(i + 1) % len(g)], g[(i - 1) % len(g)]

    @property
    def _width(self) -> int:
        """Columns of q (and of k, v) on this rank: h, or h/tp for a tensor rank's heads."""
        return self.config.hidden // getattr(self, "tp", 1)

    def _kv_nbytes(self) -> int:
        return 8 * 2 * self.microbatch_size * (self.config.seq_len // self.cp) * self._width  # (2, B, T/cp, w)

    def _heads(self, lyr) -> int:
        return lyr.heads // getattr(self, "tp", 1)

    def _attn_kw(self, lyr, q_rank, k_rank):
        return {"heads": self._heads(lyr), "q_pos": self.positions[q_rank], "k_pos": self.positions[k_rank]}

    def _step_flops(self, k: float) -> float:
        """One ring step's k B Tq Tk w, Tq = Tk = s/cp: QK^T and PV are 2 B Tq Tk w each (forward
        k = 4, backward k = 8), counted whole as Megatron-LM counts attention (causal or not). Ulysses'
        core is cp of them: a/cp heads (w/cp columns) over all s tokens."""
        tl = self.config.seq_len // self.cp
        return k * self.microbatch_size * tl * tl * self._width

    def _ring_forward(self, r, li, lyr, j, c):
        """Step s folds the block of rank i - s; the last one received is kept for the backward
        ({c}/kvb, TE keeps p2p_comm_buffers[-1]), this rank's own K/V is freed after step 0."""
        b, (g, i, nxt, prv) = self.builder, self._ring(r)
        n, T, kw = len(g), f"act/cp/{li}/mb{j}", dict(phase="forward", microbatch=j)
        kv, state = f"{c}/kv", f"{T}/state"
        for act, what, s in ring_order(n, backward=False):
            tag = f"cp/{li}/mb{j}/kv{s}"
            if act == "send":
                b.add(r, Send(kv, nxt, tag, self._kv_nbytes(), j))
            elif act == "recv":
                kv = f"{c}/kvb" if s == n - 2 else f"{T}/kv{s + 1}"
                b.add(r, Recv(kv, prv, tag, self._kv_nbytes(), j))
            else:
                b.compute(r, "ring_attn_fwd_step", [f"{c}/q", kv] + ([state] if s else []), [state],
                          attrs=self._attn_kw(lyr, i, (i - s) % n), flops=self._step_flops(4.0),
                          label=f"F{j} {lyr.name} ring {s}: kv of cp{(i - s) % n}", **kw)
                if s < n - 1:
                    b.free(r, kv)
        b.compute(r, "ring_attn_finish", [state], [f"{c}/att", f"{c}/lse"], label=f"F{j} {lyr.name} softmax /l", **kw)
        b.free(r, state)

    def _cp_a2a(self, r, src, out, j, tag, nbytes):
        self.builder.add(r, Collective("all_to_all", src, out, self.cp_group_of[r], axis=0, nbytes=nbytes, tag=tag,
                                       microbatch=j))
        self.builder.free(r, src)

    def _a2a_forward(self, r, li, lyr, j, c):
        b, T, kw = self.builder, f"act/cp/{li}/mb{j}", dict(phase="forward", microbatch=j)
        nb = self._kv_nbytes() // 2
        b.compute(r, "ulysses_pack", [f"{c}/q", f"{c}/kv"], [f"{T}/send"], attrs={"cp": self.cp},
                  label=f"F{j} {lyr.name} pack qkv", **kw)
        b.free(r, f"{c}/q", f"{c}/kv")
        self._cp_a2a(r, f"{T}/send", f"{T}/recv", j, f"cp/{li}/mb{j}/qkv", 3 * nb)
        b.compute(r, "ulysses_attn_fwd", [f"{T}/recv"], [f"{T}/osend", f"{c}/uly"],
                  attrs={"heads": self._heads(lyr) // self.cp, "positions": sum(self.positions, ())},
                  flops=self.cp * self._step_flops(4.0), label=f"F{j} {lyr.name} attn (a/cp heads, all tokens)", **kw)
        b.free(r, f"{T}/recv")
        self._cp_a2a(r, f"{T}/osend", f"{T}/orecv", j, f"cp/{li}/mb{j}/out", nb)
        b.compute(r, "ulysses_unpack", [f"{T}/orecv"], [f"{c}/att"], label=f"F{j} {lyr.name} unpack", **kw)
        b.free(r, f"{T}/orecv")

    def _ring_backward(self, r, li, lyr, j, c, T):
        """The ring reversed (TE's AttnFuncWithCPAndKVP2P.backward): step s holds the block of rank
        i + 1 + s, starting from the forward's last one, and ends with this rank's own; each step
        passes K/V to the previous rank and dK/dV summed so far with them, and adds this step's
        dK/dV to the sum that arrived (after the step's kernel, which overlaps the transfers)."""
        b, (g, i, nxt, prv) = self.builder, self._ring(r)
        n, kw = len(g), dict(phase="backward", microbatch=j)
        kv, dkv, nb = f"{c}/kvb" if n > 1 else f"{c}/kv", None, self._kv_nbytes()
        ins = [f"{c}/q", None, f"{c}/att", f"{T}/datt", f"{c}/lse"]
        incoming = {}
        for act, what, s in ring_order(n, backward=True):
            tag = f"cp/{li}/mb{j}/b{what}{s}"
            if act == "send":
                b.add(r, Send(kv if what == "kv" else dkv, prv, tag, nb, j))
                if what == "dkv":
                    b.free(r, dkv)
            elif act == "recv":
                incoming[what] = f"{T}/{what}_in{s}"
                b.add(r, Recv(incoming[what], nxt, tag, nb, j))
            else:
                ins[1], k_rank = kv, (i + 1 + s) % n
                out = f"{T}/dkv" if s == 0 and n == 1 else f"{T}/dkv_step{s}"
                b.compute(r, "ring_attn_bwd_step", ins + ([f"{T}/dq"] if s else []), [f"{T}/dq", out],
                          attrs={**self._attn_kw(lyr, i, k_rank), "has_dq": s > 0}, flops=self._step_flops(8.0),
                          label=f"B{j} {lyr.name} ring {s}: kv of cp{k_rank}", **kw)
                b.free(r, kv)
                kv = incoming.pop("kv", None)
                if s == 0:
                    dkv = out
                    continue
                dkv = f"{T}/dkv" if s == n - 1 else f"{T}/dkv_sum{s}"
                got = incoming.pop("dkv")
                b.compute(r, "ring_dkv_add", [got, out], [dkv], label=f"B{j} {lyr.name} ring {s}: dkv +", **kw)
                b.free(r, got, out)
        b.free(r, f"{c}/q", f"{c}/att", f"{c}/lse", f"{T}/datt")

    def _a2a_backward(self, r, li, lyr, j, c, T):
        b, kw = self.builder, dict(phase="backward", microbatch=j)
        nb = self._kv_nbytes() // 2
        b.compute(r, "ulysses_split_heads", [f"{T}/datt"], [f"{T}/dsend"], attrs={"cp": self.cp},
                  label=f"B{j} {lyr.name} pack dO", **kw)
        b.free(r, f"{T}/datt", f"{c}/att")
        self._cp_a2a(r, f"{T}/dsend", f"{T}/drecv", j, f"cp/{li}/mb{j}/dout", nb)
        b.compute(r, "ulysses_attn_bwd", [f"{c}/uly", f"{T}/drecv"], [f"{T}/gsend"],
                  attrs={"heads": self._heads(lyr) // self.cp, "positions": sum(self.positions, ())},
                  flops=self.cp * self._step_flops(8.0), label=f"B{j} {lyr.name} attn bwd", **kw)
        b.free(r, f"{c}/uly", f"{T}/drecv")
        self._cp_a2a(r, f"{T}/gsend", f"{T}/grecv", j, f"cp/{li}/mb{j}/dqkv", 3 * nb)
        b.compute(r, "ulysses_unpack_grads", [f"{T}/grecv"], [f"{T}/dq", f"{T}/dkv"], label=f"B{j} {lyr.name} unpack",
                  **kw)
        b.free(r, f"{T}/grecv")
