"""Context parallelism: the sequence of every sample split over cp ranks (Megatron-LM's
`--context-parallel-size`; Llama 3 405B trained its long-context stage with cp = 16, Dubey et al.
2024, Sec. 3.3.2).

Everything in a GPT but attention is token-wise, so a rank holding T/cp tokens runs the
embedding, layer norms, projections, MLP, LM head and loss on its tokens alone, with the
parameters replicated over the cp group. Attention needs every earlier token; two ways:

- ring (`cp_comm_type="p2p"`, Liu et al. 2023; Megatron's p2p): the K/V blocks go round the ring,
  cp - 1 Send/Recv hops per attention in forward, each rank folding every block into its queries'
  online softmax (cp_kernels.py). Backward sends the blocks round again with their dK/dV, which
  arrive home after cp hops. With causal masking the sequence is cut into 2 cp chunks and rank i
  holds chunks i and 2cp-1-i (one early, one late), so every rank has the same unmasked work.
- all-to-all (`cp_comm_type="a2a"`, DeepSpeed Ulysses, Jacobs et al. 2023): q, k, v of T/cp
  tokens x a heads become T tokens x a/cp heads, attention runs locally, a second all-to-all
  brings the output back; backward mirrors it (two all-to-alls). Needs cp | heads.

Gradients are partial over the cp group (each rank saw T/cp tokens): they are reduced over the
combined data x context group, as Megatron does; each rank's loss is scaled by cp / tokens so the
mean over dp x cp ranks is the replica mean. Activations per rank shrink as 1/cp: per block and
micro-batch 8 B (s/cp) (16h + 2 + a) bytes for ring (no s x s score matrix is ever stored) and
8 B (s/cp) (17h + 2 + a) for all-to-all (`block_activation_bytes`).

Zero-bubble schedules (zb-h1, zb-h2, DualPipe) split each block's backward: B runs the MLP and
projection input gradients and the attention backward with its communication (the ring's K/V and
dK/dV hops, or Ulysses' all-to-alls: attention has no weights); W computes the weight gradients of
the projections, MLP, layer norms and embedding later from what B kept (act/wcache).

With tensor parallelism too (the hybrid strategy), each tensor rank runs the ring (or the
all-to-alls) on the q, k, v columns of its a/tp heads, between Megatron's column-parallel QKV
and row-parallel output projection (tensor_parallel.py); all-to-all then needs tp cp | heads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParasimError
from ..models import Embedding, TransformerBlock
from . import cp_kernels  # noqa: F401 -- registers the cp_* kernels this compiler emits
from .config import TrainConfig
from .cp_attention import ContextAttention
from .cp_split import chunk_positions
from .emit import Replica, grad, param
from .layer_kernels import layer_of
from .replicated import Compiled, WholeLayers, compile_replicated
from .tensor_parallel import TensorParallel, TensorParallelReplica, check_tensor_parallel

PRE = ("ln1_g", "ln1_b", "w_qkv", "b_qkv")
POST = ("w_o", "b_o", "ln2_g", "ln2_b", "w_fc", "b_fc", "w_proj", "b_proj")


@dataclass
class ContextParallelReplica(ContextAttention, Replica):
    """The lane of context rank `c` (tp = 1): the same schedule as the other cp lanes of its stages."""

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // self.cp

    def emit_layer_forward(self, r, li, x, y, j):
        b, lyr = self.builder, layer_of(self.config, li)
        P = lambda *ns: [param(li, n) for n in ns]  # noqa: E731
        kw = {"phase": "forward", "microbatch": j}
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
        self.emit_cp_attention_forward(r, li, lyr, j)
        b.compute(r, "cp_post_fwd", [x, f"{c}/att", *P(*POST)], [y, f"{c}/post"], flops=18.0 * B * tl * h * h,
                  label=f"F{j} {lyr.name} out+mlp", **kw)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        G = lambda *ns: [grad(li, n) for n in ns]  # noqa: E731
        acc = lambda *ns: G(*ns) if accumulate else []  # noqa: E731
        P = lambda *ns: [param(li, n) for n in ns]  # noqa: E731
        kw = {"phase": "backward", "microbatch": j}
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
        self.emit_cp_attention_backward(r, li, lyr, j)
        b.compute(r, "cp_pre_bwd", [f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1", *P("ln1_g", "w_qkv"), *acc(*PRE)],
                  [dx, *G(*PRE)], flops=12.0 * B * tl * h * h, label=f"B{j} {lyr.name} qkv+ln1", **kw)
        b.free(r, f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1")

    # ---- zero-bubble schedules: B (input gradients, the ring's dK/dV) now, W (weights) later --------
    def emit_layer_backward_input(self, r, li, dy, dx, j):
        b, lyr = self.builder, layer_of(self.config, li)
        c, T, w = f"act/cache/{li}/mb{j}", f"act/cp/{li}/mb{j}", f"act/wcache/{li}/mb{j}"
        kw = {"phase": "backward", "microbatch": j}
        if isinstance(lyr, Embedding):  # no input gradient: keep dy for W
            b.compute(r, "copy", [dy], [w], label=f"B{j} {lyr.name} keep dy", **kw)
            return
        if not isinstance(lyr, TransformerBlock):
            return super().emit_layer_backward_input(r, li, dy, dx, j)
        tl = self.config.seq_len // self.cp
        B, h = self.microbatch_size, self.config.hidden
        P = lambda *ns: [param(li, n) for n in ns]  # noqa: E731
        b.compute(r, "cp_post_bwd_input", [f"{c}/post", f"{c}/att", dy, *P("w_o", "ln2_g", "w_fc", "w_proj")],
                  [f"{T}/datt", f"{T}/dx1", f"{w}/post"], flops=18.0 * B * tl * h * h, label=f"B{j} {lyr.name} mlp+out",
                  **kw)
        b.free(r, f"{c}/post")
        self.emit_cp_attention_backward(r, li, lyr, j)
        b.compute(r, "cp_pre_bwd_input", [f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1", *P("ln1_g", "w_qkv")],
                  [dx, f"{w}/pre"], flops=6.0 * B * tl * h * h, label=f"B{j} {lyr.name} qkv+ln1", **kw)
        b.free(r, f"{c}/pre", f"{T}/dq", f"{T}/dkv", f"{T}/dx1")

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        c, w = f"act/cache/{li}/mb{j}", f"act/wcache/{li}/mb{j}"
        G = lambda *ns: [grad(li, n) for n in ns]  # noqa: E731
        acc = lambda *ns: G(*ns) if accumulate else []  # noqa: E731
        kw = {"phase": "wgrad", "microbatch": j}
        if isinstance(lyr, Embedding):
            b.compute(r, "cp_embed_bwd", [c, w, *acc("wte", "wpe")], G("wte", "wpe"),
                      attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                      label=f"W{j} {lyr.name}", **kw)
            b.free(r, c, w)
            return
        if not isinstance(lyr, TransformerBlock):
            return super().emit_layer_backward_weight(r, li, j, accumulate)
        tl = self.config.seq_len // self.cp
        B, h = self.microbatch_size, self.config.hidden
        b.compute(r, "cp_post_bwd_weight", [f"{w}/post", *acc(*POST)], G(*POST), flops=18.0 * B * tl * h * h,
                  label=f"W{j} {lyr.name} mlp+out", **kw)
        b.compute(r, "cp_pre_bwd_weight", [f"{w}/pre", *acc(*PRE)], G(*PRE), flops=6.0 * B * tl * h * h,
                  label=f"W{j} {lyr.name} qkv+ln1", **kw)
        b.free(r, f"{w}/post", f"{w}/pre")


@dataclass
class ContextTensorParallelReplica(ContextAttention, TensorParallelReplica):
    """A (context rank, tensor rank) lane: Megatron's tensor-parallel block whose attention runs
    over the context group on this tensor rank's heads; every tensor-group collective moves the
    T/cp tokens of this rank."""

    def _full_nbytes(self, width: int) -> int:
        return super()._full_nbytes(width) // self.cp

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // self.cp

    def _fl_parts(self) -> int:
        return self.tp * self.cp  # T/cp tokens; attention Tl x T per rank

    def _lin_flops(self, k: float) -> float:
        """k B (s/cp) h w: the QKV projection is 6, W_o 2 (forward); backward doubles them."""
        return k * self.microbatch_size * (self.config.seq_len // self.cp) * self.config.hidden * self._width

    cp_attention = True

    def external_forward(self, r, li, lyr, item, a, j) -> str:
        """The block's qkv .. o (block_lane.context_parallel): QKV of this tensor rank's heads, ring or
        all-to-all attention over the context group, the row-parallel W_o. -> the partial output."""
        c, T = self._names(li, j)
        kw = {"phase": "forward", "microbatch": j}
        self.builder.compute(r, "cp_qkv_fwd", [a, param(li, "w_qkv"), param(li, "b_qkv")], [f"{c}/q", f"{c}/kv"],
                             flops=self._lin_flops(6), label=f"F{j} {lyr.name} qkv", **kw)
        self.emit_cp_attention_forward(r, li, lyr, j)
        self.builder.compute(r, "cp_o_fwd", [f"{c}/att", param(li, "w_o")], [f"{T}/o_part"],
                             flops=self._lin_flops(2), label=f"F{j} {lyr.name} W_o", **kw)
        return f"{T}/o_part"

    def external_backward(self, r, li, lyr, item, a, dout, j, accumulate) -> str:
        """-> the partial gradient of the attention input; the weight gradients of w_qkv, b_qkv, w_o."""
        c, T = self._names(li, j)
        CP = f"act/cp/{li}/mb{j}"
        self.grad_op(r, li, j, "cp_o_bwd", [f"{c}/att", dout, param(li, "w_o")], [f"{CP}/datt"], ("w_o",), accumulate,
                     (self._lin_flops(2),) * 2, label=f"{lyr.name} W_o")
        self.emit_cp_attention_backward(r, li, lyr, j)
        self.grad_op(r, li, j, "cp_qkv_bwd", [a, f"{CP}/dq", f"{CP}/dkv", param(li, "w_qkv")], [f"{T}/da_part"],
                     ("w_qkv", "b_qkv"), accumulate, (self._lin_flops(6),) * 2, label=f"{lyr.name} qkv")
        self._drop(r, f"{CP}/dq", f"{CP}/dkv")
        return f"{T}/da_part"

    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, Embedding):
            return super().emit_layer_forward(r, li, x, y, j)
        c, T = self._names(li, j)
        kw = {"phase": "forward", "microbatch": j}
        rows = lyr.vocab // self.tp
        self.builder.compute(r, "tp_embed_fwd", [x, param(li, "wte")], [f"{T}/e_part", f"{c}/tokens"],
                             attrs={"start": self.t * rows}, label=f"F{j} {lyr.name} lookup", **kw)
        self._reduce(r, f"{T}/e_part", f"{T}/e", j, f"{li}/e/mb{j}")
        self.builder.compute(r, "cp_embed_pos", [f"{T}/e", param(li, "wpe")], [y],
                             attrs={"positions": self.positions[self.c]}, label=f"F{j} {lyr.name} +pos", **kw)
        self._drop(r, f"{T}/e")

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, Embedding):
            return super().emit_layer_backward(r, li, dy, dx, j, accumulate)
        c, _ = self._names(li, j)
        rows = lyr.vocab // self.tp
        self.grad_op(r, li, j, "cp_tp_embed_bwd", [f"{c}/tokens", dy], [], ("wte", "wpe"), accumulate,
                     attrs={"start": self.t * rows, "rows": rows, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                     label=lyr.name)
        self._drop(r, f"{c}/tokens")


def _cp_fields(cfg: TrainConfig, c: int) -> dict:
    mesh = cfg.attention_mesh  # the mesh of compile_replicated
    return {"cp": cfg.cp, "c": c, "kind": cfg.cp_comm_type, "cp_group_of": {r: g for g in mesh.groups("cp") for r in g},
            "positions": chunk_positions(cfg.model.seq_len, cfg.cp, cfg.cp_comm_type)}


@dataclass(frozen=True)
class ContextParallel(WholeLayers):
    """The placement for tp = 1: whole layers, replicated over the context group."""

    cfg: TrainConfig | None = None  # resolved

    def replica(self, builder, t, mbs, scale, c: int = 0) -> Replica:
        return ContextParallelReplica(builder, self.cfg.model, mbs, scale,
                                      **_cp_fields(self.cfg, c))

    def positions(self, c: int) -> tuple[int, ...]:
        return chunk_positions(self.cfg.model.seq_len, self.cfg.cp, self.cfg.cp_comm_type)[c]


@dataclass(frozen=True)
class ContextTensorParallel(TensorParallel):
    """The placement for cp x tp: Megatron's tensor shards, replicated over the context group."""

    def replica(self, builder, t, mbs, scale, c: int = 0) -> Replica:
        return ContextTensorParallelReplica(builder, self.cfg.model, mbs, scale,
                                            tp=self.cfg.tp, t=t, tp_group_of=self.tp_group_of,
                                            **_cp_fields(self.cfg, c))

    def positions(self, c: int) -> tuple[int, ...]:
        return chunk_positions(self.cfg.model.seq_len, self.cfg.cp, self.cfg.cp_comm_type)[c]


def compile_context_parallel(cfg: TrainConfig) -> Compiled:
    """Context parallelism on cp ranks (times any dp, tp and pp degrees given). cp = 1 runs the same
    blockwise kernels on a ring of one: FlashAttention-style attention that never stores s x s."""
    cfg = cfg.resolved()
    if hasattr(cfg.model, "build_layers"):
        raise ParasimError(f"context parallelism here splits dense GPT blocks; the mixture-of-experts model "
                           f"{cfg.model!r} is not supported with cp > 1")
    if cfg.tp > 1:
        check_tensor_parallel(cfg, sp=False)
        placement = ContextTensorParallel(cfg)
    else:
        placement = ContextParallel(cfg.model, cfg)
    compiled = compile_replicated(cfg, placement)
    compiled.notes.update(cp=cfg.cp, cp_comm_type=cfg.cp_comm_type)
    return compiled
