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
from ..models import Embedding
from . import cp_kernels  # noqa: F401 -- registers the cp_* kernels this compiler emits
from .block_lane import emit_backward, emit_forward, lane_items
from .bw_split import SplitBackward
from .config import TrainConfig
from .cp_attention import ContextAttention
from .cp_split import chunk_positions
from .emit import Replica, grad, param
from .layer_kernels import layer_of
from .replicated import Compiled, WholeLayers, compile_replicated
from .tensor_parallel import TensorParallel, TensorParallelReplica, check_tensor_parallel


@dataclass
class ContextParallelReplica(ContextAttention, SplitBackward, Replica):
    """The lane of context rank `c` (tp = 1): the same schedule as the other cp lanes of its stages.
    Its blocks are their steps with the attention run over the context group
    (block_lane.context_parallel); the embedding and head run on this rank's tokens."""

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // self.cp

    def block_items(self, steps: tuple) -> tuple:
        return lane_items(steps, 1, False, True)

    def emit_layer_forward(self, r, li, x, y, j):
        b, lyr = self.builder, layer_of(self.config, li)
        kw = {"phase": "forward", "microbatch": j}
        c = f"act/cache/{li}/mb{j}"
        if isinstance(lyr, Embedding):
            b.compute(r, "cp_embed_fwd", [x, param(li, "wte"), param(li, "wpe")], [y, c],
                      attrs={"positions": self.positions[self.c]}, label=f"F{j} {lyr.name}", **kw)
        else:  # a transformer block or the LM head: its steps on this rank's tokens
            emit_forward(self, r, li, lyr, self.block_items(lyr.steps), {"x": x}, {"y": y}, j)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        G = lambda *ns: [grad(li, n) for n in ns]  # noqa: E731
        acc = lambda *ns: G(*ns) if accumulate else []  # noqa: E731
        kw = {"phase": "backward", "microbatch": j}
        c = f"act/cache/{li}/mb{j}"
        if not isinstance(lyr, Embedding):  # a transformer block or the LM head
            return emit_backward(self, r, li, lyr, self.block_items(lyr.steps), {"y": dy}, {"x": dx}, j, accumulate)
        b.compute(r, "cp_embed_bwd", [c, dy, *acc("wte", "wpe")], G("wte", "wpe"),
                  attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                  label=f"B{j} {lyr.name}", **kw)
        b.free(r, c)

    # ---- zero-bubble schedules: B (input gradients, the ring's dK/dV) now, W (weights) later --------
    def emit_layer_backward_input(self, r, li, dy, dx, j):
        b, lyr = self.builder, layer_of(self.config, li)
        if not isinstance(lyr, Embedding):
            return self.split_backward_input(r, li, dy, dx, j)
        # the embedding has no input gradient: keep dy for W
        b.compute(r, "copy", [dy], [f"act/wcache/{li}/mb{j}"], label=f"B{j} {lyr.name} keep dy", phase="backward",
                  microbatch=j)

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        if not isinstance(lyr, Embedding):
            return self.split_backward_weight(r, li, j, accumulate)
        c, w = f"act/cache/{li}/mb{j}", f"act/wcache/{li}/mb{j}"
        G = [grad(li, n) for n in ("wte", "wpe")]
        b.compute(r, "cp_embed_bwd", [c, w, *(G if accumulate else [])], G,
                  attrs={"vocab": lyr.vocab, "seq": lyr.seq_len, "positions": self.positions[self.c]},
                  label=f"W{j} {lyr.name}", phase="wgrad", microbatch=j)
        b.free(r, c, w)


@dataclass
class ContextTensorParallelReplica(ContextAttention, TensorParallelReplica):
    """A (context rank, tensor rank) lane: Megatron's tensor-parallel block whose attention runs
    over the context group on this tensor rank's heads; every tensor-group collective moves the
    T/cp tokens of this rank."""

    def _full_nbytes(self, width: int) -> int:
        return super()._full_nbytes(width) // self.cp

    def activation_nbytes(self, li: int) -> int:
        return super().activation_nbytes(li) // self.cp

    cp_attention = True

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
