"""MatMul, BatchMatMul, broadcasting arithmetic (Add, Sub, Mul, Div) and elementwise unary
operators, with MindSpore's sharding rules (`ops_info/matmul_info.cc`, `arithmetic_info.cc`,
`activation_info.cc`, `dropout_info.cc`).

Broadcasting follows numpy (and MindSpore's arithmetic_info.cc): shapes are aligned on the
right; a dim of size 1 facing a larger one is broadcast and must not be cut (its strategy value
is 1); dims both inputs have at the same size are cut alike. The gradient of a broadcast input
is summed over the broadcast dims, a partial sum where the output dim is cut.
"""

from __future__ import annotations

from math import prod

from .primitive import LETTERS, Primitive, need


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
        need(len(a) == 2 and len(b) == 2, f"{self.name}: needs two 2-d inputs, got {a} and {b}")
        la, lb = ("km" if self.transpose_a else "mk"), ("nk" if self.transpose_b else "kn")
        ka, kb = a[la.index("k")], b[lb.index("k")]
        need(ka == kb, f"{self.name}: contraction sizes differ: input 0 has K={ka}, input 1 "
                       f"has K={kb}")
        return [la, lb], "mn", "mkn", ""

    def attrs(self, shapes):
        return {"transpose_a": self.transpose_a, "transpose_b": self.transpose_b}

    def flops(self, local_shapes, local_out):
        k = local_shapes[0][0 if self.transpose_a else 1]
        return 2.0 * prod(local_out) * k


class BatchMatMul(MatMul):
    """y[..] = x[..] @ w[..]: x of rank >= 3, w of the same rank (same batch dims) or 2-d
    (shared by the batch). Device matrix [batch dims.., a, k, c] (batch_matmul_info.cc)."""

    name = "BatchMatMul"

    def spec(self, shapes):
        a, b = shapes
        need(len(a) >= 3 and len(b) in (2, len(a)),
             f"{self.name}: needs an input of rank >= 3 and a 2-d input or one of the same rank, "
             f"got {a} and {b}")
        batch = "abcdefgh"[:len(a) - 2]
        la = batch + ("km" if self.transpose_a else "mk")
        lb = (batch if len(b) == len(a) else "") + ("nk" if self.transpose_b else "kn")
        need(len(b) == 2 or tuple(a[:-2]) == tuple(b[:-2]),
             f"{self.name}: batch dims differ: {tuple(a[:-2])} and {tuple(b[:-2])}")
        need(a[la.index("k")] == b[lb.index("k")],
             f"{self.name}: contraction sizes differ: {a[la.index('k')]} and {b[lb.index('k')]}")
        return [la, lb], batch + "mn", batch + "mkn", ""

    def flops(self, local_shapes, local_out):
        return 2.0 * prod(local_out) * local_shapes[0][-2 if self.transpose_a else -1]


def broadcast_spec(name: str, shapes) -> tuple[list[str], str]:
    """Letters of numpy broadcasting: shared letters where sizes agree, a private letter (kept
    whole) for a size-1 dim facing a larger one."""
    r = max(len(s) for s in shapes)
    out, ins = [], [[] for _ in shapes]
    private = iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    for d in range(r):
        sizes = [s[d - r + len(s)] if d - r + len(s) >= 0 else None for s in shapes]
        big = max(v for v in sizes if v is not None)
        need(all(v in (None, 1, big) for v in sizes),
             f"{name}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast "
             f"(dim {d} of the output: sizes {[v for v in sizes if v is not None]})")
        out.append(LETTERS[d])
        for i, v in enumerate(sizes):
            if v is not None:
                ins[i].append(LETTERS[d] if v == big else next(private))
    return ["".join(s) for s in ins], "".join(out)


class _Binary(Primitive):
    n_inputs, grad_inputs = 2, (0, 1)
    fwd, bwd = "auto.binary", "auto.binary_bwd"
    kind = "add"

    def spec(self, shapes):
        ins, out = broadcast_spec(self.name, shapes)
        private = "".join(c for s in ins for c in s if c.isupper())
        return ins, out, out + private, private

    def attrs(self, shapes):
        return {"kind": self.kind}


class Add(_Binary):
    """y = x + b with numpy broadcasting."""
    name, kind = "Add", "add"


class BiasAdd(Add):
    """y = x + b, b 1-d over the last dim (MindSpore BiasAdd)."""
    name = "BiasAdd"

    def spec(self, shapes):
        need(len(shapes[1]) == 1 and shapes[1][0] == shapes[0][-1],
             f"{self.name}: the bias must be 1-d of size {shapes[0][-1]}, got {shapes[1]}")
        return super().spec(shapes)


def _kind_op(base, name: str, kind: str, doc: str):
    """An operator that only names its kernel `kind` (the base holds the letters and kernels)."""
    return type(name, (base,), {"name": name, "kind": kind, "__doc__": doc,
                                "__module__": __name__})


Sub = _kind_op(_Binary, "Sub", "sub", "y = x - b with numpy broadcasting.")
Mul = _kind_op(_Binary, "Mul", "mul", "y = x * b with numpy broadcasting.")
Div = _kind_op(_Binary, "Div", "div", "y = x / b with numpy broadcasting.")


class _Unary(Primitive):
    fwd, bwd = "auto.unary", "auto.unary_bwd"
    kind = ""

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        return [la], la, la, ""

    def attrs(self, shapes):
        return {"kind": self.kind}


ReLU = _kind_op(_Unary, "ReLU", "relu", "y = max(x, 0), elementwise (any strategy).")
GeLU = _kind_op(_Unary, "GeLU", "gelu", "y = GeLU(x), tanh approximation, elementwise.")
Sigmoid = _kind_op(_Unary, "Sigmoid", "sigmoid", "y = 1 / (1 + exp(-x)), elementwise.")
Tanh = _kind_op(_Unary, "Tanh", "tanh", "y = tanh(x), elementwise.")
Identity = _kind_op(_Unary, "Identity", "identity",
                    "y = x; with a strategy it fixes a layout (Cell.shard's in/out_strategy).")


def is_elementwise(op) -> bool:
    """Unary and broadcasting arithmetic operators (set_algo_parameters'
    elementwise_op_strategy_follow applies to them)."""
    return isinstance(op, (_Unary, _Binary))


class Cast(_Unary):
    """Cast to `dtype` (MindSpore Cast; any strategy). The gradient is cast back. Runs keep
    float64 for the equivalence checks, so float32 / float16 round the values."""

    name, kind = "Cast", "cast"

    def __init__(self, dtype: str = "float32"):
        super().__init__()
        self.dtype = str(dtype)

    def attrs(self, shapes):
        return {"kind": "cast", "dtype": self.dtype}


class Dropout(_Unary):
    """Dropout(keep_prob): zero each element with probability 1 - keep_prob, scale the rest by
    1 / keep_prob (MindSpore Dropout; any strategy, dropout_info.cc). The mask is drawn from
    `seed` over the GLOBAL tensor and each rank takes its block, so every plan drops the same
    elements as one device (MindSpore draws per-rank masks; parasim fixes them to compare)."""

    name, fwd, bwd = "Dropout", "auto.dropout", "auto.dropout_bwd"

    def __init__(self, keep_prob: float = 0.9, seed: int = 0):
        super().__init__()
        need(0.0 < float(keep_prob) <= 1.0, f"Dropout: keep_prob must be in (0, 1], got {keep_prob!r}")
        self.keep_prob, self.seed = float(keep_prob), int(seed)

    def attrs(self, shapes):
        return {"keep_prob": self.keep_prob, "seed": self.seed, "shape": tuple(shapes[0])}

    def rank_attrs(self, sharding, shapes):
        lay = sharding.inputs[0]
        return lambda r: {"start": block_start(lay, shapes[0], r)}


def block_start(layout, shape, rank: int) -> tuple[int, ...]:
    """The global index of the first element of `rank`'s block."""
    local = layout.local_shape(shape)
    return tuple(int(b) * n for b, n in zip(layout.block_index(rank), local))
