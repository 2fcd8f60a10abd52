"""Layout: how one tensor is spread over a DeviceMesh.

A layout says, for each tensor dimension, which mesh axes split it (major to minor), which mesh
axes hold pending partial sums, and (implicitly) that the tensor is replicated over every other
axis. On Mesh(dp=2, tp=4):

    X[I_dp, J_tp]      dim 0 cut in 2 along dp, dim 1 cut in 4 along tp; rank r holds
                       block (r // 4, r % 4) of shape (I/2, J/4)
    X[I_{dp,tp}, J]    dim 0 cut in 8: dp is the major cut, tp the minor; J whole
    X[I, J_tp]         cut along tp, replicated along dp (ranks r and r + 4 agree)
    Y[I, K]{U_tp}      every rank holds an (I, K) addend; Y is the sum over the tp axis

Notation (after "How To Scale Your Model", sharding chapter): `A_x` = dimension A split along
mesh axis x; `A_{x,y}` = split along x then y (x major); a bare `A` = not split; a trailing
`{U_x}` = unreduced (pending sum) along x. Replication over unused axes is left implicit.
Default dimension names are I, J, K, L, ... as in that chapter's `A[I, J] * B[J, K]`.

Blocks: block index (b_0, ..., b_{n-1}) of a rank = for each tensor dim, the mixed-radix number
of the rank's coordinates on that dim's axes (major first). A dim of size S cut c ways has blocks
of S / c; MindSpore requires c to divide S (operator_parallel docs), so parasim refuses uneven
cuts.

Conversions to and from MindSpore strategies / tensor maps, JAX-like PartitionSpecs and
DTensor-like placements live in `layout_convert.py` (rules and sources there).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Iterable, Mapping, Sequence

import numpy as np

from simulator.errors import ParasimError
from simulator.layout_convert import (
    REPEAT_AXIS,
    P,
    Partial,
    PartitionSpec,
    Replicate,
    Shard,
    check_strategy,
    dims_from_placements,
    dims_from_spec,
    dims_from_tensor_map,
    matrix_axis_names,
    mesh_from_device_matrix,
    placements_from_dims,
    spec_from_dims,
    tensor_map_from_dims,
)
from simulator.mesh import DeviceMesh

__all__ = ["Layout", "P", "PartitionSpec", "Shard", "Replicate", "Partial", "REPEAT_AXIS"]

DimSpec = None | str | Iterable[str]
DEFAULT_DIM_NAMES = "IJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True, init=False)
class Layout:
    """Per tensor dim the mesh axes splitting it; `partial` axes hold pending sums."""

    mesh: DeviceMesh
    dims: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...]

    def __init__(self, mesh: DeviceMesh, dims: Sequence[DimSpec], partial: DimSpec = ()):
        if not isinstance(mesh, DeviceMesh):
            raise ParasimError(f"a Layout needs a DeviceMesh, got {type(mesh).__name__}")
        norm = tuple(_axes_tuple(d) for d in dims)
        part = _axes_tuple(partial)
        seen: dict[str, str] = {}
        for where, axes in [(f"dim {i}", a) for i, a in enumerate(norm)] + [("the partial sums", part)]:
            for a in axes:
                mesh.axis_index(a)
                if a in seen:
                    raise ParasimError(f"mesh axis {a!r} is used twice (by {seen[a]} and by "
                                       f"{where}); each axis splits at most one dimension")
                seen[a] = where
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "dims", norm)
        object.__setattr__(self, "partial", tuple(a for a in mesh.axis_names if a in part))

    # ---- constructors ---------------------------------------------------------------------------
    @classmethod
    def replicated(cls, mesh: DeviceMesh, ndim: int) -> "Layout":
        return cls(mesh, [()] * ndim)

    @classmethod
    def from_strategy(cls, strategy: Sequence[int], device_num: int,
                      tensor_shape: Sequence[int] | None = None,
                      device_ids: Sequence[int] | None = None) -> "Layout":
        """MindSpore shard strategy for one tensor, e.g. (2, 4) on 8 devices.

        Device matrix = the strategy values, plus r = device_num / prod(strategy) as the
        rightmost axis "rep" when r > 1; dim i is split by axis "d{i}" (MindSpore
        operator_parallel docs, "repeated calculation"). With `tensor_shape`, the rank and the
        divisibility of every dimension are checked too.
        """
        strategy = tuple(_int_or_raise(v, strategy) for v in strategy)
        check_strategy(strategy, device_num)
        mesh = mesh_from_device_matrix(strategy, device_num, device_ids)
        layout = cls(mesh, [(n,) for n in matrix_axis_names(len(strategy))])
        if tensor_shape is not None:
            if len(tensor_shape) != len(strategy):
                raise ParasimError(f"strategy {strategy} has {len(strategy)} values but the tensor "
                                   f"has rank {len(tensor_shape)} (shape {tuple(tensor_shape)})")
            layout.local_shape(tensor_shape)
        return layout

    @classmethod
    def from_device_matrix(cls, device_matrix: Sequence[int], tensor_map: Sequence,
                           partial: Iterable[int | str] = (), device_num: int | None = None,
                           device_ids: Sequence[int] | None = None) -> "Layout":
        """MindSpore device matrix + tensor map (entry m -> matrix dim len-1-m; -1 not split).

        `partial` lists device-matrix dims holding pending sums, as tensor-map numbers or axis
        names. Axes are named d0, d1, ... from the left; if `device_num` exceeds the matrix
        product the factor is appended as "rep". MatMul ((a, k), (k, c)): matrix [a, k, c],
        X map [2, 1], W map [1, 0], output map [2, 0] with partial=[1] (matmul_info.cc).
        """
        mesh = mesh_from_device_matrix(device_matrix, device_num, device_ids)
        names = matrix_axis_names(len(tuple(device_matrix)))
        part = [p if isinstance(p, str) else dims_from_tensor_map(names, [p])[0][0]
                for p in partial if p != -1]
        return cls(mesh, dims_from_tensor_map(names, tensor_map), part)

    @classmethod
    def from_partition_spec(cls, spec, mesh: DeviceMesh, ndim: int | None = None) -> "Layout":
        """JAX-like spec: P('dp', None), P(('dp', 'tp'), None, unreduced={'sp'})."""
        dims, partial = dims_from_spec(spec, ndim)
        return cls(mesh, dims, partial)

    @classmethod
    def from_placements(cls, placements: Sequence, mesh: DeviceMesh, ndim: int) -> "Layout":
        """DTensor-like: one of Shard(d), Replicate(), Partial() per mesh axis."""
        dims, partial = dims_from_placements(placements, mesh, ndim)
        return cls(mesh, dims, partial)

    def reduced(self) -> "Layout":
        """The same split with the pending sums resolved (the layout after the AllReduce)."""
        return Layout(self.mesh, self.dims)

    # ---- conversions ----------------------------------------------------------------------------
    def to_strategy(self) -> tuple[int, ...]:
        """MindSpore strategy: how many slices each dimension is cut into."""
        return self.splits

    def to_tensor_map(self) -> tuple[tuple[int, ...], tuple]:
        """(device matrix, tensor map) with the mesh axes as the device matrix."""
        return self.mesh.shape, tensor_map_from_dims(self.mesh, self.dims)

    def to_partition_spec(self) -> PartitionSpec:
        return spec_from_dims(self.dims, self.partial)

    def to_placements(self) -> tuple:
        return placements_from_dims(self.mesh, self.dims, self.partial)

    # ---- shapes and blocks ----------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def splits(self) -> tuple[int, ...]:
        """Number of blocks along each tensor dimension."""
        return tuple(prod(self.mesh.axis_size(a) for a in axes) for axes in self.dims)

    @property
    def replicated_axes(self) -> tuple[str, ...]:
        used = {a for axes in self.dims for a in axes} | set(self.partial)
        return tuple(a for a in self.mesh.axis_names if a not in used)

    def local_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
        """Shape of one block: S_i / splits_i; refuses cuts that do not divide."""
        global_shape = tuple(int(s) for s in global_shape)
        if len(global_shape) != self.ndim:
            raise ParasimError(f"shape {global_shape} has rank {len(global_shape)} but layout "
                               f"{self!r} has rank {self.ndim}")
        for d, (size, cut) in enumerate(zip(global_shape, self.splits)):
            if size % cut:
                raise ParasimError(f"dim {d} of size {size} cannot be split {cut} ways "
                                   f"(MindSpore requires each cut to divide its dimension)")
        return tuple(s // c for s, c in zip(global_shape, self.splits))

    def block_index(self, rank: int) -> tuple[int, ...]:
        """Which block of each dimension `rank` holds (mixed radix over the dim's axes)."""
        coords = dict(zip(self.mesh.axis_names, self.mesh.coords(rank)))
        out = []
        for axes in self.dims:
            b = 0
            for a in axes:
                b = b * self.mesh.axis_size(a) + coords[a]
            out.append(b)
        return tuple(out)

    def block_slices(self, rank: int, global_shape: Sequence[int]) -> tuple[slice, ...]:
        local = self.local_shape(global_shape)
        return tuple(slice(b * n, (b + 1) * n) for b, n in zip(self.block_index(rank), local))

    def devices_holding(self, block: Sequence[int]) -> tuple[int, ...]:
        """Ranks whose block index is `block` (replicas and partial-sum addends alike)."""
        block = tuple(block)
        if len(block) != self.ndim or any(not 0 <= b < c for b, c in zip(block, self.splits)):
            raise ParasimError(f"block {block} does not exist: layout {self!r} has "
                               f"{self.splits} blocks per dimension")
        return tuple(r for r in self.mesh.ranks if self.block_index(r) == block)

    def replica_groups(self) -> list[tuple[int, ...]]:
        """Groups of ranks holding identical data (differ only along replicated axes).

        For a parameter these are MindSpore's "mirror" groups: its gradient is AllReduced over
        them (MindSpore `grad_comm_ops.py`, the mirror operator)."""
        return self.mesh.groups(self.replicated_axes)

    def partial_groups(self) -> list[tuple[int, ...]]:
        """Groups whose addends sum to the tensor (the AllReduce that resolves `{U_..}`)."""
        return self.mesh.groups(self.partial)

    # ---- numpy data -----------------------------------------------------------------------------
    def shard(self, array: np.ndarray) -> dict[int, np.ndarray]:
        """rank -> copy of its block. For partial-sum axes, the ranks at coordinate 0 along
        them hold the block and the others hold zeros, so the sum is exact."""
        array = np.asarray(array)
        self.local_shape(array.shape)
        part = [self.mesh.axis_index(a) for a in self.partial]
        out = {}
        for r in self.mesh.ranks:
            block = np.array(array[self.block_slices(r, array.shape)])  # a copy, even for 0-d
            if any(self.mesh.coords(r)[i] for i in part):
                block[...] = 0
            out[r] = block
        return out

    def unshard(self, blocks: Mapping[int, np.ndarray], rtol: float = 1e-9,
                atol: float = 1e-12) -> np.ndarray:
        """Global array from every rank's block: replicas must agree (allclose with rtol,
        atol); addends along partial-sum axes are summed."""
        missing = [r for r in self.mesh.ranks if r not in blocks]
        if missing:
            raise ParasimError(f"unshard needs a block from every rank of {self.mesh!r}; "
                               f"missing ranks {missing}")
        local = {np.shape(blocks[r]) for r in self.mesh.ranks}
        if len(local) != 1:
            raise ParasimError(f"blocks have different shapes {sorted(local)}")
        local_shape = local.pop()
        if len(local_shape) != self.ndim:
            raise ParasimError(f"blocks have rank {len(local_shape)} but layout {self!r} has "
                               f"rank {self.ndim}")
        global_shape = tuple(n * c for n, c in zip(local_shape, self.splits))
        dtype = np.result_type(*(np.asarray(blocks[r]) for r in self.mesh.ranks))
        out = np.zeros(global_shape, dtype=dtype)
        for group in self.replica_groups():
            first = np.asarray(blocks[group[0]])
            for r in group[1:]:
                other = np.asarray(blocks[r])
                if not np.allclose(first, other, rtol=rtol, atol=atol):
                    diff = np.max(np.abs(first.astype(float) - other.astype(float)))
                    raise ParasimError(f"replicas disagree: ranks {group[0]} and {r} hold block "
                                       f"{self.block_index(r)} but differ by up to {diff:.3g}")
            out[self.block_slices(group[0], global_shape)] += first
        return out

    # ---- printing -------------------------------------------------------------------------------
    def notation(self, name: str = "X", dim_names: Sequence[str] | None = None) -> str:
        """Textbook form, e.g. `X[I_dp, J_{tp,sp}]{U_pp}` (see module docstring)."""
        if dim_names is None:
            dim_names = [DEFAULT_DIM_NAMES[i] if i < len(DEFAULT_DIM_NAMES) else f"D{i}"
                         for i in range(self.ndim)]
        if len(dim_names) != self.ndim:
            raise ParasimError(f"{len(dim_names)} dim names given for a rank-{self.ndim} layout")
        parts = [n + _subscript(axes) for n, axes in zip(dim_names, self.dims)]
        text = f"{name}[{', '.join(parts)}]"
        if self.partial:
            text += "{U" + _subscript(self.partial) + "}"
        return text

    def __repr__(self) -> str:
        return self.notation()

    __str__ = __repr__


def _subscript(axes: tuple[str, ...]) -> str:
    if not axes:
        return ""
    return f"_{axes[0]}" if len(axes) == 1 else "_{" + ",".join(axes) + "}"


def _axes_tuple(spec: DimSpec) -> tuple[str, ...]:
    if spec is None:
        return ()
    if isinstance(spec, str):
        return (spec,)
    axes = tuple(spec)
    if not all(isinstance(a, str) for a in axes):
        raise ParasimError(f"{axes!r}: a dimension is split by mesh axis names (strings)")
    return axes


def _int_or_raise(v, strategy) -> int:
    if isinstance(v, (bool, float)) or not hasattr(v, "__index__"):
        raise ParasimError(f"strategy {tuple(strategy)}: every value must be an integer >= 1")
    return int(v)
