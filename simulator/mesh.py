"""DeviceMesh: devices arranged on named axes.

A mesh of shape (2, 4) with axes ("dp", "tp") lays its devices out row-major, last axis fastest
(the MindSpore device matrix and JAX `Mesh` convention):

    coords (i, j)  <->  position i * 4 + j  <->  rank = device_ids[position]

          tp=0 tp=1 tp=2 tp=3
    dp=0    0    1    2    3
    dp=1    4    5    6    7

Vocabulary used throughout parasim:
- *rank* is a global device id (an entry of `device_ids`, default 0..N-1). Every method takes and
  returns ranks, so a sub-mesh (one pipeline stage, say) keeps the ids of the real devices.
- *coords* are a rank's indices along the axes, in axis order.
- `groups(axes)` are the communicator groups of a collective "along" those axes: the ranks that
  differ only in their coordinates on the given axes (e.g. `groups("tp")` -> (0,1,2,3), (4,5,6,7)).

Source: MindSpore `tensor_layout/device_matrix.cc` (rank list over a device matrix, row-major);
JAX `jax.sharding.Mesh` (named axes, immutable).
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from math import prod
from typing import Iterable, Mapping, Sequence

from simulator.errors import ParasimError
from simulator.limits import MAX_MESH_DEVICES

AxesArg = str | Iterable[str]
# Megatron-LM's rank order "tp-cp-ep-dp-pp" (tensor fastest), as mesh axes slowest first
MEGATRON_ORDER = ("pp", "dp", "ep", "cp", "tp")


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """How far apart consecutive coordinates of each axis are, row-major (last axis: 1)."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return tuple(reversed(out))


def row_major_rank(shape: Sequence[int], coords: Sequence[int], names: Sequence[str] | None = None) -> int:
    """The row-major position of `coords` on a grid of `shape`, last axis fastest (the rank on a
    mesh of default device ids); refuses a coordinate outside its axis."""
    pos = 0
    for i, (c, size) in enumerate(zip(coords, shape)):
        if not 0 <= c < size:
            name = names[i] if names is not None else i
            raise ParasimError(f"coordinate {c} on axis {name!r} is outside 0..{size - 1}")
        pos = pos * size + c
    return pos




def check_expert_layout(tp: int, cp: int, dp: int, ep: int, etp: int) -> None:
    """Megatron-Core's rule for the expert layers' grid (megatron/core/parallel_state.py,
    initialize_model_parallel: the world size must be divisible by etp x ep x pp): per stage,
    etp x ep divides the t x c x d ranks. With etp = tp (the default) that is: ep divides d x c."""
    per_stage = tp * cp * dp
    if per_stage % (etp * ep):
        hint = (f"; with etp = tp = {tp} (the default) ep must divide dp x cp = {dp * cp}: give a smaller "
                f"expert-tensor-parallel size (Megatron --expert-tensor-parallel-size, MoE parallel folding)"
                if etp == tp and tp > 1 else "")
        raise ParasimError(f"the expert layers need etp x ep = {etp} x {ep} = {etp * ep} to divide the tp x cp x dp "
                           f"= {tp} x {cp} x {dp} = {per_stage} ranks of a pipeline stage (Megatron-Core: world "
                           f"size divisible by etp x ep x pp){hint}")


@dataclass(frozen=True, init=False)
class DeviceMesh:
    """Named axes with sizes and the device ids laid on them row-major (last axis fastest)."""

    axis_names: tuple[str, ...]
    shape: tuple[int, ...]
    device_ids: tuple[int, ...]
    _positions: dict = field(compare=False, repr=False)  # rank -> row-major position (a cache)

    def __init__(self, axes: Mapping[str, int] | Sequence[tuple[str, int]],
                 device_ids: Sequence[int] | None = None):
        items = list(axes.items()) if isinstance(axes, Mapping) else [tuple(a) for a in axes]
        names = tuple(str(name) for name, _ in items)
        shape = tuple(_as_size(name, size) for name, size in items)
        _validate(names, shape)
        n = prod(shape)
        if n > MAX_MESH_DEVICES:
            raise ParasimError(f"mesh shape {shape} has {n} devices, more than the {MAX_MESH_DEVICES:,} a mesh "
                               f"enumerates (each device id is listed)")
        ids = tuple(range(n)) if device_ids is None else tuple(int(d) for d in device_ids)
        if len(ids) != n:
            raise ParasimError(f"mesh shape {shape} has {n} positions but {len(ids)} device ids "
                               f"were given (the product of the axis sizes must equal the count)")
        if len(set(ids)) != len(ids):
            dup = sorted({d for d in ids if ids.count(d) > 1})
            raise ParasimError(f"device ids must be distinct; repeated: {dup}")
        if any(d < 0 for d in ids):
            raise ParasimError(f"device ids must be >= 0; got {min(ids)}")
        object.__setattr__(self, "axis_names", names)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "device_ids", ids)
        object.__setattr__(self, "_positions", {d: i for i, d in enumerate(ids)})

    @classmethod
    def megatron(cls, tp: int = 1, cp: int = 1, ep: int = 1, dp: int = 1, pp: int = 1) -> "DeviceMesh":
        """The 5-D training mesh in Megatron-LM's rank order "tp-cp-ep-dp-pp" (tensor fastest, then
        context, then expert, then data, then pipeline: megatron/core/parallel_state.py,
        initialize_model_parallel(order="tp-cp-ep-dp-pp")), so tensor groups are neighbouring ranks
        that share a node's fast links. Axes print slowest first:

            DeviceMesh.megatron(tp=2, cp=2, dp=2, pp=2) -> Mesh(pp=2, dp=2, ep=1, cp=2, tp=2)"""
        sizes = {"pp": pp, "dp": dp, "ep": ep, "cp": cp, "tp": tp}
        return cls({a: sizes[a] for a in MEGATRON_ORDER})

    @classmethod
    def megatron_experts(cls, tp: int = 1, cp: int = 1, ep: int = 1, dp: int = 1, pp: int = 1,
                         etp: int | None = None) -> "DeviceMesh":
        """The expert layers' view of the same devices as `megatron(tp, cp, 1, dp, pp)`: the t c d
        ranks of a stage are cut into `etp` expert-tensor ranks (fastest; default tp), `ep`
        expert-parallel ranks and edp = t c d / (etp ep) expert-data-parallel ranks, as Megatron-LM's
        expert rank generator does (megatron/core/parallel_state.py: RankGenerator(tp=expert_tensor_
        parallel_size, ep, dp=expert data-parallel size, pp, cp=1, order "tp-cp-ep-dp-pp")):

            DeviceMesh.megatron_experts(tp=2, cp=2, ep=2, dp=2, pp=1) -> Mesh(pp=1, edp=2, ep=2, tp=2)
            groups("ep") -> (0, 2), (1, 3), (4, 6), (5, 7): each a block of the dp x cp ranks
            DeviceMesh.megatron_experts(tp=2, dp=4, ep=8, etp=1) -> Mesh(pp=1, edp=1, ep=8, tp=1): the
            experts' group folds the tensor- and data-parallel ranks (MoE parallel folding)"""
        etp = tp if etp is None else etp
        check_expert_layout(tp, cp, dp, ep, etp)
        return cls({"pp": pp, "edp": tp * cp * dp // (etp * ep), "ep": ep, "tp": etp})

    @classmethod
    def from_shape(cls, shape: Sequence[int], axis_names: Sequence[str],
                   device_ids: Sequence[int] | None = None) -> "DeviceMesh":
        """DeviceMesh.from_shape((2, 4), ("dp", "tp")) == DeviceMesh({"dp": 2, "tp": 4})."""
        if len(shape) != len(axis_names):
            raise ParasimError(f"mesh shape {tuple(shape)} has {len(shape)} axes but "
                               f"{len(axis_names)} names were given: {tuple(axis_names)}")
        return cls(list(zip(axis_names, shape)), device_ids)

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of devices."""
        return len(self.device_ids)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def axes(self) -> dict[str, int]:
        """{name: size} in axis order (a fresh dict)."""
        return dict(zip(self.axis_names, self.shape))

    @property
    def ranks(self) -> tuple[int, ...]:
        """The device ids in row-major order (same as `device_ids`)."""
        return self.device_ids

    def axis_size(self, axis: str) -> int:
        return self.shape[self.axis_index(axis)]

    def axis_index(self, axis: str) -> int:
        """Position of a named axis; ParasimError listing the known names if unknown."""
        try:
            return self.axis_names.index(axis)
        except ValueError:
            raise ParasimError(f"unknown mesh axis {axis!r}; this mesh has axes "
                               f"{list(self.axis_names)}") from None

    def normalize_axes(self, axes: AxesArg) -> tuple[str, ...]:
        """A name or an iterable of names -> tuple in mesh order, checked and de-duplicated."""
        names = (axes,) if isinstance(axes, str) else tuple(axes)
        for a in names:
            self.axis_index(a)
        if len(set(names)) != len(names):
            raise ParasimError(f"axis listed twice in {names}")
        return tuple(a for a in self.axis_names if a in names)

    # ---- rank <-> coordinates ------------------------------------------------------------------
    def coords(self, rank: int) -> tuple[int, ...]:
        """Coordinates of a rank, row-major with the last axis fastest."""
        pos = self._position(rank)
        out = []
        for size in reversed(self.shape):
            out.append(pos % size)
            pos //= size
        return tuple(reversed(out))

    def rank_at(self, coords: Sequence[int] | Mapping[str, int]) -> int:
        """The rank at given coordinates (a sequence in axis order, or {axis: index})."""
        if isinstance(coords, Mapping):
            for a in coords:
                self.axis_index(a)
            coords = [coords[a] for a in self.axis_names]
        coords = tuple(int(c) for c in coords)
        if len(coords) != self.ndim:
            raise ParasimError(f"coordinates {coords} have {len(coords)} entries but the mesh "
                               f"{self!r} has {self.ndim} axes")
        return self.device_ids[row_major_rank(self.shape, coords, self.axis_names)]

    def coord(self, rank: int, axis: str) -> int:
        """Index of `rank` along one named axis."""
        return self.coords(rank)[self.axis_index(axis)]

    # ---- communicator groups -------------------------------------------------------------------
    def groups(self, axes: AxesArg) -> list[tuple[int, ...]]:
        """Groups of ranks that differ only along `axes` (a name or several names).

        Within a group the ranks are ordered by their coordinates on `axes` (row-major, mesh
        order), which is ascending for default device ids; the list is sorted. `groups(())`
        gives singletons, `groups(all axes)` one group of every rank.
        """
        along = self.normalize_axes(axes)
        inside = [i for i, a in enumerate(self.axis_names) if a in along]
        outside = [i for i, a in enumerate(self.axis_names) if a not in along]
        result = []
        for fixed in itertools.product(*(range(self.shape[i]) for i in outside)):
            group = []
            for moving in itertools.product(*(range(self.shape[i]) for i in inside)):
                c = [0] * self.ndim
                for i, v in zip(outside, fixed):
                    c[i] = v
                for i, v in zip(inside, moving):
                    c[i] = v
                group.append(self.rank_at(c))
            result.append(tuple(group))
        return sorted(result)

    def group_of(self, rank: int, axes: AxesArg) -> tuple[int, ...]:
        """The group of `groups(axes)` that contains `rank`."""
        self._position(rank)
        return next(g for g in self.groups(axes) if rank in g)

    # ---- sub-meshes ------------------------------------------------------------------------------
    def submesh(self, **index: int | slice) -> "DeviceMesh":
        """Fix or slice axes: `submesh(pp=1)` drops axis pp (keeps the ranks with pp == 1);
        `submesh(dp=slice(0, 1))` keeps axis dp with size 1. Device ids follow the parent."""
        for a in index:
            self.axis_index(a)
        ranges = []
        for name, size in zip(self.axis_names, self.shape):
            sel = index.get(name, slice(None))
            if isinstance(sel, slice):
                picked = list(range(size))[sel]
                if not picked:
                    raise ParasimError(f"slice {sel} of axis {name!r} (size {size}) is empty")
            else:
                sel = int(sel)
                if not -size <= sel < size:
                    raise ParasimError(f"index {sel} on axis {name!r} is outside 0..{size - 1}")
                picked = sel % size
            ranges.append(picked)
        kept = [(n, len(r)) for n, r in zip(self.axis_names, ranges) if isinstance(r, list)]
        choices = [r if isinstance(r, list) else [r] for r in ranges]
        ids = [self.rank_at(c) for c in itertools.product(*choices)]
        return DeviceMesh(kept, ids)

    def __getitem__(self, index: Mapping[str, int | slice]) -> "DeviceMesh":
        """mesh[{"pp": 0}] is mesh.submesh(pp=0)."""
        return self.submesh(**dict(index))

    def __contains__(self, rank: object) -> bool:
        return rank in self._positions

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        axes = ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.shape))
        if self.device_ids != tuple(range(self.size)):
            axes += f", devices={list(self.device_ids)}"
        return f"Mesh({axes})"

    def _position(self, rank: int) -> int:
        try:
            return self._positions[rank]
        except (KeyError, TypeError):
            raise ParasimError(f"rank {rank} is not in {self!r} (devices "
                               f"{_span(self.device_ids)})") from None


def _validate(names: tuple[str, ...], shape: tuple) -> None:
    for name in names:
        if not name:
            raise ParasimError("mesh axis names must be non-empty strings")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ParasimError(f"mesh axis names must be distinct; repeated: {dup}")
    for name, size in zip(names, shape):
        if size < 1:
            raise ParasimError(f"mesh axis {name!r} has size {size}; sizes must be >= 1")


def _as_size(name: str, size: object) -> int:
    try:
        if isinstance(size, bool):
            raise TypeError
        return operator.index(size)
    except TypeError:
        raise ParasimError(f"mesh axis {name!r} has size {size!r}; sizes must be integers") from None


def _span(ids: tuple[int, ...]) -> str:
    if ids == tuple(range(ids[0], ids[0] + len(ids))):
        return f"{ids[0]}..{ids[-1]}"
    return str(list(ids))
