"""Local shard kernels of the auto-parallel operators, registered in `simulator.ops`.

Each forward kernel computes one rank's block from its input blocks; each backward kernel takes
(dy, forward inputs...) and returns the gradients of the differentiable inputs, recomputing what
it needs (no caches cross instructions). Elementwise maths reuses simulator.models.kernels.
Redistribution helpers (pad, all-to-all pack/unpack) and the SGD step live here too.
"""

from __future__ import annotations

import numpy as np

from ..models.kernels import (
    gelu_backward,
    gelu_forward,
    layer_norm_backward_input,
    layer_norm_backward_weight,
    layer_norm_forward,
    relu_backward,
    relu_forward,
)
from ..ops import kernel


def _t(a, flag):
    return np.swapaxes(a, -1, -2) if flag else a


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


@kernel("auto.add_bwd")
def add_bwd(dy, a, b):
    """Broadcast add: db sums dy over the leading dims b lacks."""
    return dy.copy(), dy.reshape((-1,) + b.shape).sum(axis=0) if b.ndim < dy.ndim else dy.copy()


@kernel("auto.relu")
def relu(x):
    return relu_forward(x)[0]


@kernel("auto.relu_bwd")
def relu_bwd(dy, x):
    return relu_backward(x, dy)


@kernel("auto.gelu")
def gelu(x):
    return gelu_forward(x)[0]


@kernel("auto.gelu_bwd")
def gelu_bwd(dy, x):
    return gelu_backward(x, dy)


@kernel("auto.softmax")
def softmax(x):
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@kernel("auto.softmax_bwd")
def softmax_bwd(dy, x):
    """dx = y (dy - sum(dy y)) over the last dim."""
    y = softmax(x)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


@kernel("auto.layer_norm")
def layer_norm(x, gamma, beta):
    return layer_norm_forward(x, gamma, beta)[0]


@kernel("auto.layer_norm_bwd")
def layer_norm_bwd(dy, x, gamma, beta):
    _, cache = layer_norm_forward(x, gamma, beta)
    dg, db = layer_norm_backward_weight(cache, dy)
    return layer_norm_backward_input(cache, dy, gamma), dg, db


@kernel("auto.reduce_sum")
def reduce_sum(x, axis, keep_dims=False, scale=1.0):
    return x.sum(axis=axis, keepdims=keep_dims) * scale


@kernel("auto.reduce_sum_bwd")
def reduce_sum_bwd(dy, x, axis, keep_dims=False, scale=1.0):
    d = dy if keep_dims else np.expand_dims(dy, axis)
    return np.broadcast_to(d * scale, x.shape).copy()


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


@kernel("auto.softmax_ce")
def softmax_ce(logits, labels, scale):
    """scale * sum over this block's rows of logsumexp(z) - z[label] (scale = 1 / global N)."""
    zmax = logits.max(axis=-1, keepdims=True)
    logz = zmax[:, 0] + np.log(np.exp(logits - zmax).sum(axis=-1))
    picked = logits[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)]
    return np.asarray((logz - picked).sum() * scale)


@kernel("auto.softmax_ce_bwd")
def softmax_ce_bwd(dy, logits, labels, scale):
    d = softmax(logits)
    d[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)] -= 1.0
    return d * (scale * dy)


@kernel("auto.mse")
def mse(y, t, scale):
    return np.asarray(((y - t) ** 2).sum() * scale)


@kernel("auto.mse_bwd")
def mse_bwd(dy, y, t, scale):
    d = 2.0 * (y - t) * (scale * dy)
    return d, -d


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
