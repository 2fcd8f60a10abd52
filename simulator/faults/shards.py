"""Where each piece of the training state lives: the layout record of a distributed checkpoint.

The training state is every parameter `param/{layer}/{name}`, its optimizer state
`opt/{layer}/{name}/{m|v}` (same shape as the parameter) and the step counter `opt/step`.
For a compiled strategy, each rank holds some of these tensors as shards of the global tensor.
A shard is one of:

    box   an n-d block: global[a0:b0, a1:b1, ...] (whole tensors: replicated strategies; a
          `Compiled.notes["layouts"]` Layout gives the block of a rank)
    flat  a range of the flattened tensor: ravel(global)[a:b] (ZeRO: rank i of the data-parallel
          group holds np.array_split(ravel(global), N_d)[i]; Rajbhandari et al. 2020 Sec. 5)
    index the elements ravel(global)[index] in the shard's shape (tensor parallelism: Megatron's
          W_qkv keeps the columns of its heads in each of q, k and v, which no box describes;
          the index is found by sharding arange(size) with the strategy's own `shard_param`;
          ZeRO on a hybrid run holds a flat piece of a tensor-parallel slice: the index is then
          np.array_split(ravel(that slice of arange(size)), N)[i] over the rank's ZeRO group)

This is MindSpore's "strategy file" idea (MindSpore docs, "Distributed Checkpoint Transformation":
a checkpoint records each parameter's layout so `mindspore.transform_checkpoints` can re-cut it for
another device count and strategy), kept as
JSON: per tensor its global shape and, per rank, which block it holds. Resharding is then
`global = assemble(shards)` and `shard = cut(global, target block)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..models import GPTConfig, MLPConfig
from ..parallel.config import TrainConfig
from ..parallel.experts import MoEGPTConfig
from ..parallel.layer_kernels import layer_of, optimizer_state_names
from ..parallel.replicated import Compiled, make_optimizer
from ..parallel.zero import own

OWN = own("")  # the suffix of a ZeRO-3 parameter shard's name (zero.own)
MODEL_KINDS = {"MLPConfig": MLPConfig, "GPTConfig": GPTConfig, "MoEGPTConfig": MoEGPTConfig}


@dataclass(frozen=True)
class CheckpointShard:
    """Rank `rank` holds tensor `name` as `box` ((start, stop) per dim) or `flat` (start, stop)."""

    name: str
    rank: int
    box: tuple[tuple[int, int], ...] | None = None
    flat: tuple[int, int] | None = None
    index: tuple[int, ...] | None = None  # flat global positions, in the shard's element order
    shape: tuple[int, ...] | None = None  # the shard's shape (index shards)
    local: str | None = None  # the rank's own name for it when not `name` (ZeRO-3 `.../own`); not saved

    @property
    def key(self) -> str:
        """The name under which the rank holds this shard."""
        return self.local or self.name

    def __post_init__(self):
        if sum(x is not None for x in (self.box, self.flat, self.index)) != 1:
            raise ParasimError(f"shard of {self.name} on rank {self.rank} needs exactly one of box, flat or index")

    def positions(self, global_shape) -> np.ndarray:
        """Flat global positions of this shard's elements, in its order."""
        if self.index is not None:
            return np.asarray(self.index, dtype=np.int64)
        if self.flat is not None:
            return np.arange(self.flat[0], self.flat[1])
        ids = np.arange(int(np.prod(global_shape, dtype=np.int64))).reshape(global_shape)
        return np.ravel(ids[tuple(slice(a, b) for a, b in self.box)])

    def cut(self, value: np.ndarray) -> np.ndarray:
        """This shard of the global `value` (a copy)."""
        if self.box is not None:
            return np.array(value[tuple(slice(a, b) for a, b in self.box)])
        if self.index is not None:
            return np.ravel(value)[np.asarray(self.index)].reshape(self.shape)
        return np.array(np.ravel(value)[self.flat[0]:self.flat[1]])

    def to_json(self) -> dict:
        if self.box is not None:
            return {"rank": self.rank, "box": [list(x) for x in self.box]}
        if self.index is not None:
            return {"rank": self.rank, "index": list(self.index), "shape": list(self.shape)}
        return {"rank": self.rank, "flat": list(self.flat)}

    @classmethod
    def from_json(cls, name: str, d: dict) -> "CheckpointShard":
        if "box" in d:
            return cls(name, int(d["rank"]), box=tuple((int(a), int(b)) for a, b in d["box"]))
        if "index" in d:
            return cls(name, int(d["rank"]), index=tuple(int(i) for i in d["index"]),
                       shape=tuple(int(i) for i in d["shape"]))
        return cls(name, int(d["rank"]), flat=(int(d["flat"][0]), int(d["flat"][1])))

    def __repr__(self) -> str:
        where = (", ".join(f"{a}:{b}" for a, b in self.box) if self.box is not None
                 else f"flat {self.flat[0]}:{self.flat[1]}" if self.flat is not None
                 else f"{len(self.index)} indexed elements")
        return f"{self.name}[{where}]@{self.rank}"


def state_shapes(cfg: TrainConfig) -> dict[str, tuple[int, ...]]:
    """Global shape of every state tensor of the model and optimizer."""
    cfg = cfg.resolved()
    states = optimizer_state_names(make_optimizer(cfg))
    out: dict[str, tuple[int, ...]] = {"opt/step": ()}
    for li in range(cfg.n_layers):
        for n, shape in layer_of(cfg.model, li).param_shapes().items():
            out[f"param/{li}/{n}"] = tuple(int(s) for s in shape)
            for s in states:
                out[f"opt/{li}/{n}/{s}"] = tuple(int(x) for x in shape)
    return out


def zero_pieces(compiled: Compiled, name: str) -> bool:
    """Whether ranks hold `name` in ZeRO's flat pieces (hybrid + ZeRO: the optimizer state, and at
    stage 3 the parameters); indexed shards of it are then pieces of tensor-parallel / expert slices."""
    zero = compiled.notes.get("zero") if compiled.notes.get("zero_groups") is not None else 0
    return bool(zero) and (name.startswith("opt/") and name != "opt/step" or zero == 3 and name.startswith("param/"))


def shard_layouts(compiled: Compiled) -> dict[str, list[CheckpointShard]]:
    """name -> the shards of it every rank holds at the start of a step (from `compiled.initial`)."""
    shapes = state_shapes(compiled.config)
    holders: dict[str, list[int]] = {}
    local: dict[tuple[str, int], str] = {}  # (name, rank) -> the rank's key when it differs
    for r in sorted(compiled.initial):
        for key in compiled.initial[r]:
            name = key.removesuffix(OWN) if key.endswith(OWN) else key  # ZeRO-3 parameter shards
            if name in shapes:
                holders.setdefault(name, []).append(r)
                if key != name:
                    local[(name, r)] = key
    missing = [n for n in shapes if n not in holders]
    if missing:
        raise ParasimError(f"strategy {compiled.config.strategy}: no device holds {missing[0]} "
                           f"({len(missing)} state tensors unplaced)")
    groups = compiled.mesh.groups("dp") if compiled.mesh is not None else [tuple(sorted(compiled.initial))]
    out: dict[str, list[CheckpointShard]] = {}
    for name, ranks in holders.items():
        shards = [_shard_of(compiled, name, shapes[name], r, local.get((name, r))) for r in ranks]
        flat_holders = [r for r, shard in zip(ranks, shards) if shard is None]
        shards = [shard for shard in shards if shard is not None] + _flat_split(compiled, name, shapes[name],
                                                                               flat_holders, _zero_groups(compiled, name, flat_holders) or groups, local)
        out[name] = sorted(shards, key=lambda s: s.rank)
    return out


def _shard_of(compiled: Compiled, name: str, shape: tuple[int, ...], r: int,
              key: str | None = None) -> CheckpointShard | None:
    """The shard of `name` rank r holds (under `key`, if not `name`), or None for a piece of an
    even flat split (ZeRO)."""
    local = tuple(np.shape(compiled.initial[r][key or name]))
    size = int(np.prod(shape, dtype=np.int64))
    explicit = compiled.notes.get("layouts", {}) or {}
    if local == shape:
        return CheckpointShard(name, r, box=tuple((0, s) for s in shape), local=key)
    if name in explicit:  # a block (experts' rows), as is or in ZeRO's flat pieces
        sl = explicit[name].block_slices(r, shape)
        box = CheckpointShard(name, r, box=tuple((s.start, s.stop) for s in sl), local=key)
        idx, rule = np.arange(size).reshape(shape)[sl], "the strategy's Layout"
    elif compiled.config.tp > 1 and compiled.mesh is not None and name != "opt/step":
        box, idx, rule = None, _tensor_parallel_index(compiled, name, shape, r), "the tensor-parallel rule"
    else:
        box = idx = None
    if idx is not None:
        zero = compiled.notes.get("zero_groups")
        if idx.shape != local and zero is not None and len(local) == 1:  # ZeRO's flat piece of the slice
            group = zero.of(r, int(name.split("/")[1]), name.split("/")[2])[0]
            idx = np.array_split(np.ravel(idx), len(group))[group.index(r)]
        elif box is not None and idx.shape == local:
            return box
        if idx.shape != local:
            raise ParasimError(f"cannot record the layout of {name}: rank {r} holds {local}, {rule} gives {idx.shape}")
        return CheckpointShard(name, r, index=tuple(int(i) for i in np.ravel(idx)), shape=idx.shape, local=key)
    if len(local) == 1 and local[0] == size:
        return CheckpointShard(name, r, flat=(0, size), local=key)
    if len(local) == 1:
        return None
    raise ParasimError(f"cannot record the layout of {name}: rank {r} holds shape {local} "
                       f"of global {shape} and the strategy gives no Layout for it")


def _zero_groups(compiled: Compiled, name: str, ranks: list[int]) -> list[tuple[int, ...]]:
    """The ZeRO groups (data x context, or expert-data) a hybrid run splits `name` over; [] otherwise."""
    zero = compiled.notes.get("zero_groups")
    if zero is None or not ranks or name == "opt/step":
        return []
    li, n = int(name.split("/")[1]), name.split("/")[2]
    return sorted({zero.of(r, li, n)[0] for r in ranks})


def _flat_split(compiled: Compiled, name: str, shape, flat_holders: list[int], groups,
                local: dict) -> list[CheckpointShard]:
    """The holders of flat pieces, per data-parallel group: np.array_split's even split, checked."""
    size = int(np.prod(shape, dtype=np.int64))
    shards = []
    for g in groups:
        members = [r for r in g if r in flat_holders]
        if not members:
            continue
        bounds = np.cumsum([0] + [len(p) for p in np.array_split(np.empty(size), len(members))])
        for i, r in enumerate(members):
            a, b = int(bounds[i]), int(bounds[i + 1])
            key = local.get((name, r))
            if np.shape(compiled.initial[r][key or name]) != (b - a,):
                raise ParasimError(f"cannot record the layout of {name}: rank {r} holds "
                                   f"{np.shape(compiled.initial[r][key or name])} elements, an even split of "
                                   f"{size} over {len(members)} ranks gives {b - a}")
            shards.append(CheckpointShard(name, r, flat=(a, b), local=key))
    return shards


def _tensor_parallel_index(compiled: Compiled, name: str, shape, rank: int) -> np.ndarray:
    """Shard arange(size) exactly as the tensor-parallel strategy shards the parameter."""
    from ..parallel.tensor_parallel import shard_param

    li, pname = int(name.split("/")[1]), name.split("/")[2]
    ids = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    return shard_param(layer_of(compiled.config.model, li), pname, ids, compiled.config.tp,
                       compiled.mesh.coord(rank, "tp"))


def describe_layout(shape: tuple[int, ...], shards: list[CheckpointShard], zero_pieces: bool = False) -> str:
    """One line: 'replicated on ranks [0, 1]', 'flat split over ranks [0, 1, 2]' or the blocks;
    zero_pieces: the indexed shards are ZeRO's flat pieces of tensor-parallel slices."""
    ranks = [s.rank for s in shards]
    if all(s.box == tuple((0, n) for n in shape) for s in shards):
        return f"replicated on ranks {ranks}"
    if all(s.flat is not None for s in shards):
        return f"flat split over ranks {ranks}"
    if any(s.index is not None for s in shards):
        if zero_pieces:
            return f"ZeRO flat pieces of tensor-parallel or expert slices (indexed) on ranks {ranks}"
        return f"tensor-parallel shards (indexed) on ranks {ranks}"
    return "blocks " + ", ".join(repr(s) for s in shards)


def assemble(name: str, shape: tuple[int, ...], pieces: list[tuple[CheckpointShard, np.ndarray]]) -> np.ndarray:
    """The global tensor from its shards; replicas must agree exactly (bit for bit)."""
    dtype = np.result_type(*(p for _, p in pieces)) if pieces else np.float64
    size = int(np.prod(shape, dtype=np.int64))
    out = np.zeros(size, dtype=dtype)
    seen = np.zeros(size, dtype=bool)
    for shard, block in pieces:
        pos = shard.positions(shape)
        values = np.ravel(np.asarray(block))
        if values.size != pos.size:
            raise ParasimError(f"checkpoint shard of {name} on rank {shard.rank} has {values.size} elements, "
                               f"its layout says {pos.size}")
        known = seen[pos]
        if np.any(known & (out[pos] != values)):
            raise ParasimError(f"checkpoint shards of {name} disagree: rank {shard.rank}'s copy differs "
                               f"from another rank's copy of the same elements")
        out[pos] = values
        seen[pos] = True
    if not seen.all():
        raise ParasimError(f"checkpoint shards of {name} cover {int(seen.sum())} of {seen.size} elements")
    return out.reshape(shape)


# ---- the training configuration as JSON --------------------------------------------------------
def config_to_json(cfg: TrainConfig) -> dict:
    d = dataclasses.asdict(cfg)
    d["model"] = {"kind": type(cfg.model).__name__, **dataclasses.asdict(cfg.model)}
    return d


def config_from_json(d: dict) -> TrainConfig:
    d = dict(d)
    model = dict(d.pop("model"))
    kind = model.pop("kind", None)
    if kind not in MODEL_KINDS:
        raise ParasimError(f"unknown model kind {kind!r} in the strategy file; known: {', '.join(MODEL_KINDS)}")
    # older files name some settings by their older spellings (zero, cp_kind, batch_size): mapped by the vocabulary
    known = {f.name for f in dataclasses.fields(TrainConfig)} | set(TrainConfig.spellings)
    fields = {f.name for f in dataclasses.fields(MODEL_KINDS[kind])}
    if set(model) - fields:
        raise ParasimError(f"the strategy file's {kind} has unknown fields {sorted(set(model) - fields)}")
    return TrainConfig(MODEL_KINDS[kind](**model), **{k: v for k, v in d.items() if k in known})
