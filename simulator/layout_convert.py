"""Other notations for a tensor layout, and the conversions `Layout` uses.

Three notations describe where the pieces of a tensor live; `Layout` converts between all of them.

1. MindSpore strategy and tensor map (source: MindSpore docs "operator_parallel" and "Layout";
   `tensor_layout/device_matrix.cc`, `operator_info.cc`).
   A strategy `(2, 4)` cuts dim 0 in 2 and dim 1 in 4. The *device matrix* lists the cuts; when
   its product P is smaller than the device count D, the repeated-calculation factor r = D / P is
   appended as the rightmost (fastest) dimension, so neighbouring ranks hold identical copies.
   A *tensor map* gives, per tensor dimension, the device-matrix dimension that splits it,
   numbered from the RIGHT: entry m means device-matrix dimension `len - 1 - m`; -1 = not split;
   a tuple of entries = split by several (major to minor).
   parasim names device-matrix dimensions "d0", "d1", ... from the left and the appended
   repeated-calculation dimension "rep".
2. JAX `PartitionSpec` (source: jax.sharding docs): one entry per tensor dimension: None, a mesh
   axis name, or a tuple of names (major to minor); pending sums are listed as `unreduced` axes.
3. PyTorch DTensor placements (source: torch.distributed.tensor docs): one placement per MESH
   axis: `Shard(d)` (this axis splits tensor dim d), `Replicate()`, `Partial()` (pending sum).
   Several axes sharding one dim shard it in mesh-axis order (the first is the major one).

Everything here is pure: functions take and return tuples, never a `Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from simulator.errors import ParasimError
from simulator.mesh import DeviceMesh

REPEAT_AXIS = "rep"  # name of the repeated-calculation device-matrix dimension

Dims = tuple[tuple[str, ...], ...]  # per tensor dim: the mesh axes splitting it, major to minor


# ---- DTensor-like placements --------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """This mesh axis splits tensor dimension `dim`."""
    dim: int

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Replicate:
    """Every rank along this mesh axis holds the same data."""

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Partial:
    """Ranks along this mesh axis hold addends; the tensor is their sum (only 'sum' exists here)."""
    reduce_op: str = "sum"

    def __post_init__(self):
        if self.reduce_op != "sum":
            raise ParasimError(f"Partial({self.reduce_op}) is not supported; parasim only has "
                               f"pending sums, Partial(sum)")

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"


Placement = Shard | Replicate | Partial


# ---- JAX-like PartitionSpec ---------------------------------------------------------------------
@dataclass(frozen=True, init=False)
class PartitionSpec:
    """P('dp', None): one entry per tensor dim (None, an axis name or a tuple of names).

    A one-name tuple is stored as the bare name and an empty tuple as None, so equal specs
    compare equal. `unreduced` lists the mesh axes with a pending sum (kept sorted).
    """
    entries: tuple
    unreduced: tuple[str, ...]

    def __init__(self, *entries, unreduced: Sequence[str] = ()):
        norm = []
        for e in entries:
            if isinstance(e, (tuple, list)):
                e = tuple(str(x) for x in e)
                e = None if not e else e[0] if len(e) == 1 else e
            elif e is not None and not isinstance(e, str):
                raise ParasimError(f"PartitionSpec entry {e!r} must be None, an axis name or a "
                                   f"tuple of axis names")
            norm.append(e)
        object.__setattr__(self, "entries", tuple(norm))
        unred = (unreduced,) if isinstance(unreduced, str) else tuple(unreduced)
        object.__setattr__(self, "unreduced", tuple(sorted(unred)))

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, i):
        return self.entries[i]

    def __repr__(self) -> str:
        parts = [repr(e) for e in self.entries]
        if self.unreduced:
            parts.append("unreduced={" + ", ".join(repr(a) for a in self.unreduced) + "}")
        return f"P({', '.join(parts)})"


P = PartitionSpec


def spec_from_dims(dims: Dims, partial: tuple[str, ...]) -> PartitionSpec:
    return PartitionSpec(*dims, unreduced=partial)


def dims_from_spec(spec, ndim: int | None) -> tuple[Dims, tuple[str, ...]]:
    """(dims, partial) from a PartitionSpec or a plain sequence; pads with None up to `ndim`."""
    if not isinstance(spec, PartitionSpec):
        spec = PartitionSpec(*spec)
    ndim = len(spec) if ndim is None else ndim
    if len(spec) > ndim:
        raise ParasimError(f"partition spec {spec!r} has {len(spec)} entries but the tensor has "
                           f"rank {ndim}")
    entries = list(spec.entries) + [None] * (ndim - len(spec))
    dims = tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)
    return dims, spec.unreduced


# ---- DTensor-like placements <-> dims -----------------------------------------------------------
def placements_from_dims(mesh: DeviceMesh, dims: Dims, partial: tuple[str, ...]) -> tuple:
    out = []
    for axis in mesh.axis_names:
        owner = [d for d, axes in enumerate(dims) if axis in axes]
        out.append(Shard(owner[0]) if owner else Partial() if axis in partial else Replicate())
    for d, axes in enumerate(dims):
        in_mesh_order = tuple(a for a in mesh.axis_names if a in axes)
        if axes != in_mesh_order:
            raise ParasimError(f"dim {d} is split by {axes} (major to minor), not in mesh-axis "
                               f"order {in_mesh_order}; DTensor placements shard a dim in mesh "
                               f"order, so this layout has no placement form")
    return tuple(out)


def dims_from_placements(placements: Sequence, mesh: DeviceMesh,
                         ndim: int) -> tuple[Dims, tuple[str, ...]]:
    if len(placements) != mesh.ndim:
        raise ParasimError(f"{len(placements)} placements given for {mesh!r}, which has "
                           f"{mesh.ndim} axes (one placement per mesh axis)")
    dims: list[list[str]] = [[] for _ in range(ndim)]
    partial = []
    for axis, p in zip(mesh.axis_names, placements):
        if isinstance(p, Shard):
            if not -ndim <= p.dim < ndim:
                raise ParasimError(f"{p!r} on mesh axis {axis!r}: a rank-{ndim} tensor has dims "
                                   f"0..{ndim - 1}")
            dims[p.dim % ndim].append(axis)
        elif isinstance(p, Partial):
            partial.append(axis)
        elif not isinstance(p, Replicate):
            raise ParasimError(f"placement {p!r} must be Shard(d), Replicate() or Partial()")
    return tuple(tuple(d) for d in dims), tuple(partial)


# ---- MindSpore device matrix, tensor map, strategy ----------------------------------------------
def matrix_axis_names(n: int) -> tuple[str, ...]:
    """Names of device-matrix dimensions, from the left: d0, d1, ..."""
    return tuple(f"d{i}" for i in range(n))


def check_strategy(strategy: Sequence[int], device_num: int) -> int:
    """Validate a shard strategy for one tensor; return the repeated-calculation factor D / P."""
    strategy = tuple(strategy)
    if any(isinstance(v, (bool, float)) or not hasattr(v, "__index__") or v < 1 for v in strategy):
        raise ParasimError(f"strategy {strategy}: every value must be an integer >= 1")
    return check_device_matrix(tuple(int(v) for v in strategy), device_num, what="strategy")


def check_device_matrix(matrix: Sequence[int], device_num: int, what="device matrix") -> int:
    """P = prod(matrix) must divide device_num; return r = device_num / P."""
    matrix = tuple(matrix)
    used = prod(matrix)
    if any(v < 1 for v in matrix):
        raise ParasimError(f"{what} {matrix}: every value must be >= 1")
    if device_num < 1:
        raise ParasimError(f"device_num is {device_num}; it must be >= 1")
    if used > device_num:
        raise ParasimError(f"{what} {matrix} uses {used} devices but only {device_num} are "
                           f"available")
    if device_num % used:
        raise ParasimError(f"{what} {matrix} uses {used} devices, which does not divide the "
                           f"{device_num} available (the repeated-calculation factor "
                           f"{device_num}/{used} must be an integer)")
    return device_num // used


def mesh_from_device_matrix(matrix: Sequence[int], device_num: int | None = None,
                            device_ids: Sequence[int] | None = None) -> DeviceMesh:
    """Mesh(d0=.., d1=.., [rep=r]): r = device_num / prod(matrix) appended on the right if > 1."""
    matrix = tuple(int(v) for v in matrix)
    if device_num is None:
        device_num = prod(matrix) if device_ids is None else len(device_ids)
    r = check_device_matrix(matrix, device_num)
    axes = list(zip(matrix_axis_names(len(matrix)), matrix))
    if r > 1:
        axes.append((REPEAT_AXIS, r))
    return DeviceMesh(axes, device_ids)


def dims_from_tensor_map(matrix_names: Sequence[str], tensor_map: Sequence) -> Dims:
    """Tensor map entries (counted from the right, -1 = not split) -> mesh axis names per dim."""
    n = len(matrix_names)

    def name(m: int) -> str:
        if not 0 <= m < n:
            raise ParasimError(f"tensor map entry {m} is outside -1..{n - 1} for a device matrix "
                               f"of {n} dimensions (entry m means dimension {n}-1-m)")
        return matrix_names[n - 1 - m]

    dims = []
    for entry in tensor_map:
        if isinstance(entry, (tuple, list)):
            dims.append(tuple(name(int(m)) for m in entry if int(m) != -1))
        else:
            dims.append(() if int(entry) == -1 else (name(int(entry)),))
    return tuple(dims)


def tensor_map_from_dims(mesh: DeviceMesh, dims: Dims) -> tuple:
    """Inverse of dims_from_tensor_map, taking the mesh axes as the device matrix."""
    n = mesh.ndim

    def number(axis: str) -> int:
        return n - 1 - mesh.axis_index(axis)

    return tuple(-1 if not axes else number(axes[0]) if len(axes) == 1
                 else tuple(number(a) for a in axes) for axes in dims)
