"""Megatron-style tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", Sec. 3) for the GPT.

Each transformer block runs on the n ranks of a tensor group:
- MLP: Y = GeLU(X A) B with A = [A_1 .. A_n] split by columns (fc, "column-parallel": GeLU stays
  local) and B = [B_1; ..; B_n] split by rows (proj, "row-parallel"): Z = sum_i GeLU(X A_i) B_i,
  ONE AllReduce in forward (the g operator) and one on the input gradient in backward (f).
- Attention: the q, k, v columns of heads [i a/n, (i+1) a/n) on rank i (column-parallel), the
  output projection split by rows (row-parallel): again one AllReduce forward, one backward.
- Layer norms (and the biases added after a reduction) are replicated; their gradients are
  identical on the n ranks, so they need no communication.
- Embedding: vocabulary-parallel, rank i holds rows [i V/n, (i+1) V/n) of the token table;
  a masked lookup then an AllReduce (positions are replicated and added after it; under SP the
  sum is then cut to this rank's slice of the sequence, Megatron-Core's form with learned
  positions, whose backward is an AllGather).
- LM head and loss: W_out split by vocabulary columns, so each rank has logits of V/n words;
  the cross-entropy is Megatron's vocab_parallel_cross_entropy: AllReduce(max) of the local
  maxima, then AllReduce(sum) of the local sum of exp and of the target logit.
Sequence parallelism (sequence_parallel.py, Korthikanti et al. 2022) is the `sp` flag of the same
emitter: the layer-norm regions hold T/n tokens; AllGather replaces the identity before each
column-parallel linear and ReduceScatter the AllReduce after each row-parallel one.
Zero-bubble schedules (zb-h1, zb-h2, DualPipe) split every backward kernel (bw_split.py): B keeps
the input-gradient chain with its collectives (the f AllReduce, or under SP the re-gathers and the
ReduceScatter), W computes each shard's weight gradients later with no communication.

The split is not written here: the steps of the embedding, the blocks and the LM head
(models/block_plan.py) go through block_lane.tensor_parallel (the rules above as a transform) and
block_lane's one emitter; the lane (lane.ShardedLane, one class for every tp x sp x cp) emits them and the
embedding and loss. This module holds the placement: how a parameter is cut, the degree rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..models import Embedding, GPTConfig, LMHead
from .config import TrainConfig
from .lane import ShardedLane
from .layer_kernels import layer_of
from .replicated import Compiled, compile_replicated

QKV = "qkv"  # q, k and v column blocks each cut by heads


def split_rule(layer, name: str):
    """None (replicated), an axis to cut into n equal blocks, or QKV."""
    if isinstance(layer, Embedding):
        return 0 if name == "wte" else None
    if isinstance(layer, LMHead):
        return 1 if name == "w_out" else None
    return {"w_qkv": QKV, "b_qkv": QKV, "w_o": 0, "w_fc": 1, "b_fc": 0, "w_proj": 0}.get(name)


def shard_param(layer, name: str, value: np.ndarray, n: int, i: int) -> np.ndarray:
    """Rank i's part of a full parameter.  W_qkv (h, 3h) -> (h, 3h/n): columns of its heads in q, k, v."""
    rule = split_rule(layer, name)
    if rule is None:
        return value
    if rule == QKV:
        blocks = value.reshape(value.shape[:-1] + (3, -1))  # (..., 3, h)
        return np.split(blocks, n, axis=-1)[i].reshape(value.shape[:-1] + (-1,)).copy()
    return np.split(value, n, axis=rule)[i].copy()


def join_param(layer, name: str, shards: list[np.ndarray]) -> np.ndarray:
    """Inverse of shard_param over the n ranks' parts."""
    rule = split_rule(layer, name)
    if rule is None:
        return shards[0]
    if rule == QKV:
        blocks = [s.reshape(s.shape[:-1] + (3, -1)) for s in shards]  # (..., 3, h/n)
        full = np.concatenate(blocks, axis=-1)
        return full.reshape(full.shape[:-2] + (-1,))
    return np.concatenate(shards, axis=rule)


def check_tensor_parallel(cfg: TrainConfig, sp: bool) -> None:
    """The degree must cut heads, hidden, 4*hidden and the vocabulary into equal parts (and the
    sequence, with sequence parallelism); only the GPT has layers to shard."""
    m, n = cfg.model, cfg.tp
    if not isinstance(m, GPTConfig):
        raise ParasimError(f"tensor parallelism shards transformer layers (Megatron-LM); the {m!r} model has none, "
                           "use --strategy dp or pp")
    if n > 1 and sp and hasattr(m, "build_layers"):
        raise ParasimError(f"sequence parallelism splits the layer norms and MLP of dense transformer blocks; the "
                           f"mixture-of-experts model {m!r} runs tensor parallel with --strategy hybrid (or tp)")
    sizes = {"heads": m.heads, "hidden": m.hidden, "4*hidden": 4 * m.hidden, "vocabulary": m.vocab}
    if sp:
        sizes["sequence length"] = m.seq_len
    bad = [f"{k} {v}" for k, v in sizes.items() if v % n]
    if bad:
        raise ParasimError(f"tensor-parallel degree {n} must divide " + ", ".join(f"{k} {v}" for k, v in sizes.items())
                           + f"; it does not divide {', '.join(bad)}")


@dataclass(frozen=True)
class TensorParallel:
    """The placement of layers on tp ranks (see replicated.WholeLayers for the interface)."""

    cfg: TrainConfig  # resolved
    sp: bool = False

    @property
    def tp_group_of(self) -> dict[int, tuple[int, ...]]:
        c = self.cfg
        mesh = c.attention_mesh  # the mesh of compile_replicated
        return {r: g for g in mesh.groups("tp") for r in g}

    def replica(self, builder, t, mbs, scale, c: int = 0) -> ShardedLane:
        return ShardedLane(builder, self.cfg.model, mbs, scale, tp=self.cfg.tp, t=t, sp=self.sp,
                           tp_group_of=self.tp_group_of)

    def positions(self, c: int) -> None:
        return None

    def shapes(self, li: int) -> dict:
        lyr = layer_of(self.cfg.model, li)
        return {n: shard_param(lyr, n, np.empty(s, dtype=np.int8), self.cfg.tp, 0).shape
                for n, s in lyr.param_shapes().items()}

    def shard(self, li: int, name: str, value: np.ndarray, t: int, rank: int = 0) -> np.ndarray:
        return shard_param(layer_of(self.cfg.model, li), name, value, self.cfg.tp, t)

    def gather(self, homes: dict) -> Callable:
        """homes[(layer, name)] = [(rank, tensor) per tensor rank]: fetch and reassemble."""
        model = self.cfg.model

        def read(runtime) -> list[dict]:
            wanted: dict[int, list[str]] = {}
            for places in homes.values():
                for rank, tensor in places:
                    wanted.setdefault(rank, []).append(tensor)
            got = {rank: runtime.fetch(rank, names) for rank, names in wanted.items()}
            out: list[dict] = [dict() for _ in range(1 + max(li for li, _ in homes))]
            for (li, n), places in homes.items():
                out[li][n] = join_param(layer_of(model, li), n, [got[r][t] for r, t in places])
            return out

        return read


def compile_tensor_parallel(cfg: TrainConfig, sp: bool = False) -> Compiled:
    """Tensor parallelism on tp ranks (times any dp and pp degrees given: see hybrid.py)."""
    cfg = cfg.resolved()
    if cfg.tp == 1:  # nothing to shard: whole layers (any model), as dp x pp
        return compile_replicated(cfg)
    check_tensor_parallel(cfg, sp)
    return compile_replicated(cfg, TensorParallel(cfg, sp))


def compile_tp(cfg: TrainConfig) -> Compiled:
    return compile_tensor_parallel(replace(cfg, strategy="tp"))
