"""Numpy kernels with hand-written backward passes (float64 by default).

Every kernel is a pure function pair or triple on arrays:

    y, cache = <kernel>_forward(inputs..., params...)
    dx       = <kernel>_backward_input(cache, dy, params...)    # "B" of zero-bubble pipelines
    grads    = <kernel>_backward_weight(cache, dy)              # "W": parameter gradients

Splitting the input gradient from the weight gradient lets a zero-bubble schedule (Qi et al. 2023)
run B now and W later. Nothing is modified in place; dtypes follow the inputs (float64 here).
Attention lives in attention.py. Each kernel is checked against central finite differences in
tests/test_models_kernels.py.
"""

import math

import numpy as np

from ..errors import ParasimError

LN_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)


# ---------------------------------------------------------------- linear: y = x @ W + b
def linear_forward(x, W, b=None):
    """y = x W + b.   x (..., k), W (k, n), b (n,) -> y (..., n).   cache = x."""
    if x.shape[-1] != W.shape[0]:
        raise ParasimError(f"linear: x has last dim {x.shape[-1]} but W has {W.shape[0]} rows")
    y = x @ W  # (..., k) @ (k, n) -> (..., n)
    if b is not None:
        y = y + b
    return y, x


def linear_backward_input(dy, W):
    """dx = dy W^T.   (..., n) @ (n, k) -> (..., k)."""
    return dy @ W.T


def linear_backward_weight(x, dy, has_bias=True):
    """dW = x^T dy summed over all leading dims, db = sum of dy.   Returns (dW, db or None)."""
    x2 = x.reshape(-1, x.shape[-1])  # (m, k)
    dy2 = dy.reshape(-1, dy.shape[-1])  # (m, n)
    dW = x2.T @ dy2  # (k, m) @ (m, n) -> (k, n)
    db = dy2.sum(axis=0) if has_bias else None
    return dW, db


# ---------------------------------------------------------------- activations
def gelu_forward(x):
    """GELU, tanh approximation (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units", eq. 2):
    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).   cache = x."""
    t = np.tanh(GELU_C * (x + 0.044715 * x**3))
    return 0.5 * x * (1.0 + t), x


def gelu_backward(x, dy):
    """d gelu/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)."""
    t = np.tanh(GELU_C * (x + 0.044715 * x**3))
    dgelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * x * x)
    return dy * dgelu


def relu_forward(x):
    """relu(x) = max(x, 0).   cache = x."""
    return np.maximum(x, 0.0), x


def relu_backward(x, dy):
    """d relu/dx = 1 where x > 0, else 0."""
    return dy * (x > 0)


ACTIVATIONS = {"gelu": (gelu_forward, gelu_backward), "relu": (relu_forward, relu_backward)}


# ---------------------------------------------------------------- layer norm (Ba et al. 2016)
def layer_norm_forward(x, gamma, beta, eps=LN_EPS):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta over the last dim (Ba, Kiros & Hinton 2016).
    x (..., h) -> y (..., h).   cache = (xhat (..., h), rstd (..., 1))."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    return xhat * gamma + beta, (xhat, rstd)


def layer_norm_backward_input(cache, dy, gamma):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)), with g = dy * gamma."""
    xhat, rstd = cache
    g = dy * gamma
    return rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))


def layer_norm_backward_weight(cache, dy):
    """dgamma = sum(dy * xhat), dbeta = sum(dy) over all leading dims."""
    xhat, _ = cache
    h = dy.shape[-1]
    return (dy * xhat).reshape(-1, h).sum(axis=0), dy.reshape(-1, h).sum(axis=0)


# ---------------------------------------------------------------- cross-entropy
def cross_entropy_forward(logits, targets, ignore_index=-1):
    """Sum of per-token losses  sum_i (logsumexp(z_i) - z_i[y_i])  over targets != ignore_index.

    logits (..., V), targets (...) int.  Returns (loss_sum, count, cache). Returning the SUM and
    the count (not the mean) lets data-parallel and micro-batch callers choose the normaliser:
    the backward takes `scale` (e.g. 1 / global token count), so the gradient summed over devices
    equals the single-device gradient up to float rounding.
    """
    targets = np.asarray(targets)
    V = logits.shape[-1]
    if logits.shape[:-1] != targets.shape:
        raise ParasimError(f"cross-entropy: logits {logits.shape} need targets of shape {logits.shape[:-1]}, got {targets.shape}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise ParasimError(f"cross-entropy: targets must be integers, got {targets.dtype}")
    z = logits.reshape(-1, V)  # (N, V)
    t = targets.reshape(-1)  # (N,)
    valid = t != ignore_index
    if np.any(valid & ((t < 0) | (t >= V))):
        raise ParasimError(f"cross-entropy: targets must lie in [0, {V}) or equal ignore_index {ignore_index}")
    zmax = z.max(axis=-1, keepdims=True)
    logz = zmax + np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))  # (N, 1)
    probs = np.exp(z - logz)  # (N, V) softmax
    tv = np.where(valid, t, 0)
    per_token = (logz[:, 0] - z[np.arange(len(t)), tv]) * valid
    count = int(valid.sum())
    return float(per_token.sum()), count, (probs, tv, valid, logits.shape)


def cross_entropy_backward(cache, scale):
    """d(scale * loss_sum)/dz = scale (softmax(z) - onehot(y)) on counted tokens, 0 on ignored ones."""
    probs, tv, valid, shape = cache
    d = probs.copy()
    d[np.arange(len(tv)), tv] -= 1.0
    d *= (scale * valid)[:, None]
    return d.reshape(shape)
