"""Operator strategies: shard tuples or MindSpore `Layout`s -> one device matrix per operator.

Every auto-parallel operator is described by index letters, as an einsum: MatMul is
"mk,kn->mn", BiasAdd "mn,n->mn", ReduceSum(axis=1) "mn->m". A strategy gives each letter a
cut, and the rules of MindSpore's operator-level parallelism follow (MindSpore
docs "operator_parallel", `ops_info/matmul_info.cc`, `operator_info.cc`):

- one tuple per input, one integer per tensor dimension, each >= 1 and dividing the dimension;
- a letter shared by two inputs must be cut the same way in both (MatMul's two k values);
- device matrix = the cuts of the letters in the operator's order (MatMul [a, k, c]); its
  product P must divide the device count D; if r = D / P > 1, r is appended as the rightmost,
  fastest-varying dimension ("rep", repeated calculation), or prepended as the leftmost where
  MindSpore does so (a row-split Gather, Primitive.repeat_on_left);
- a letter that is summed away (k in MatMul, the reduced axis of ReduceSum) leaves every rank
  with a partial sum over that letter's device-matrix dimension.

A MindSpore `Layout((2, 4), ("dp", "mp"))` names the device-matrix dimensions; `layout("dp",
"mp")` maps a tensor's dims onto them ("None" = not split, a tuple = several, major first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Sequence

from ..errors import ParasimError
from ..layout import Layout
from ..layout_convert import REPEAT_AXIS, check_device_matrix, matrix_axis_names
from ..mesh import DeviceMesh


class MsLayout:
    """MindSpore `Layout(device_matrix, alias_name)`; calling it maps a tensor's dims to aliases.

    >>> layout = MsLayout((2, 4), ("dp", "mp")); layout("dp", "None")
    TensorLayout(dp, None on [2, 4])
    """

    def __init__(self, device_matrix: Sequence[int], alias_name: Sequence[str]):
        matrix, names = tuple(int(v) for v in device_matrix), tuple(str(a) for a in alias_name)
        if len(matrix) != len(names):
            raise ParasimError(f"Layout: device matrix {matrix} has {len(matrix)} dimensions but "
                               f"{len(names)} alias names {names}")
        if "None" in names or REPEAT_AXIS in names:
            raise ParasimError(f"Layout: alias names may not be 'None' or {REPEAT_AXIS!r}")
        DeviceMesh(list(zip(names, matrix)))  # validates sizes and distinct names
        self.device_matrix, self.alias_name = matrix, names

    def __call__(self, *entries) -> "TensorLayout":
        norm = []
        for e in entries:
            axes = (e,) if isinstance(e, str) else tuple(e)
            axes = tuple(a for a in axes if a != "None")
            for a in axes:
                if a not in self.alias_name:
                    raise ParasimError(f"Layout: unknown alias {a!r}; this layout has "
                                       f"{list(self.alias_name)} (and 'None')")
            norm.append(axes)
        used = [a for axes in norm for a in axes]
        if len(set(used)) != len(used):
            raise ParasimError(f"Layout: an alias maps two tensor dims in {entries}")
        return TensorLayout(self, tuple(norm))

    def __repr__(self) -> str:
        return f"Layout({list(self.device_matrix)}, {list(self.alias_name)})"


@dataclass(frozen=True)
class TensorLayout:
    """One tensor's dims mapped onto the aliases of a MsLayout (what `layout(...)` returns)."""
    layout: MsLayout
    dims: tuple[tuple[str, ...], ...]

    def __repr__(self) -> str:
        parts = ["None" if not d else d[0] if len(d) == 1 else "(" + ",".join(d) + ")" for d in self.dims]
        return f"TensorLayout({', '.join(parts)} on {list(self.layout.device_matrix)})"


@dataclass(frozen=True)
class OpSharding:
    """The parallel form of one operator: its device matrix (as a mesh), the mesh axes of each
    index letter, the input layouts, the raw output (with partial sums) and the output after
    the forward communication (`out`)."""

    op: str
    mesh: DeviceMesh
    letter_axes: dict = field(compare=False)
    inputs: tuple[Layout, ...]
    raw: Layout
    out: Layout
    user_set: bool = False
    given: tuple | None = field(default=None, compare=False)  # the in_strategy it was built from
    given_out: tuple | None = field(default=None, compare=False)  # and the out_strategy

    @property
    def device_matrix(self) -> tuple[int, ...]:
        return self.mesh.shape

    @property
    def tensor_maps(self) -> tuple[tuple, ...]:
        return tuple(l.to_tensor_map()[1] for l in self.inputs)

    @property
    def strategy(self) -> tuple[tuple[int, ...], ...]:
        return tuple(l.splits for l in self.inputs)

    @property
    def repeat(self) -> int:
        return self.mesh.axis_size(REPEAT_AXIS) if REPEAT_AXIS in self.mesh.axis_names else 1


def _is_int(v) -> bool:
    return hasattr(v, "__index__") and not isinstance(v, (bool, float))


def build_sharding(op: str, letters: Sequence[str], out_letters: str, order: str,
                   shapes: Sequence[tuple[int, ...]], device_num: int, in_strategy,
                   out_strategy=None, unsplittable: str = "", user_set: bool = True,
                   view=None, default_out=None, repeat_left: bool = False) -> OpSharding:
    """Validate `in_strategy` (tuples or TensorLayouts) for an operator and build its OpSharding.

    letters: one index string per input ("mk", "kn"); out_letters: "mn"; order: the letters in
    device-matrix order; unsplittable: letters that must stay whole (a softmax axis). A letter
    outside `order` (a broadcast, sliced or concatenated dim) is never cut. view: (letters,
    shapes) the strategy tuples refer to when not the inputs' (OneHot, Tile); default_out(raw):
    the operator's own output layout when no out_strategy is given (None: sums resolved);
    repeat_left: repeated calculation leftmost in the device matrix (Primitive.repeat_on_left)."""
    in_strategy = tuple(in_strategy)
    vletters, vshapes = view if view is not None else (letters, shapes)
    if len(in_strategy) != len(vletters):
        raise ParasimError(f"{op}: the strategy has {len(in_strategy)} tuple(s) but the operator "
                           f"has {len(vletters)} input(s); give one tuple per input")
    kinds = {isinstance(s, TensorLayout) for s in in_strategy}
    if kinds == {True}:
        mesh, axes_of = _from_layouts(op, vletters, vshapes, device_num, in_strategy)
    elif kinds == {False}:
        mesh, axes_of = _from_tuples(op, vletters, order, vshapes, device_num, in_strategy, repeat_left)
    else:
        raise ParasimError(f"{op}: mix of strategy tuples and Layouts; use one kind for all inputs")
    for i, s in enumerate(vletters):
        for d, ch in enumerate(s):
            cut = prod(mesh.axis_size(a) for a in axes_of.get(ch, ()))
            if ch not in order and cut > 1:
                raise ParasimError(f"{op}: input {i} dim {d} may not be split (a broadcast, sliced "
                                   f"or concatenated dim), but the strategy cuts it {cut} ways")
    for ch in unsplittable:
        if ch in axes_of and prod(mesh.axis_size(a) for a in axes_of[ch]) > 1:
            i, d = next((i, s.index(ch)) for i, s in enumerate(letters) if ch in s)
            raise ParasimError(f"{op}: input {i} dim {d} may not be split (the operator works "
                               f"along it), but the strategy cuts it "
                               f"{prod(mesh.axis_size(a) for a in axes_of[ch])} ways")
    ins = tuple(Layout(mesh, [axes_of.get(c, ()) if c in order else () for c in s]) for s in letters)
    for i, (lay, shape) in enumerate(zip(ins, shapes)):
        _check_divides(op, i, shape, lay.splits)
    contracted = [a for c in order if c not in out_letters for a in axes_of.get(c, ())]
    raw = Layout(mesh, [axes_of.get(c, ()) for c in out_letters], contracted)
    if out_strategy is not None:
        out = _out_layout(op, raw, out_strategy)
    else:
        out = (default_out(raw) if default_out else None) or raw.reduced()
    return OpSharding(op, mesh, axes_of, ins, raw, out, user_set, in_strategy,
                      None if out_strategy is None else tuple(out_strategy))


def _check_divides(op, i, shape, splits) -> None:
    for d, (size, cut) in enumerate(zip(shape, splits)):
        if size % cut:
            raise ParasimError(f"{op}: input {i} dim {d} has size {size}, which the strategy "
                               f"cannot cut {cut} ways ({size} % {cut} = {size % cut})")


def _from_tuples(op, letters, order, shapes, device_num, strategies, repeat_left=False):
    cuts: dict[str, tuple[int, int, int]] = {}  # letter -> (cut, input, dim)
    for i, (s, chars, shape) in enumerate(zip(strategies, letters, shapes)):
        s = tuple(s) if isinstance(s, (tuple, list)) else s
        if not isinstance(s, tuple) or len(s) != len(chars):
            n = len(s) if isinstance(s, tuple) else "no"
            raise ParasimError(f"{op}: input {i} has shape {tuple(shape)} ({len(chars)} dims) but "
                               f"its strategy {s!r} has {n} values")
        for d, (v, ch) in enumerate(zip(s, chars)):
            if not _is_int(v) or v < 1:
                raise ParasimError(f"{op}: input {i} dim {d}: strategy value {v!r} must be an "
                                   f"integer >= 1")
            if ch in cuts and cuts[ch][0] != int(v):
                c0, i0, d0 = cuts[ch]
                raise ParasimError(f"{op}: input {i0} dim {d0} is cut {c0} ways but input {i} dim "
                                   f"{d} is cut {int(v)} ways; they are the same dimension "
                                   f"('{ch}') and must be cut alike")
            cuts.setdefault(ch, (int(v), i, d))
        _check_divides(op, i, shape, s)
    for ch, (v, i, d) in cuts.items():
        if ch not in order and v > 1:
            raise ParasimError(f"{op}: input {i} dim {d} may not be split (a broadcast, sliced or "
                               f"concatenated dim), but the strategy cuts it {v} ways")
    matrix = tuple(cuts[c][0] for c in order)
    try:
        check_device_matrix(matrix, device_num)
    except ParasimError as e:
        raise ParasimError(f"{op}: strategy {tuple(map(tuple, strategies))}: {e}") from None
    names = matrix_axis_names(len(matrix))
    r = device_num // prod(matrix)
    rep = [(REPEAT_AXIS, r)] if r > 1 else []
    axes = list(zip(names, matrix))
    mesh = DeviceMesh(rep + axes if repeat_left else axes + rep)
    return mesh, {c: (names[k],) for k, c in enumerate(order)}


def _from_layouts(op, letters, shapes, device_num, layouts):
    base = layouts[0].layout
    if any(l.layout.device_matrix != base.device_matrix or l.layout.alias_name != base.alias_name
           for l in layouts):
        raise ParasimError(f"{op}: all inputs must use the same Layout (device matrix and aliases)")
    try:
        r = check_device_matrix(base.device_matrix, device_num, what="Layout device matrix")
    except ParasimError as e:
        raise ParasimError(f"{op}: {e}") from None
    mesh = DeviceMesh(list(zip(base.alias_name, base.device_matrix))
                      + ([(REPEAT_AXIS, r)] if r > 1 else []))
    axes_of: dict[str, tuple[str, ...]] = {}
    for i, (tl, chars, shape) in enumerate(zip(layouts, letters, shapes)):
        if len(tl.dims) != len(chars):
            raise ParasimError(f"{op}: input {i} has {len(chars)} dims but its layout {tl!r} "
                               f"maps {len(tl.dims)}")
        for d, (axes, ch) in enumerate(zip(tl.dims, chars)):
            if ch in axes_of and axes_of[ch] != axes:
                raise ParasimError(f"{op}: input {i} dim {d} is mapped to {axes or 'None'} but the "
                                   f"same dimension ('{ch}') of an earlier input to "
                                   f"{axes_of[ch] or 'None'}; they must match")
            axes_of.setdefault(ch, axes)
    used = [a for axes in axes_of.values() for a in axes]
    if len(set(used)) != len(used):
        raise ParasimError(f"{op}: an alias splits two different dimensions of the operator")
    return mesh, axes_of


def _out_layout(op: str, raw: Layout, out_strategy) -> Layout:
    """The output layout after the forward communication, from an out_strategy.

    ((a * k, c),) for MatMul ((a, k), (k, c)): dim 0 additionally split by the k dimension, so
    the partial sums are resolved by a ReduceScatter instead of an AllReduce (MindSpore docs "operator_parallel", out_strategy)."""
    out_strategy = tuple(out_strategy)
    if len(out_strategy) != 1:
        raise ParasimError(f"{op}: out_strategy needs exactly one tuple (one output), got "
                           f"{len(out_strategy)}")
    s = out_strategy[0]
    if isinstance(s, TensorLayout):
        return Layout(raw.mesh, s.dims)
    s = tuple(s)
    if len(s) != raw.ndim:
        raise ParasimError(f"{op}: out_strategy {s} has {len(s)} values but the output has "
                           f"{raw.ndim} dims")
    spare = list(raw.partial)
    dims = []
    for d, (v, axes) in enumerate(zip(s, raw.dims)):
        have = prod(raw.mesh.axis_size(a) for a in axes)
        if not _is_int(v) or v % have:
            raise ParasimError(f"{op}: out_strategy dim {d} is {v!r} but the operator already cuts "
                               f"that dim {have} ways; it must be a multiple of {have}")
        extra, add = int(v) // have, []
        for a in list(spare):
            if extra > 1 and extra % raw.mesh.axis_size(a) == 0:
                add.append(a)
                extra //= raw.mesh.axis_size(a)
                spare.remove(a)
        if extra != 1:
            raise ParasimError(f"{op}: out_strategy dim {d} = {v} cannot be reached: only the "
                               f"partial-sum dimensions {list(raw.partial)} may add cuts "
                               f"(sizes {[raw.mesh.axis_size(a) for a in raw.partial]})")
        dims.append(tuple(axes) + tuple(add))
    return Layout(raw.mesh, dims)
