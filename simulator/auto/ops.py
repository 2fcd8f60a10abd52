"""Operators for auto-parallel networks, each with `.shard(in_strategy, out_strategy=None)`.

Every operator declares its index letters (an einsum, see strategy.py), the numpy kernels that
compute one rank's shard (registered in op_kernels.py) and which inputs take gradients. Write
single-device code; the shard strategies decide the parallel form:

    net = Network(); x = net.input("x", (64, 32)); w = net.parameter("w", w0)
    y = MatMul().shard(((2, 4), (4, 1)))(x, w)
    loss = SoftmaxCrossEntropy()(y, labels)
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..errors import ParasimError
from .graph import Tensor

LETTERS = "abcdefgh"


class Primitive:
    """Base operator. Subclasses set `name`, `n_inputs`, `grad_inputs` and implement `spec`,
    `out_shape`, and the kernel names `fwd` / `bwd` (see op_kernels.py)."""

    name = "Primitive"
    n_inputs = 1
    grad_inputs: tuple[int, ...] = (0,)
    fwd = bwd = ""
    pipeline_stage: int | None = None  # set `op.pipeline_stage = k` (MindSpore's cell attribute)

    def __init__(self):
        self.in_strategy = None
        self.out_strategy = None

    def shard(self, in_strategy, out_strategy=None) -> "Primitive":
        """MindSpore `Primitive.shard`: one tuple (or Layout(...) call) per input."""
        if not isinstance(in_strategy, (tuple, list)):
            raise ParasimError(f"{self.name}.shard: in_strategy must be a tuple of per-input "
                               f"strategies, got {in_strategy!r}")
        self.in_strategy = tuple(in_strategy)
        self.out_strategy = None if out_strategy is None else tuple(out_strategy)
        return self

    def __call__(self, *tensors):
        if len(tensors) != self.n_inputs:
            raise ParasimError(f"{self.name} takes {self.n_inputs} input(s), got {len(tensors)}")
        if not all(isinstance(t, Tensor) for t in tensors):
            raise ParasimError(f"{self.name}: inputs must be network tensors (net.input, "
                               f"net.parameter or an operator's output)")
        net = tensors[0].net
        if any(t.net is not net for t in tensors):
            raise ParasimError(f"{self.name}: inputs come from different networks")
        shapes = [t.shape for t in tensors]
        return net.add_node(self, tensors, tuple(self.out_shape(shapes)))

    # ---- what subclasses define ------------------------------------------------------------------
    def spec(self, shapes) -> tuple[list[str], str, str, str]:
        """(input letters, output letters, device-matrix order, unsplittable letters)."""
        raise NotImplementedError

    def out_shape(self, shapes) -> tuple[int, ...]:
        ins, out, _, _ = self.spec(shapes)
        size = {c: n for s, shape in zip(ins, shapes) for c, n in zip(s, shape)}
        return tuple(size.get(c, 1) for c in out)

    def attrs(self, shapes) -> dict:
        """Kernel attributes; may depend on global shapes (a mean divides by the global count)."""
        return {}

    def flops(self, local_shapes, local_out) -> float:
        return float(prod(local_out)) if local_out else 1.0

    def __repr__(self) -> str:
        s = "" if self.in_strategy is None else f".shard({self.in_strategy})"
        return f"{self.name}(){s}"


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ParasimError(msg)


class MatMul(Primitive):
    """y = x @ w (transpose_a / transpose_b as MindSpore). Letters m k n; device matrix
    [a, k, c] whatever the transposes (matmul_info.cc)."""

    name, n_inputs, grad_inputs = "MatMul", 2, (0, 1)
    fwd, bwd = "auto.matmul", "auto.matmul_bwd"

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        super().__init__()
        self.transpose_a, self.transpose_b = bool(transpose_a), bool(transpose_b)

    def spec(self, shapes):
        a, b = shapes
        _need(len(a) == 2 and len(b) == 2, f"{self.name}: needs two 2-d inputs, got {a} and {b}")
        la, lb = ("km" if self.transpose_a else "mk"), ("nk" if self.transpose_b else "kn")
        ka, kb = a[la.index("k")], b[lb.index("k")]
        _need(ka == kb, f"{self.name}: contraction sizes differ: input 0 has K={ka}, input 1 "
                        f"has K={kb}")
        return [la, lb], "mn", "mkn", ""

    def attrs(self, shapes):
        return {"transpose_a": self.transpose_a, "transpose_b": self.transpose_b}

    def flops(self, local_shapes, local_out):
        k = local_shapes[0][0 if self.transpose_a else 1]
        return 2.0 * prod(local_out) * k


class BatchMatMul(MatMul):
    """y[b] = x[b] @ w[b] (w may be 2-d, shared by the batch). Device matrix [b, a, k, c]."""

    name = "BatchMatMul"

    def spec(self, shapes):
        a, b = shapes
        _need(len(a) == 3 and len(b) in (2, 3),
              f"{self.name}: needs a 3-d input and a 2-d or 3-d input, got {a} and {b}")
        la = "b" + ("km" if self.transpose_a else "mk")
        lb = ("b" if len(b) == 3 else "") + ("nk" if self.transpose_b else "kn")
        _need(len(b) == 2 or a[0] == b[0], f"{self.name}: batch sizes differ: {a[0]} and {b[0]}")
        _need(a[la.index("k")] == b[lb.index("k")],
              f"{self.name}: contraction sizes differ: {a[la.index('k')]} and {b[lb.index('k')]}")
        return [la, lb], "bmn", "bmkn", ""

    def flops(self, local_shapes, local_out):
        return 2.0 * prod(local_out) * local_shapes[0][1 if self.transpose_a else 2]


class Add(Primitive):
    """y = x + b; b has the shape of x or of its trailing dims (BiasAdd: b is 1-d)."""

    name, n_inputs, grad_inputs = "Add", 2, (0, 1)
    fwd, bwd = "add", "auto.add_bwd"

    def spec(self, shapes):
        a, b = shapes
        _need(len(b) <= len(a) and tuple(a[len(a) - len(b):]) == tuple(b),
              f"{self.name}: input 1 of shape {b} does not match the trailing dims of {a}")
        la = LETTERS[:len(a)]
        return [la, la[len(a) - len(b):]], la, la, ""


class BiasAdd(Add):
    name = "BiasAdd"


class _Unary(Primitive):
    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        return [la], la, la, self._whole(la)

    def _whole(self, la: str) -> str:
        return ""


class ReLU(_Unary):
    name, fwd, bwd = "ReLU", "auto.relu", "auto.relu_bwd"


class GeLU(_Unary):
    name, fwd, bwd = "GeLU", "auto.gelu", "auto.gelu_bwd"


class Softmax(_Unary):
    """Softmax over the last dim, which must stay whole (MindSpore softmax_info.cc)."""
    name, fwd, bwd = "Softmax", "auto.softmax", "auto.softmax_bwd"

    def _whole(self, la):
        return la[-1]


class LayerNorm(Primitive):
    """LayerNorm over the last dim (kept whole); gamma and beta are 1-d parameters."""

    name, n_inputs, grad_inputs = "LayerNorm", 3, (0, 1, 2)
    fwd, bwd = "auto.layer_norm", "auto.layer_norm_bwd"

    def spec(self, shapes):
        x, g, b = shapes
        _need(tuple(g) == (x[-1],) and tuple(b) == (x[-1],),
              f"{self.name}: gamma {g} and beta {b} must both have shape ({x[-1]},)")
        la = LETTERS[:len(x)]
        return [la, la[-1], la[-1]], la, la, la[-1]


class ReduceSum(Primitive):
    """Sum over `axis`; a cut reduced axis leaves partial sums (an AllReduce follows)."""

    name, fwd, bwd = "ReduceSum", "auto.reduce_sum", "auto.reduce_sum_bwd"

    def __init__(self, axis: int = -1, keep_dims: bool = False):
        super().__init__()
        self.axis, self.keep_dims = int(axis), bool(keep_dims)

    def _axis(self, shape) -> int:
        _need(-len(shape) <= self.axis < len(shape),
              f"{self.name}: axis {self.axis} is outside a rank-{len(shape)} input")
        return self.axis % len(shape)

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        ax = self._axis(shapes[0])
        out = la[:ax] + ("_" if self.keep_dims else "") + la[ax + 1:]
        return [la], out, la, ""

    def attrs(self, shapes):
        return {"axis": self._axis(shapes[0]), "keep_dims": self.keep_dims, "scale": 1.0}


class ReduceMean(ReduceSum):
    """Mean over `axis`: each rank sums its slice and scales by 1 / (global size of the axis)."""

    name = "ReduceMean"

    def attrs(self, shapes):
        return dict(super().attrs(shapes), scale=1.0 / shapes[0][self._axis(shapes[0])])


class Transpose(Primitive):
    """y = x.transpose(perm); the output's cuts follow the permutation."""

    name, fwd, bwd = "Transpose", "auto.transpose", "auto.transpose_bwd"

    def __init__(self, perm: Sequence[int]):
        super().__init__()
        self.perm = tuple(int(p) for p in perm)

    def spec(self, shapes):
        _need(sorted(self.perm) == list(range(len(shapes[0]))),
              f"{self.name}: perm {self.perm} is not a permutation of {len(shapes[0])} dims")
        la = LETTERS[:len(shapes[0])]
        return [la], "".join(la[p] for p in self.perm), la, ""

    def attrs(self, shapes):
        return {"perm": self.perm}


class Reshape(Primitive):
    """y = x.reshape(shape). No letters: its input layout is the producer's, kept where a cut
    maps onto the leading dim of a merged or split group, gathered otherwise (plan.py)."""

    name, fwd, bwd = "Reshape", "auto.reshape", "auto.reshape_bwd"

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def out_shape(self, shapes):
        _need(prod(self.shape) == prod(shapes[0]),
              f"{self.name}: cannot reshape {shapes[0]} ({prod(shapes[0])} elements) to "
              f"{self.shape} ({prod(self.shape)} elements)")
        return self.shape

    def spec(self, shapes):
        raise ParasimError("Reshape has no einsum letters")


class SoftmaxCrossEntropy(Primitive):
    """Mean over rows of -log softmax(logits)[label]: (N, C) logits, (N,) integer labels.
    The class dim stays whole; a cut row dim leaves partial sums of the loss (AllReduce)."""

    name, n_inputs, grad_inputs = "SoftmaxCrossEntropy", 2, (0,)
    fwd, bwd = "auto.softmax_ce", "auto.softmax_ce_bwd"

    def spec(self, shapes):
        z, t = shapes
        _need(len(z) == 2 and tuple(t) == (z[0],),
              f"{self.name}: logits must be (N, C) and labels (N,), got {z} and {t}")
        return ["mn", "m"], "", "mn", "n"

    def attrs(self, shapes):
        return {"scale": 1.0 / shapes[0][0]}


class MSELoss(Primitive):
    """Mean over all elements of (y - target)^2."""

    name, n_inputs, grad_inputs = "MSELoss", 2, (0, 1)
    fwd, bwd = "auto.mse", "auto.mse_bwd"

    def spec(self, shapes):
        y, t = shapes
        _need(tuple(y) == tuple(t), f"{self.name}: prediction {y} and target {t} differ in shape")
        la = LETTERS[:len(y)]
        return [la, la], "", la, ""

    def attrs(self, shapes):
        return {"scale": 1.0 / prod(shapes[0])}


OPERATORS = {c.name.lower(): c for c in (MatMul, BatchMatMul, Add, BiasAdd, ReLU, GeLU, Softmax,
                                         LayerNorm, ReduceSum, ReduceMean, Transpose, Reshape,
                                         SoftmaxCrossEntropy, MSELoss)}
