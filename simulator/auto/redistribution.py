"""Redistribution: the steps that turn one layout of a tensor into another.

MindSpore's tensor redistribution (`redistribution_operator_infer.cc`; MindSpore docs "Tensor Redistribution") works on a
*unified device arrangement*: both device matrices are refined to one whose dimensions nest in
both (8 devices, [2, 4] and [4, 2] -> [2, 2, 2]); on it each move is one of
- split   (slice locally, no communication: each rank keeps its own part),
- concat  (AllGather over a device dimension),
- permute (AllToAll: a cut moves from one tensor dim to another),
and pending sums are resolved by AllReduce, or by ReduceScatter when the target cuts a dim along
the same device dimension (several pending device dimensions the target cuts one dim along, in
mesh order, make ONE ReduceScatter over their combined group, as MindSpore's layouts do in
test_layout_extend.py). Local slicing is done before any gathering, so less data moves.

A cut that moves from one tensor dim to another is an AllToAll only with `alltoall=True`
(MindSpore's `enable_alltoall`, default False, and what XLA/GSPMD emits); by default it is
MindSpore's AllGather followed by a local Split, which moves (n - 1) x the bytes of the
AllToAll's (n - 1) / n per rank. Device matrices that do not nest (cuts [3, 2] against [2, 3] on
6 devices) have no common refinement: the tensor is gathered whole on the source matrix and
sliced locally on the target one (MindSpore's and XLA's fallback).
With `alltoall=True` a plan that first gives the blocks the target's shape and then sends each
block point-to-point to the rank that needs it (XLA's collective-permute, permute.py) is used when
it moves fewer bytes.
Two further local moves serve gradients (whose replicated copies are addends, see plan.py):
- pad  (embed this rank's slice in zeros: a cut becomes a pending sum, the adjoint of split),
- zero (keep the value on coordinate 0 of an axis, zeros elsewhere: replicated -> pending sum).

`redistribute(src, dst, shape, itemsize)` returns the list of `Step`s; each names its kind, the
tensor dim(s), the unified mesh axes, the exact rank groups, the bytes each rank contributes and
a one-line reason. explain() prints them; compile.py lowers them to instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from ..errors import ParasimError
from ..layout import Layout
from ..mesh import DeviceMesh
from . import permute

COMM_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute")
LOCAL_KINDS = ("split", "pad", "zero")
# nccl-tests bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md): bytes on the wire per input byte
_WIRE = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
         "all_gather": lambda n: (n - 1), "all_to_all": lambda n: (n - 1) / n}


@dataclass(frozen=True)
class Step:
    """One move. `dim`: the tensor dim it cuts/gathers (for all_to_all the dim that is gathered);
    `dim_to`: for all_to_all, the dim that becomes cut. `nbytes` = one rank's input buffer."""

    kind: str
    axes: tuple[str, ...]
    dim: int | None
    dim_to: int | None
    before: Layout
    after: Layout
    groups: tuple[tuple[int, ...], ...]
    nbytes: int
    reason: str

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    @property
    def group_size(self) -> int:
        return len(self.groups[0]) if self.groups else 1

    @property
    def wire_bytes(self) -> float:
        """Bytes each rank puts on the wire with a ring algorithm (0 for local moves)."""
        if self.kind == "collective_permute":  # groups = (sender, receiver) pairs: one shard each
            sends = [s for s, _ in self.groups]
            return float(max(map(sends.count, sends), default=0) * self.nbytes)
        n = self.group_size
        return _WIRE[self.kind](n) * self.nbytes if self.is_comm and n > 1 else 0.0

    def __repr__(self) -> str:
        where = f" dim {self.dim}" if self.dim is not None else ""
        if self.dim_to is not None:
            where = f" dim {self.dim_to} -> dim {self.dim}"
        return f"{self.kind}({','.join(self.axes)}{where}: {self.before} -> {self.after})"


def unify(a: DeviceMesh, b: DeviceMesh) -> tuple[DeviceMesh, dict, dict]:
    """The coarsest mesh whose axes nest in both meshes' axes (row-major, last fastest).

    Returns (fine mesh, {axis of a: fine axes}, {axis of b: fine axes}). The boundaries are
    the strides prod(shape[i+1:]); their union must form a divisibility chain."""
    if a.size != b.size:
        raise ParasimError(f"cannot redistribute between {a.size} and {b.size} devices")
    for m in (a, b):
        if m.device_ids != tuple(range(m.size)):
            raise ParasimError(f"redistribution needs meshes over ranks 0..{m.size - 1}; {m!r}")
    strides = sorted(set(_strides(a)) | set(_strides(b)) | {a.size})
    for lo, hi in zip(strides, strides[1:]):
        if hi % lo:
            raise ParasimError(f"device matrices {list(a.shape)} and {list(b.shape)} do not nest "
                               f"(strides {lo} and {hi}); MindSpore needs a common refinement")
    sizes = [hi // lo for lo, hi in zip(strides, strides[1:])][::-1]  # major first
    fine = DeviceMesh([(f"u{i}", s) for i, s in enumerate(sizes)])
    lows = strides[:-1][::-1]  # stride of each fine axis, major first
    return fine, _axis_map(a, fine, lows), _axis_map(b, fine, lows)


def _strides(m: DeviceMesh) -> list[int]:
    return [prod(m.shape[i + 1:]) for i in range(m.ndim)]


def _axis_map(m: DeviceMesh, fine: DeviceMesh, lows: list[int]) -> dict:
    out = {}
    for name, size, stride in zip(m.axis_names, m.shape, _strides(m)):
        out[name] = tuple(f for f, lo in zip(fine.axis_names, lows)
                          if size > 1 and stride <= lo < stride * size)
    return out


def on_mesh(layout: Layout, fine: DeviceMesh, amap: dict) -> Layout:
    """The same layout expressed on the unified mesh."""
    return Layout(fine, [sum((amap[a] for a in axes), ()) for axes in layout.dims],
                  sum((amap[a] for a in layout.partial), ()))


def redistribute(src: Layout, dst: Layout, shape: Sequence[int], itemsize: int = 8,
                 tensor: str = "X", alltoall: bool = True) -> list[Step]:
    """Steps turning `src` into `dst` for a tensor of global `shape` (see the module docstring).
    Whatever the direct planning cannot do (device matrices that do not nest, or any move it
    cannot find) falls back to gathering the tensor whole and slicing it again, as MindSpore and
    XLA do; only layouts over different numbers of devices or an impossible shape are refused."""
    shape = tuple(shape)
    src.local_shape(shape)
    dst.local_shape(shape)
    if sorted(src.mesh.device_ids) != sorted(dst.mesh.device_ids):
        raise ParasimError(f"cannot redistribute between {src.mesh.size} and {dst.mesh.size} devices"
                           if src.mesh.size != dst.mesh.size else
                           f"cannot redistribute between devices {sorted(src.mesh.device_ids)} and "
                           f"{sorted(dst.mesh.device_ids)}: a redistribution stays on one set of devices")
    try:
        return _direct(src, dst, shape, itemsize, tensor, alltoall)
    except ParasimError as e:
        return _via_replicated(src, dst, shape, itemsize, tensor, alltoall, str(e))


def _direct(src: Layout, dst: Layout, shape, itemsize, tensor, alltoall) -> list[Step]:
    """The plan on the unified device arrangement (raises when the matrices do not nest)."""
    fine, amap, bmap = unify(src.mesh, dst.mesh)
    names = {f: a for m in (bmap, amap) for a, fs in m.items() for f in fs}  # src names win
    a, b = on_mesh(src, fine, amap), on_mesh(dst, fine, bmap)
    steps = _Planner(a, b, shape, itemsize, tensor, names, alltoall).run()
    if alltoall and not a.partial and not b.partial and cost_bytes(steps) > 0:
        try:
            other = _via_permute(a, b, shape, itemsize, tensor, names)
        except ParasimError:  # no collective-permute plan: keep the direct one
            other = None
        if other is not None and cost_bytes(other) < cost_bytes(steps):
            return other
    return steps


def _via_permute(src: Layout, dst: Layout, shape, itemsize, tensor, names) -> list[Step] | None:
    """Give the blocks the target's shape, then send each to the rank that needs it (permute.py);
    planned on the mesh refined into prime factors, so a cut of 4 can move half its factor."""
    pm, pmap = permute.prime_mesh(src.mesh)
    a, b = on_mesh(src, pm, pmap), on_mesh(dst, pm, pmap)
    mid = permute.midpoint(a, b)
    if mid is None:
        return None
    sub = {f: (names.get(x, x) if len(fs) == 1 else f"{names.get(x, x)}[{j}]")
           for x, fs in pmap.items() for j, f in enumerate(fs)}
    steps = _Planner(a, mid, shape, itemsize, tensor, sub, True).run()
    if mid == b or not permute.is_permutation(mid, b):
        return None  # no permute needed: the direct plan covers it
    sends = permute.pairs(mid, b)
    nbytes = prod(b.local_shape(shape)) * itemsize
    steps.append(Step("collective_permute", (), None, None, mid, b, sends, nbytes,
                      f"the blocks of {tensor} have the target's shape but sit on other ranks: {len(sends)} of "
                      f"{pm.size} ranks receive theirs point-to-point, the others keep theirs (XLA's "
                      f"collective-permute; MindSpore has none, so only with enable_alltoall)"))
    return steps


def _via_replicated(src: Layout, dst: Layout, shape, itemsize, tensor, alltoall, why: str) -> list[Step]:
    """Gather to whole on the source matrix, slice on the target (`why` the direct plan failed)."""
    whole_a, whole_b = Layout.replicated(src.mesh, len(shape)), Layout.replicated(dst.mesh, len(shape))
    names_a = {a: a for a in src.mesh.axis_names}
    names_b = {a: a for a in dst.mesh.axis_names}
    first = _Planner(src, whole_a, shape, itemsize, tensor, names_a, alltoall).run()
    second = _Planner(whole_b, dst, shape, itemsize, tensor, names_b, alltoall).run()
    note = (f"; no direct plan ({why}), so {tensor} is gathered whole and re-sliced")
    return [Step(s.kind, s.axes, s.dim, s.dim_to, s.before, s.after, s.groups, s.nbytes, s.reason + note)
            for s in first + second]


def cost_bytes(steps: Sequence[Step]) -> float:
    return sum(s.wire_bytes for s in steps)


def _is_prefix(a: list, b: tuple) -> bool:
    return len(a) <= len(b) and tuple(a) == tuple(b[:len(a)])


class _Planner:
    def __init__(self, src: Layout, dst: Layout, shape, itemsize, tensor, names, alltoall=True):
        self.names, self.alltoall = names, alltoall
        self.mesh, self.dst, self.shape, self.itemsize, self.tensor = src.mesh, dst, shape, itemsize, tensor
        self.dims = [list(d) for d in src.dims]
        self.partial = list(src.partial)
        self.steps: list[Step] = []

    def layout(self) -> Layout:
        return Layout(self.mesh, self.dims, self.partial)

    def used(self) -> set:
        return {a for d in self.dims for a in d} | set(self.partial)

    def nm(self, axes) -> str:
        """Unified axes named by the device-matrix dimension they come from (d1, rep, ...)."""
        out = []
        for a in axes:
            n = self.names.get(a, a)
            if n not in out:
                out.append(n)
        return ",".join(out)

    def size(self, axes) -> int:
        return prod(self.mesh.axis_size(a) for a in axes)

    def emit(self, kind, axes, dim, dim_to, reason, change) -> None:
        before = self.layout()
        nbytes = prod(before.local_shape(self.shape)) * self.itemsize
        change()
        groups = tuple(self.mesh.groups(axes))
        self.steps.append(Step(kind, tuple(axes), dim, dim_to, before, self.layout(), groups,
                               nbytes, reason))

    # ---- the moves ------------------------------------------------------------------------------
    def try_split(self) -> bool:
        for d, want in enumerate(self.dst.dims):
            cur = self.dims[d]
            if _is_prefix(cur, want) and len(cur) < len(want) and want[len(cur)] not in self.used():
                a = want[len(cur)]
                self.emit("split", (a,), d, None,
                          f"the target cuts dim {d} of {self.tensor} {self.size([a])} more ways "
                          f"along {self.nm([a])}: each rank slices its own part (no communication)",
                          lambda: cur.append(a))
                return True
        return False

    def try_reduce_scatter(self) -> bool:
        for d, want in enumerate(self.dst.dims):
            cur = self.dims[d]
            if not _is_prefix(cur, want):
                continue
            run = []
            for a in want[len(cur):]:
                if a not in self.partial or a in self.dst.partial:
                    break
                run.append(a)
            order = [a for a in self.mesh.axis_names if a in run]
            axes = run if order == run else run[:1]
            if axes:
                def change(axes=axes, cur=cur):
                    for a in axes:
                        self.partial.remove(a)
                        cur.append(a)
                self.emit("reduce_scatter", tuple(axes), d, None,
                          f"ranks along {self.nm(axes)} hold partial sums of {self.tensor} and the "
                          f"target cuts dim {d} along {self.nm(axes)}: ReduceScatter sums and keeps 1/"
                          f"{self.size(axes)} on each", change)
                return True
        return False

    def all_reduce(self) -> None:
        todo = [p for p in self.partial if p not in self.dst.partial]
        if todo:
            def change():
                for p in todo:
                    self.partial.remove(p)
            self.emit("all_reduce", tuple(todo), None, None,
                      f"ranks along {self.nm(todo)} hold partial sums of {self.tensor}: "
                      f"AllReduce(sum) over groups of {self.size(todo)} resolves them", change)

    def make_partial(self, allow_used: bool) -> None:
        for q in [q for q in self.dst.partial if q not in self.partial]:
            owner = next((d for d, cur in enumerate(self.dims) if q in cur), None)
            if owner is not None and self.dims[owner][-1] == q:
                def change(q=q, owner=owner):
                    self.dims[owner].pop()
                    self.partial.append(q)
                self.emit("pad", (q,), owner, None,
                          f"each rank embeds its slice of dim {owner} in zeros: the cut along "
                          f"{self.nm([q])} becomes a pending sum (adjoint of a local split)", change)
            elif owner is None:
                def change(q=q):
                    self.partial.append(q)
                self.emit("zero", (q,), None, None,
                          f"the copies along {self.nm([q])} become addends: coordinate 0 keeps the value, "
                          f"the others hold zeros (no communication)", change)
            elif not allow_used:
                continue
            else:
                raise ParasimError(f"cannot make {q} a pending sum of {self.tensor}: it still "
                                   f"cuts dim {owner}")

    def wanted_next(self, axis: str, d: int) -> bool:
        """Whether another dim than d takes `axis` as its next cut in the target."""
        return any(e != d and _is_prefix(cur, want) and len(cur) < len(want) and want[len(cur)] == axis
                   for e, (cur, want) in enumerate(zip(self.dims, self.dst.dims)))

    def a2a_move(self, bad: list[int]):
        """(axis, from dim, to dim) of a cut that can move between dims in one AllToAll, or None."""
        for d in bad:
            a = self.dims[d][-1]
            for e, want in enumerate(self.dst.dims):
                cur = self.dims[e]
                if e != d and _is_prefix(cur, want) and len(cur) < len(want) and want[len(cur)] == a:
                    return a, d, e
        return None

    def try_all_to_all(self, bad: list[int]) -> bool:
        move = self.a2a_move(bad)
        if move is None:
            return False
        a, d, e = move
        n = self.size([a])
        local = self.itemsize * prod(self.layout().local_shape(self.shape))

        def change():
            self.dims[d].pop()
            self.dims[e].append(a)
        self.emit("all_to_all", (a,), d, e,
                  f"the cut along {self.nm([a])} moves from dim {d} to dim {e} of {self.tensor}: "
                  f"AllToAll over groups of {n} swaps the pieces ({local * (n - 1) // n} B per rank on the "
                  f"wire; MindSpore's default AllGather + Split would put {local * (n - 1)} B)", change)
        return True

    def all_gather(self, d: int, note: str = "") -> None:
        cur, want = self.dims[d], self.dst.dims[d]
        k = 0
        while k < min(len(cur), len(want)) and cur[k] == want[k]:
            k += 1
        suffix = cur[k:]
        order = [a for a in self.mesh.axis_names if a in suffix]
        if order != suffix or (len(suffix) > 1 and self.wanted_next(suffix[-1], d)):
            # one axis at a time when the freed minor axis can cut another dim at once (a local
            # Split before the next gather): [S0,S0,R] -> [R,S1,S1] of (16, 32) float64 on 2x2x2
            # gathers 1,024 B, splits, gathers 1,024 B (2,048 B) instead of 3,072 B at once
            suffix = cur[-1:]

        def change():
            del cur[len(cur) - len(suffix):]
        self.emit("all_gather", tuple(suffix), d, None,
                  f"dim {d} of {self.tensor} is cut {self.size(suffix)} ways along "
                  f"{self.nm(suffix)} here but not in the target: AllGather concatenates it{note}",
                  change)

    def run(self) -> list[Step]:
        while self.try_split() or self.try_reduce_scatter():
            pass
        self.all_reduce()
        self.make_partial(allow_used=False)
        for _ in range(4 * len(self.mesh.axis_names) + 4):
            if self.try_split():
                continue
            bad = [d for d, cur in enumerate(self.dims) if not _is_prefix(cur, self.dst.dims[d])]
            if not bad:
                break
            if not (self.alltoall and self.try_all_to_all(bad)):
                move = None if self.alltoall else self.a2a_move(bad)
                note = ""
                if move is not None and move[1] == bad[0]:
                    n = self.size([move[0]])
                    local = self.itemsize * prod(self.layout().local_shape(self.shape))
                    note = (f" (MindSpore's default, then a local Split; with enable_alltoall one AllToAll "
                            f"would put {local * (n - 1) // n} B per rank on the wire instead of "
                            f"{local * (n - 1)} B)")
                self.all_gather(bad[0], note)
        self.make_partial(allow_used=True)
        if self.layout() != self.dst:  # a bug guard: the moves above always converge
            raise ParasimError(f"redistribution of {self.tensor} stopped at {self.layout()} "
                               f"before reaching {self.dst}")
        return self.steps
