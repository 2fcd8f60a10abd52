"""Local shard kernels of the auto-parallel math and shape operators, registered in
`simulator.ops` (compile.py imports this module and op_kernels_nn.py).

Each forward kernel computes one rank's block from its input blocks; each backward kernel takes
(dy, forward inputs...) and returns the gradients of the differentiable inputs, recomputing what
it needs (no caches cross instructions). Redistribution helpers (pad, all-to-all pack/unpack)
and the SGD step live here too.
"""

from __future__ import annotations

import numpy as np

from ..models.functional import gelu_backward, gelu_forward
from ..ops import kernel


def _t(a, flag):
    return np.swapaxes(a, -1, -2) if flag else a


def unbroadcast(g, shape):
    """Sum g over the dims numpy broadcasting added or stretched to reach g's shape."""
    shape = tuple(shape)
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and g.shape[d] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


@kernel("auto.matmul")
def matmul(a, b, transpose_a=False, transpose_b=False):
    return np.matmul(_t(a, transpose_a), _t(b, transpose_b))  # (.., m, k) @ (.., k, n)


@kernel("auto.matmul_bwd")
def matmul_bwd(dy, a, b, transpose_a=False, transpose_b=False):
    """dA = dY B^T, dB = A^T dY (transposed back as stored); a 2-d B shared by a batch sums."""
    A, B = _t(a, transpose_a), _t(b, transpose_b)
    dA = np.matmul(dy, np.swapaxes(B, -1, -2))
    dB = np.matmul(np.swapaxes(A, -1, -2), dy)
    if dB.ndim > b.ndim:
        dB = dB.sum(axis=tuple(range(dB.ndim - b.ndim)))
    return _t(dA, transpose_a), _t(dB, transpose_b)


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@kernel("auto.binary")
def binary(a, b, kind):
    return _BINARY[kind](a, b)


@kernel("auto.binary_bwd")
def binary_bwd(dy, a, b, kind):
    if kind == "add":
        da, db = dy, dy
    elif kind == "sub":
        da, db = dy, -dy
    elif kind == "mul":
        da, db = dy * b, dy * a
    else:
        da, db = dy / b, -dy * a / (b * b)
    return unbroadcast(np.asarray(da), a.shape).copy(), unbroadcast(np.asarray(db), b.shape).copy()


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@kernel("auto.unary")
def unary(x, kind, dtype="float64"):
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "gelu":
        return gelu_forward(x)[0]
    if kind == "sigmoid":
        return _sigmoid(x)
    if kind == "tanh":
        return np.tanh(x)
    return x.astype(dtype).astype(x.dtype)  # cast: round to dtype, keep the reference dtype


@kernel("auto.unary_bwd")
def unary_bwd(dy, x, kind, dtype="float64"):
    if kind == "relu":
        return dy * (x > 0)
    if kind == "gelu":
        return gelu_backward(x, dy)
    if kind == "sigmoid":
        s = _sigmoid(x)
        return dy * s * (1.0 - s)
    if kind == "tanh":
        return dy * (1.0 - np.tanh(x) ** 2)
    return dy.astype(dtype).astype(dy.dtype)


def _dropout_mask(shape, keep_prob, seed, start, local):
    full = np.random.default_rng(seed).random(tuple(shape)) < keep_prob
    return full[tuple(slice(s, s + n) for s, n in zip(start, local))] / keep_prob


@kernel("auto.dropout")
def dropout(x, keep_prob, seed, shape, start):
    return x * _dropout_mask(shape, keep_prob, seed, start, x.shape)


@kernel("auto.dropout_bwd")
def dropout_bwd(dy, x, keep_prob, seed, shape, start):
    return dy * _dropout_mask(shape, keep_prob, seed, start, x.shape)


@kernel("auto.transpose")
def transpose(x, perm):
    return np.transpose(x, perm).copy()


@kernel("auto.transpose_bwd")
def transpose_bwd(dy, x, perm):
    return np.transpose(dy, np.argsort(perm)).copy()


@kernel("auto.reshape")
def reshape(x, shape):
    return x.reshape(shape).copy()


@kernel("auto.reshape_bwd")
def reshape_bwd(dy, x, shape=None):
    return dy.reshape(x.shape).copy()


@kernel("auto.tile")
def tile(x, multiples):
    return np.tile(x, multiples)


@kernel("auto.tile_bwd")
def tile_bwd(dy, x, multiples):
    """Sum the copies: dim d of dy is (copies, x.shape[d]) in np.tile's order."""
    shape = [v for m, n in zip(multiples, x.shape) for v in (m, n)]
    return dy.reshape(shape).sum(axis=tuple(range(0, 2 * x.ndim, 2)))


@kernel("auto.concat")
def concat(*xs, axis, sizes):
    return np.concatenate(xs, axis=axis)


@kernel("auto.concat_bwd")
def concat_bwd(dy, *xs, axis, sizes):
    return tuple(np.split(dy, np.cumsum(sizes)[:-1], axis=axis))


@kernel("auto.strided_slice")
def strided_slice(x, begin, end, strides):
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].copy()


@kernel("auto.strided_slice_bwd")
def strided_slice_bwd(dy, x, begin, end, strides):
    out = np.zeros_like(x)
    out[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))] = dy
    return out


# ---- redistribution and optimizer helpers ---------------------------------------------------
@kernel("auto.pad")
def pad(x, parts: int, index: int, axis: int):
    """Embed x as block `index` of `parts` along `axis`, zeros elsewhere (adjoint of split)."""
    shape = list(x.shape)
    n = shape[axis]
    shape[axis] = n * parts
    out = np.zeros(shape, dtype=x.dtype)
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(index * n, (index + 1) * n)
    out[tuple(sl)] = x
    return out


@kernel("auto.a2a_pack")
def a2a_pack(x, parts: int, axis: int):
    """Cut along `axis` into `parts` and stack them on a new axis 0 (all_to_all sends part j to
    member j)."""
    return np.stack(np.split(x, parts, axis=axis))


@kernel("auto.a2a_unpack")
def a2a_unpack(x, axis: int):
    """The received parts (stacked on axis 0 in member order) concatenated along `axis`."""
    return np.concatenate(list(x), axis=axis)


@kernel("auto.sgd")
def sgd(w, g, lr: float):
    return w - lr * g
