"""Context parallelism: the sequence of every sample split over cp ranks (Megatron-LM's
`--context-parallel-size`; Llama 3 405B trained its long-context stage with cp = 16, Dubey et al.
2024, Sec. 3.3.2).

Everything in a GPT but attention is token-wise, so a rank holding T/cp tokens runs the
embedding, layer norms, projections, MLP, LM head and loss on its tokens alone, with the
parameters replicated over the cp group. Attention needs every earlier token; two ways:

- ring (`cp_kind="ring"`, Liu et al. 2023; Megatron's p2p): the K/V blocks go round the ring,
  cp - 1 Send/Recv hops per attention in forward, each rank folding every block into its queries'
  online softmax (cp_kernels.py). Backward sends the blocks round again with their dK/dV, which
  arrive home after cp hops. With causal masking the sequence is cut into 2 cp chunks and rank i
  holds chunks i and 2cp-1-i (one early, one late), so every rank has the same unmasked work.
- all-to-all (`cp_kind="all-to-all"`, DeepSpeed Ulysses, Jacobs et al. 2023): q, k, v of T/cp
  tokens x a heads become T tokens x a/cp heads, attention runs locally, a second all-to-all
  brings the output back; backward mirrors it (two all-to-alls). Needs cp | heads.

Gradients are partial over the cp group (each rank saw T/cp tokens): they are reduced over the
combined data x context group, as Megatron does; each rank's loss is scaled by cp / tokens so the
mean over dp x cp ranks is the replica mean. Activations per rank shrink as 1/cp: per block and
micro-batch 8 B (s/cp) (16h + 2 + a) bytes for ring (no s x s score matrix is ever stored) and
8 B (s/cp) (17h + 2 + a) for all-to-all (`block_activation_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ParasimError
from ..mesh import DeviceMesh
from ..models import Embedding, TransformerBlock
from ..program import Collective, Recv, Send
from .config import TrainConfig
from .cp_split import chunk_positions
from .emit import Replica, grad, param
from .kernels import layer_of
from .replicated import Compiled, WholeLayers, compile_replicated

PRE = ("ln1_g", "ln1_b", "w_qkv", "b_qkv")
POST = ("w_o", "b_o", "ln2_g", "ln2_b", "w_fc", "b_fc", "w_proj", "b_proj")


@dataclass
class ContextParallelReplica(Replica):
    """The lane of context rank `c`: the same schedule as the other cp lanes of its stages."""

    cp: int = 1
    c: int = 0
    kind: str = "ring"
    cp_group_of: dict = field(default_factory=dict)  # rank -> its context group
    positions: list = field(default_factory=list)  # cp rank -> token positions

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // self.cp

    def _ring(self, r):
        g = self.cp_group_of[r]
        i = g.index(r)
        return g, i, g[(i + 1) % len(g)], g[(i - 1) % len(g)]

    def _kv_nbytes(self) -> int:
        c = self.config
        return 8 * 2 * self.microbatch_size * (c.seq_len // self.cp) * c.hidden  # (2, B, T/cp, h)

    def _attn_kw(self, lyr, q_rank, k_rank):
        return {"heads": lyr.heads, "q_pos": self.positions[q_rank], "k_pos": self.positions[k_rank]}

    def _step_flops(self, k: float) -> float:
        c = self.config
        tl = c.seq_len // self.cp
        return k * self.microbatch_size * tl * tl * c.hidden

    # ---- forward ----------------------------------------------------------------------------------
    def emit_layer_forward(self, r, li, x, y, j):
        b, lyr = self.builder, layer_of(self.config, li)
        P = lambda *ns: [param(li, n) for n in ns]  # noqa: E731
        kw = dict(phase="forward", microbatch=j)
        c = f"act/cache/{li}/mb{j}"
        if isinstance(lyr, Embedding):
            b.compute(r, "cp_embed_fwd", [x, *P("wte", "wpe")], [y, c], attrs={"positions": self.positions[self.c]},
                      label=f"F{j} {lyr.name}", **kw)
            return
        if not isinstance(lyr, TransformerBlock):
            b.compute(r, "layer_fwd", [x, *self._params(li)], [y, c], attrs={"config": self.config, "layer": li},
                      flops=lyr.forward_flops(self.microbatch_size) / self.cp, label=f"F{j} {lyr.name}", **kw)
            return
        tl = self.config.seq_len // self.cp
        B, h = self.microbatch_size, self.config.hidden
        b.compute(r, "cp_pre_fwd", [x, *P(*PRE)], [f"{c}/q", f"{c}/kv", f"{c}/pre"], flops=6.0 * B * tl * h * h,
                  label=f"F{j} {lyr.name} ln1+qkv", **kw)
        (self._ring_forward if self.kind == "ring" else self._a2a_forward)(r, li, lyr, j, c)
        b.compute(r, "cp_post_fwd", [x, f"{c}/att", *P(*POST)], [y, f"{c}/post"], flops=18.0 * B * tl * h * h,
                  label=f"F{j} {lyr.name} out+mlp", **kw)

    def _ring_forward(self, r, li, lyr, j, c):
        b, (g, i, nxt, prv) = self.builder, self._ring(r)
        n, T, kw = len(g), f"act/cp/{li}/mb{j}", dict(phase="forward", microbatch=j)
        kv, state = f"{c}/kv", f"{T}/state"
        for s in range(n):
            if s < n - 1:
                b.add(r, Send(kv, nxt, f"cp/{li}/mb{j}/kv{s}", self._kv_nbytes(), j))
            b.compute(r, "ring_attn_fwd_step", [f"{c}/q", kv] + ([state] if s else []), [state],
                      attrs=self._attn_kw(lyr, i, (i - s) % n), flops=self._step_flops(4.0),
                      label=f"F{j} {lyr.name} ring {s}: kv of cp{(i - s) % n}", **kw)
            if s:
                b.free(r, kv)
            if s < n - 1:
                kv = f"{T}/kv{s + 1}"
                b.add(r, Recv(kv, prv, f"cp/{li}/mb{j}/kv{s}", self._kv_nbytes(), j))
        b.compute(r, "ring_attn_finish", [state], [f"{c}/att", f"{c}/lse"], label=f"F{j} {lyr.name} softmax /l", **kw)
        b.free(r, state)

    def _a2a(self, r, src, out, j, tag, nbytes):
        self.builder.add(r, Collective("all_to_all", src, out, self.cp_group_of[r], axis=0, nbytes=nbytes, tag=tag,
                                       microbatch=j))
        self.builder.free(r, src)

    def _a2a_forward(self, r, li, lyr, j, c):
        b, T, kw = self.builder, f"act/cp/{li}/mb{j}", dict(phase="forward", microbatch=j)
        nb = self._kv_nbytes() // 2
        b.compute(r, "ulysses_pack", [f"{c}/q", f"{c}/kv"], [f"{T}/send"], attrs={"cp": self.cp},
                  label=f"F{j} {lyr.name} pack qkv", **kw)
        b.free(r, f"{c}/q", f"{c}/kv")
        self._a2a(r, f"{T}/send", f"{T}/recv", j, f"cp/{li}/mb{j}/qkv", 3 * nb)
        b.compute(r, "ulysses_attn_fwd", [f"{T}/recv"], [f"{T}/osend", f"{c}/uly"],
                  attrs={"heads": lyr.heads // self.cp, "positions": sum(self.positions, ())},
                  flops=self._step_flops(4.0), label=f"F{j} {lyr.name} attn (a/cp heads, all tokens)", **kw)
        b.free(r, f"{T}/recv")
        self._a2a(r, f"{T}/osend", f"{T}/orecv", j, f"cp/{li}/mb{j}/out", nb)
        b.compute(r, "ulysses_unpack", [f"{T}/orecv"], [f"{c}/att"], label=f"F{j} {lyr.name} unpack", **kw)
        b.free(r, f"{T}/orecv")

    # ---- backward ---------------------------------------------------------------------------------
    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        G = lambda *ns: [grad(li, n) for n in ns]  # noqa: E731
        acc = lambda *ns: G(*ns) if accumulate else []  # noqa: E731
        P = lambda *ns: [param(li, n) for n in ns]  # noqa: E731
        kw = dict(phase="backward", microbatch=j)
        c, T = f"act/cache/{li}/mb{j}", f"act/cp/{li}/mb{j}"
        if isinstance(lyr, Embedding):
            b.compute(r, "cp_embed_bwd", [c, dy, *acc("wte", "wpe")], G("wte", "wpe"),
                      attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                      label=f"B{j} {lyr.name}", **kw)
            b.free(r, c)
            return
        if not isinstance(lyr, TransformerBlock):
            fl = sum(lyr.backward_flops(self.microbatch_size)) / self.cp
            b.compute(r, "layer_bwd", [c, dy, *self._params(li), *acc(*lyr.param_shapes())],
                      ([dx] if dx else []) + G(*lyr.param_shapes()),
                      attrs={"config": self.config, "layer": li, "n_params": len(lyr.param_shapes()),
                             "want_dx": dx is not None}, flops=fl, label=f"B{j} {lyr.name}", **kw)
            b.free(r, c)
            return
        tl = self.config.seq_len // self.cp
        B, h = self.microbatch_size, self.config.hidden
        b.compute(r, "cp_post_bwd", [f"{c}/post", f"{c}/att", dy, *P("w_o", "ln2_g", "w_fc", "w_proj"), *acc(*POST)],
                  [f"{T}/datt", f"{T}/dx1", *G(*POST)], flops=36.0 * B * tl * h * h,
                  label=f"B{j} {lyr.name} mlp+out", **kw)
        b.free(r, f"{c}/post")
        (self._ring_backward if self.kind == "ring" else self._a2a_backward)(r, li, lyr, j, c, T)
        b.compute(r, "cp_pre_bwd", [f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1", *P("ln1_g", "w_qkv"), *acc(*PRE)],
                  [dx, *G(*PRE)], flops=12.0 * B * tl * h * h, label=f"B{j} {lyr.name} qkv+ln1", **kw)
        b.free(r, f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1")

    def _ring_backward(self, r, li, lyr, j, c, T):
        b, (g, i, nxt, prv) = self.builder, self._ring(r)
        n, kw = len(g), dict(phase="backward", microbatch=j)
        kv, dkv = f"{c}/kv", None
        ins = [f"{c}/q", None, f"{c}/att", f"{T}/datt", f"{c}/lse"]
        for s in range(n):
            if s < n - 1:
                b.add(r, Send(kv, nxt, f"cp/{li}/mb{j}/bkv{s}", self._kv_nbytes(), j))
            ins[1] = kv
            out = f"{T}/dkv" if n == 1 else f"{T}/dkv_out{s}"
            b.compute(r, "ring_attn_bwd_step", ins + ([f"{T}/dq"] if s else []) + ([dkv] if dkv else []),
                      [f"{T}/dq", out], attrs={**self._attn_kw(lyr, i, (i - s) % n), "has_dq": s > 0},
                      flops=self._step_flops(8.0), label=f"B{j} {lyr.name} ring {s}: kv of cp{(i - s) % n}", **kw)
            b.free(r, *([kv] if s else []), *([dkv] if dkv else []))
            if n > 1:  # dK/dV of this block travel on; after the last hop they reach their owner
                b.add(r, Send(out, nxt, f"cp/{li}/mb{j}/dkv{s}", self._kv_nbytes(), j))
                b.free(r, out)
                dkv = f"{T}/dkv" if s == n - 1 else f"{T}/dkv{s + 1}"
                b.add(r, Recv(dkv, prv, f"cp/{li}/mb{j}/dkv{s}", self._kv_nbytes(), j))
            if s < n - 1:
                kv = f"{T}/bkv{s + 1}"
                b.add(r, Recv(kv, prv, f"cp/{li}/mb{j}/bkv{s}", self._kv_nbytes(), j))
        b.free(r, f"{c}/q", f"{c}/kv", f"{c}/att", f"{c}/lse", f"{T}/datt")

    def _a2a_backward(self, r, li, lyr, j, c, T):
        b, kw = self.builder, dict(phase="backward", microbatch=j)
        nb = self._kv_nbytes() // 2
        b.compute(r, "ulysses_split_heads", [f"{T}/datt"], [f"{T}/dsend"], attrs={"cp": self.cp},
                  label=f"B{j} {lyr.name} pack dO", **kw)
        b.free(r, f"{T}/datt", f"{c}/att")
        self._a2a(r, f"{T}/dsend", f"{T}/drecv", j, f"cp/{li}/mb{j}/dout", nb)
        b.compute(r, "ulysses_attn_bwd", [f"{c}/uly", f"{T}/drecv"], [f"{T}/gsend"],
                  attrs={"heads": lyr.heads // self.cp, "positions": sum(self.positions, ())},
                  flops=self._step_flops(8.0), label=f"B{j} {lyr.name} attn bwd", **kw)
        b.free(r, f"{c}/uly", f"{T}/drecv")
        self._a2a(r, f"{T}/gsend", f"{T}/grecv", j, f"cp/{li}/mb{j}/dqkv", 3 * nb)
        b.compute(r, "ulysses_unpack_grads", [f"{T}/grecv"], [f"{T}/dq", f"{T}/dkv"], label=f"B{j} {lyr.name} unpack",
                  **kw)
        b.free(r, f"{T}/grecv")

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        raise ParasimError("zero-bubble B/W splitting is not available with context parallelism")


@dataclass(frozen=True)
class ContextParallel(WholeLayers):
    """The placement for cp > 1 (tp = 1): whole layers, replicated over the context group."""

    cfg: TrainConfig | None = None  # resolved

    @property
    def cp_group_of(self) -> dict[int, tuple[int, ...]]:
        c = self.cfg
        mesh = DeviceMesh({"pp": c.pp, "dp": c.dp, "cp": c.cp, "tp": c.tp})
        return {r: g for g in mesh.groups("cp") for r in g}

    def replica(self, builder, stages, ranks, t, mbs, scale, ready, c: int = 0) -> Replica:
        cfg = self.cfg
        return ContextParallelReplica(builder, cfg.model, stages, ranks, mbs, scale, ready, cp=cfg.cp, c=c,
                                      kind=cfg.cp_kind, cp_group_of=self.cp_group_of,
                                      positions=chunk_positions(cfg.model.seq_len, cfg.cp, cfg.cp_kind))

    def positions(self, c: int) -> tuple[int, ...]:
        return chunk_positions(self.cfg.model.seq_len, self.cfg.cp, self.cfg.cp_kind)[c]


def compile_context_parallel(cfg: TrainConfig) -> Compiled:
    """Context parallelism on cp ranks (times any dp and pp degrees given). cp = 1 runs the same
    blockwise kernels on a ring of one: FlashAttention-style attention that never stores s x s."""
    cfg = cfg.resolved()
    if hasattr(cfg.model, "build_layers"):
        raise ParasimError(f"context parallelism here splits dense GPT blocks; the mixture-of-experts model "
                           f"{cfg.model!r} is not supported with cp > 1")
    if cfg.tp > 1:
        raise ParasimError(f"context parallelism with tensor parallelism (cp={cfg.cp}, tp={cfg.tp}) is not "
                           "available yet: use tp=1")
    compiled = compile_replicated(cfg, ContextParallel(cfg.model, cfg))
    compiled.notes.update(cp=cfg.cp, cp_kind=cfg.cp_kind)
    return compiled
