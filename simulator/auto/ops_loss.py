"""Losses: SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits (with the class
dim cut: vocabulary-parallel cross-entropy), OneHot, MSELoss.

MindSpore's SoftmaxCrossEntropyWithLogits refuses a cut class dim
(softmax_cross_entropy_with_logits_info.cc: "the strategy corresponding to axis dimension is not
1"); MindSpore's transformer loss (mindspore.parallel's CrossEntropyLoss, as Megatron-LM's
vocab-parallel cross entropy) computes it with the class dim cut instead, fused: per row
    m = AllReduce_max(local max),  s = AllReduce_sum(sum exp(z - m)),
    loss = m + log s - z[label]    (z[label] lives on one rank: a partial sum, AllReduce),
and that is what these operators do when the strategy cuts the class dim. The backward needs
no further communication: d z = (exp(z - m) / s - onehot) dy on each rank's own columns.
"""

from __future__ import annotations

from math import prod

from ..layout import Layout
from .primitive import LETTERS, Primitive, need
from .redistribution import Step


class SparseSoftmaxCrossEntropyWithLogits(Primitive):
    """Mean over rows of -log softmax(logits)[label]: (N, C) logits, (N,) integer labels; the
    output is a scalar (MindSpore's is_grad=False form; nn.SoftmaxCrossEntropyWithLogits(
    sparse=True, reduction="mean")). Strategy ((n, c), (n,)): c > 1 cuts the classes."""

    name, n_inputs, grad_inputs = "SparseSoftmaxCrossEntropyWithLogits", 2, (0,)
    fwd, bwd = "auto.ce", "auto.ce_bwd"
    sparse, reduce_rows = True, True

    def spec(self, shapes):
        z, t = shapes
        need(len(z) == 2 and tuple(t) == (z[0],),
             f"{self.name}: logits must be (N, C) and labels (N,), got {tuple(z)} and {tuple(t)}")
        return ["mn", "m"], "", "mn", ""

    def attrs(self, shapes):
        return {"scale": 1.0 / shapes[0][0], "sparse": self.sparse, "reduce_rows": self.reduce_rows}

    def rank_attrs(self, sharding, shapes):
        lay = sharding.inputs[0]
        cols = lay.local_shape(shapes[0])[1]
        return lambda r: {"offset": int(lay.block_index(r)[1]) * cols,
                          "first": float(lay.block_index(r)[1] == 0)}

    def inner_steps(self, sharding, shapes, tensor):
        """(kernel, AllReduce step or None, reduce op): the row max, then the row sum of exps."""
        lay = sharding.inputs[0]
        axes = tuple(a for a in lay.dims[1] if lay.mesh.axis_size(a) > 1)
        rows = lay.local_shape(shapes[0])[0]
        if not axes:
            return [("auto.ce_max", None, "max"), ("auto.ce_sumexp", None, "sum")]
        mesh = lay.mesh
        vec = Layout(mesh, [tuple(lay.dims[0])], axes)
        done = Layout(mesh, [tuple(lay.dims[0])])
        n = prod(mesh.axis_size(a) for a in axes)
        groups = tuple(mesh.groups(axes))

        def step(what):
            return Step("all_reduce", axes, None, None, vec, done, groups, rows * 8,
                        f"the classes of {tensor} are cut {n} ways: AllReduce({what}) of the "
                        f"per-row {what} over the class group (fused cross-entropy)")
        return [("auto.ce_max", step("max"), "max"), ("auto.ce_sumexp", step("sum"), "sum")]


class SoftmaxCrossEntropyWithLogits(SparseSoftmaxCrossEntropyWithLogits):
    """Per-row loss -sum(labels * log softmax(logits)) with dense (N, C) labels (one-hot, or
    soft); output (N,). Strategy ((n, c), (n, c))."""

    name, sparse, reduce_rows = "SoftmaxCrossEntropyWithLogits", False, False

    def spec(self, shapes):
        z, t = shapes
        need(len(z) == 2 and tuple(t) == tuple(z),
             f"{self.name}: logits and labels must both be (N, C), got {tuple(z)} and {tuple(t)}")
        return ["mn", "mn"], "m", "mn", ""

    def attrs(self, shapes):
        return dict(super().attrs(shapes), scale=1.0)


class SoftmaxCrossEntropy(SparseSoftmaxCrossEntropyWithLogits):
    """parasim's short name for the sparse mean loss with the class dim kept whole."""

    name = "SoftmaxCrossEntropy"

    def spec(self, shapes):
        ins, out, order, _ = super().spec(shapes)
        return ins, out, order, "n"


class OneHot(Primitive):
    """OneHot(depth, on_value, off_value) of integer indices (any rank) -> indices.shape +
    (depth,). As MindSpore (onehot_info.cc) the strategy is the OUTPUT's: ((.., c),) with c
    cutting the depth; each rank writes its own columns. No gradient."""

    name, grad_inputs = "OneHot", ()
    fwd, bwd = "auto.one_hot", ""

    def __init__(self, depth: int, on_value: float = 1.0, off_value: float = 0.0):
        super().__init__()
        need(int(depth) >= 1, f"OneHot: depth must be >= 1, got {depth!r}")
        self.depth, self.on_value, self.off_value = int(depth), float(on_value), float(off_value)

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        return [la], la + "z", la + "z", ""

    def out_shape(self, shapes):
        return tuple(shapes[0]) + (self.depth,)

    def strategy_view(self, shapes):
        la = LETTERS[:len(shapes[0])]
        return [la + "z"], [tuple(shapes[0]) + (self.depth,)]

    def attrs(self, shapes):
        return {"on_value": self.on_value, "off_value": self.off_value}

    def rank_attrs(self, sharding, shapes):
        out = sharding.raw
        shape = self.out_shape(shapes)
        cols = out.local_shape(shape)[-1]
        return lambda r: {"offset": int(out.block_index(r)[-1]) * cols, "depth": cols}


class MSELoss(Primitive):
    """Mean over all elements of (y - target)^2."""

    name, n_inputs, grad_inputs = "MSELoss", 2, (0, 1)
    fwd, bwd = "auto.mse", "auto.mse_bwd"

    def spec(self, shapes):
        y, t = shapes
        need(tuple(y) == tuple(t), f"{self.name}: prediction {y} and target {t} differ in shape")
        la = LETTERS[:len(y)]
        return [la, la], "", la, ""

    def attrs(self, shapes):
        return {"scale": 1.0 / prod(shapes[0])}
