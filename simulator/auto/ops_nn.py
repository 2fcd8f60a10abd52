"""Softmax, LayerNorm, the reductions, Gather (embedding) and OneHot, with MindSpore's sharding
rules (`ops_info/softmax_info.cc`, `layer_norm_info.cc`, `reduce_method_info.cc`,
`gather_info.cc`, `onehot_info.cc`).
"""

from __future__ import annotations

from math import prod

from ..layout import Layout
from .graph import Tensor
from .primitive import LETTERS, Primitive, axis_tuple, need
from .redistribution import Step, cost_bytes, redistribute


class Softmax(Primitive):
    """Softmax over `axis` (an int or a tuple). MindSpore's shard() may not cut the softmax axis
    (softmax_info.cc), nor does the data-parallel default. The auto_parallel planner may keep a
    cut that arrives on it, as XLA does: each rank takes its rows' maximum, AllReduce(max), its
    sum of exp(x - max), AllReduce(sum), then normalises its own columns; the backward
    AllReduces the row sums of dy * y (dx = y (dy - sum(dy y))). Per rank that is three
    AllReduces of one value per row, against moving the cut off the axis (an AllToAll, or
    AllGather + Split); the planner takes the cheaper and explain() names both."""

    name, fwd, bwd = "Softmax", "auto.softmax", "auto.softmax_bwd"

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        axes = axis_tuple(self.name, self.axis, len(la))
        return [la], la, la, "".join(la[a] for a in axes)

    def attrs(self, shapes):
        return {"axis": axis_tuple(self.name, self.axis, len(shapes[0]))}

    def planner_may_cut(self, shapes) -> str:
        return self.spec(shapes)[3]

    def _row_stat(self, sharding, shapes, tensor, what: str, why: str):
        """The AllReduce of a per-row statistic over the group cutting the softmax axes, or None."""
        lay, axes = sharding.inputs[0], self.attrs(shapes)["axis"]
        cut = tuple(a for d in axes for a in lay.dims[d] if lay.mesh.axis_size(a) > 1)
        if not cut:
            return None
        mesh = lay.mesh
        kept = [() if d in axes else tuple(lay.dims[d]) for d in range(len(shapes[0]))]
        stat = tuple(1 if d in axes else n for d, n in enumerate(lay.local_shape(shapes[0])))
        n = prod(mesh.axis_size(a) for a in cut)
        moved = cost_bytes(redistribute(lay, Layout(mesh, kept), shapes[0], alltoall=False))
        return Step("all_reduce", cut, None, None, Layout(mesh, kept, cut), Layout(mesh, kept),
                    tuple(mesh.groups(cut)), prod(stat) * 8,
                    f"the softmax axis of {tensor} stays cut {n} ways (as XLA): AllReduce({what}) of the "
                    f"per-row {why}; gathering the axis instead would put {moved:g} B per rank on the wire")

    def inner_steps(self, sharding, shapes, tensor):
        st = self._row_stat(sharding, shapes, tensor, "max", "maximum")
        if st is None:
            return []
        return [("auto.softmax_max", st, "max"),
                ("auto.softmax_sumexp", self._row_stat(sharding, shapes, tensor, "sum", "sum of exp(x - max)"), "sum")]

    def inner_backward_steps(self, sharding, shapes, tensor):
        st = self._row_stat(sharding, shapes, "d" + tensor, "sum", "sum of dy * y")
        return [] if st is None else [("auto.softmax_dot", st, "sum")]


class LayerNorm(Primitive):
    """LayerNorm(begin_norm_axis, begin_params_axis, epsilon) as MindSpore: normalise over the
    dims from begin_norm_axis on, which must not be cut; gamma and beta have the shape of the
    dims from begin_params_axis on and are cut like them (layer_norm_info.cc)."""

    name, n_inputs, grad_inputs = "LayerNorm", 3, (0, 1, 2)
    fwd, bwd = "auto.layer_norm", "auto.layer_norm_bwd"

    def __init__(self, begin_norm_axis: int = -1, begin_params_axis: int = -1, epsilon: float = 1e-5):
        super().__init__()
        self.begin_norm_axis, self.begin_params_axis = int(begin_norm_axis), int(begin_params_axis)
        self.epsilon = float(epsilon)

    def _axes(self, x) -> tuple[int, int]:
        n = len(x)
        for nm, v in (("begin_norm_axis", self.begin_norm_axis), ("begin_params_axis", self.begin_params_axis)):
            need(-n <= v < n, f"{self.name}: {nm} {v} is outside a rank-{n} input")
        return self.begin_norm_axis % n, self.begin_params_axis % n

    def spec(self, shapes):
        x, g, b = shapes
        bn, bp = self._axes(x)
        need(tuple(g) == tuple(x[bp:]) and tuple(b) == tuple(x[bp:]),
             f"{self.name}: gamma {tuple(g)} and beta {tuple(b)} must both have shape {tuple(x[bp:])}")
        la = LETTERS[:len(x)]
        return [la, la[bp:], la[bp:]], la, la, la[bn:]

    def attrs(self, shapes):
        bn, bp = self._axes(shapes[0])
        return {"begin_norm_axis": bn, "begin_params_axis": bp, "epsilon": self.epsilon}


class ReduceSum(Primitive):
    """Sum over `axis` (an int, a tuple, or () for all); a cut reduced dim leaves partial sums,
    resolved by one AllReduce over the combined group of every cut reduced dim
    (reduce_method_info.cc)."""

    name, fwd, bwd = "ReduceSum", "auto.reduce", "auto.reduce_bwd"
    kind = "sum"

    def __init__(self, axis=-1, keep_dims: bool = False):
        super().__init__()
        self.axis, self.keep_dims = axis, bool(keep_dims)

    def _axes(self, shape) -> tuple[int, ...]:
        return axis_tuple(self.name, self.axis, len(shape))

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        axes = self._axes(shapes[0])
        out = "".join(("_" if self.keep_dims else "") if d in axes else c for d, c in enumerate(la))
        return [la], out, la, self._whole(la, axes)

    def _whole(self, la, axes) -> str:
        return ""

    def attrs(self, shapes):
        axes = self._axes(shapes[0])
        count = 1
        for a in axes:
            count *= shapes[0][a]
        return {"axis": axes, "keep_dims": self.keep_dims, "kind": self.kind,
                "scale": 1.0 / count if self.kind == "mean" else 1.0}


class ReduceMean(ReduceSum):
    """Mean over `axis`: each rank sums its slice and scales by 1 / (global count)."""
    name, kind = "ReduceMean", "mean"


class ReduceMax(ReduceSum):
    """Max over `axis`. MindSpore cuts a reduced dim and inserts AllReduce(max); parasim keeps
    the reduced dims whole (the backward would need the global max on every rank), so a strategy
    cutting one is refused with the rule's message."""

    name, kind = "ReduceMax", "max"

    def _whole(self, la, axes):
        return "".join(la[a] for a in axes)


class Gather(Primitive):
    """Gather(axis=0)(table, indices): rows of a 2-d table (an embedding lookup). MindSpore's
    rules (gather_info.cc):
    - table cut by columns only ((1, c), indices any): each rank looks up its columns; no
      communication;
    - table cut by rows ((r, c), indices (1, ..)) -- vocabulary parallelism: each rank masks the
      indices outside its rows (Sub offset, clip, Equal), looks up, multiplies by the mask, and
      the partial results are summed: ReduceScatter along output dim 0 when indices dim 0 divides
      by r, AllReduce otherwise; the indices may not be cut,
    - except "shard batch and axis": table (r, 1) with indices (d, 1) where r x d is the
      device count and neither is: AllReduce;
    - a row-split table on fewer devices than D (table (4, 1) on 8) repeats on the LEFT of the
      device matrix (ShardAxisImpl::SetAttribute: repeated_num_in_dev_matrix_right_ is false
      unless the table's cuts multiply to 1 or D), so the sum runs over consecutive ranks
      ({0..3}, {4..7}) and the mirror over ranks D / 2 apart ({0, 4}, ...);
    - out_strategy picks the forward collective (GatherInfo::CheckOutputStrategy): the indices'
      strategy followed by the table's column cut gives AllReduce; the same with dim 0 times the
      row cut, ReduceScatter. parasim also accepts other output cuts (the sequence-parallel GPT
      cuts the sequence, which MindSpore's Gather cannot express).
    The backward of each is its adjoint (MindSpore's convention: AllGather, AllReduce)."""

    name, n_inputs, grad_inputs = "Gather", 2, (0,)
    batch_input = 1
    fwd, bwd = "auto.gather", "auto.gather_bwd"

    def __init__(self, axis: int = 0):
        super().__init__()
        need(axis == 0, f"{self.name}: only axis=0 (rows of the table) is modelled, got {axis}")
        self.axis = 0

    def __call__(self, *args):
        """MindSpore's spelling `Gather()(params, indices, axis)`; `Gather(axis)(params, indices)`
        is kept (the axis then comes from the constructor)."""
        if len(args) == 3 and not isinstance(args[2], Tensor):
            axis = args[2]
            need(isinstance(axis, int) and axis == 0,
                 f"{self.name}: only axis=0 (rows of the table) is modelled, got {axis!r}")
            args = args[:2]
        return super().__call__(*args)

    def spec(self, shapes):
        t, i = shapes
        need(len(t) == 2 and len(i) >= 1, f"{self.name}: needs a 2-d table and indices of rank >= 1, "
                                          f"got {tuple(t)} and {tuple(i)}")
        li = "abcdef"[:len(i)]
        return ["vh", li], li + "h", li + "vh", ""

    def check(self, sharding) -> None:
        """MindSpore's rule for a row-split table (called by strategy building)."""
        v, h = sharding.inputs[0].splits
        idx = sharding.inputs[1].splits
        if v > 1 and any(c > 1 for c in idx):
            D = sharding.mesh.size
            batch_and_axis = (h == 1 and len(idx) == 2 and idx[1] == 1 and v * idx[0] == D)
            need(batch_and_axis, f"{self.name}: the table is cut {v} ways along its rows, so the indices "
                                 f"may not be cut (got {idx}); only table (r, 1) with indices (d, 1) and "
                                 f"r x d = {D} devices is allowed (MindSpore gather_info.cc, "
                                 f"ShardBatchAndAxis)")

    def repeat_on_left(self, strategy, device_num: int) -> bool:
        """A row-split table whose cuts use more than 1 and fewer than D devices (docstring)."""
        try:
            table = [int(c) for c in strategy[0]]
        except (TypeError, ValueError, IndexError):
            return False  # a TensorLayout names its own device matrix
        return table[0] > 1 and 1 < prod(table) < device_num

    def out_layout(self, raw, shapes):
        """ReduceScatter along output dim 0 when the rows are cut and the indices are not and
        their dim 0 divides by the row cut (gather_info.cc); None (AllReduce) otherwise."""
        i = shapes[1]
        rows = tuple(raw.partial)
        r = prod(raw.mesh.axis_size(a) for a in rows)
        if r == 1 or any(prod(raw.mesh.axis_size(a) for a in raw.dims[d]) > 1 for d in range(len(i))):
            return None
        if i[0] % r:
            return None  # AllReduce (gather_info.cc: index_shape(0) % param_strategy(0) != 0)
        return Layout(raw.mesh, [tuple(raw.dims[0]) + rows] + [tuple(d) for d in raw.dims[1:]])

    def rank_attrs(self, sharding, shapes):
        lay = sharding.inputs[0]
        rows = lay.local_shape(shapes[0])[0]
        return lambda r: {"offset": int(lay.block_index(r)[0]) * rows}
