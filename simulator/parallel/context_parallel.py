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
The lane is lane.ShardedLane (one class for every tp x sp x cp); this module holds the placements.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParasimError
from .config import TrainConfig
from .cp_split import chunk_positions
from .lane import ShardedLane
from .replicated import Compiled, WholeLayers, compile_replicated
from .tensor_parallel import TensorParallel, check_tensor_parallel


def _cp_fields(cfg: TrainConfig, c: int) -> dict:
    mesh = cfg.attention_mesh  # the mesh of compile_replicated
    return {"cp": cfg.cp, "c": c, "kind": cfg.cp_comm_type, "cp_group_of": {r: g for g in mesh.groups("cp") for r in g},
            "positions": chunk_positions(cfg.model.seq_len, cfg.cp, cfg.cp_comm_type), "cp_attention": True}


@dataclass(frozen=True)
class ContextParallel(WholeLayers):
    """The placement for tp = 1: whole layers, replicated over the context group."""

    cfg: TrainConfig | None = None  # resolved

    def replica(self, builder, t, mbs, scale, c: int = 0) -> ShardedLane:
        return ShardedLane(builder, self.cfg.model, mbs, scale, **_cp_fields(self.cfg, c))

    def positions(self, c: int) -> tuple[int, ...]:
        return chunk_positions(self.cfg.model.seq_len, self.cfg.cp, self.cfg.cp_comm_type)[c]


@dataclass(frozen=True)
class ContextTensorParallel(TensorParallel):
    """The placement for cp x tp: Megatron's tensor shards, replicated over the context group."""

    def replica(self, builder, t, mbs, scale, c: int = 0) -> ShardedLane:
        return ShardedLane(builder, self.cfg.model, mbs, scale, tp=self.cfg.tp, t=t, tp_group_of=self.tp_group_of,
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
