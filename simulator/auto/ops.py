"""Operators for auto-parallel networks, each with `.shard(in_strategy, out_strategy=None)`.

Write single-device code; the shard strategies decide the parallel form:

    net = Network(); x = net.input("x", (64, 32)); w = net.parameter("w", w0)
    y = ops.MatMul().shard(((2, 4), (4, 1)))(x, w)
    loss = ops.SparseSoftmaxCrossEntropyWithLogits()(y, labels)

The operators live in ops_math.py (MatMul, BatchMatMul, Add/Sub/Mul/Div, activations, Cast,
Dropout), ops_shape.py (Reshape, Transpose, ExpandDims, Tile, Concat, StridedSlice), ops_nn.py
(Softmax, LayerNorm, reductions, Gather) and ops_loss.py (cross-entropies, OneHot, MSELoss);
each docstring states MindSpore's sharding rule and what the operator inserts.
"""

from .ops_loss import (
    MSELoss,
    OneHot,
    SoftmaxCrossEntropy,
    SoftmaxCrossEntropyWithLogits,
    SparseSoftmaxCrossEntropyWithLogits,
)
from .ops_math import (
    Add,
    BatchMatMul,
    BiasAdd,
    Cast,
    Div,
    Dropout,
    GeLU,
    Identity,
    MatMul,
    Mul,
    ReLU,
    Sigmoid,
    Sub,
    Tanh,
)
from .ops_nn import Gather, LayerNorm, ReduceMax, ReduceMean, ReduceSum, Softmax
from .ops_shape import Concat, ExpandDims, Reshape, StridedSlice, Tile, Transpose
from .primitive import LETTERS, Primitive

OPERATORS = {c.name.lower(): c for c in (
    MatMul, BatchMatMul, Add, BiasAdd, Sub, Mul, Div, ReLU, GeLU, Sigmoid, Tanh, Cast, Dropout, Identity,
    Softmax, LayerNorm, ReduceSum, ReduceMean, ReduceMax, Gather, OneHot, Transpose, Reshape,
    ExpandDims, Tile, Concat, StridedSlice, SoftmaxCrossEntropy, SoftmaxCrossEntropyWithLogits,
    SparseSoftmaxCrossEntropyWithLogits, MSELoss)}

__all__ = ["LETTERS", "OPERATORS", "Primitive"] + sorted(c.__name__ for c in OPERATORS.values())
