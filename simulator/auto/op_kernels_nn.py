"""Local shard kernels of Softmax, LayerNorm, the reductions, Gather, OneHot and the losses
(registered in `simulator.ops`; compile.py imports this module)."""

from __future__ import annotations

import numpy as np

from ..ops import kernel


@kernel("auto.softmax")
def softmax(x, m=None, s=None, axis=(-1,)):
    """exp(x - m) / s over the softmax axes; m (row maximum) and s (row sum of exps) are given
    when the axis is cut (each already reduced over the ranks cutting it), else computed here."""
    m = x.max(axis=axis, keepdims=True) if m is None else m
    z = np.exp(x - m)
    return z / (z.sum(axis=axis, keepdims=True) if s is None else s)


@kernel("auto.softmax_max")
def softmax_max(x, axis=(-1,)):
    return x.max(axis=axis, keepdims=True)


@kernel("auto.softmax_sumexp")
def softmax_sumexp(x, m, axis=(-1,)):
    return np.exp(x - m).sum(axis=axis, keepdims=True)


@kernel("auto.softmax_dot")
def softmax_dot(dy, x, m, s, axis=(-1,)):
    """This rank's part of sum(dy y) over the softmax axes (a cut axis: a partial sum)."""
    return (dy * softmax(x, m, s, axis)).sum(axis=axis, keepdims=True)


@kernel("auto.softmax_bwd")
def softmax_bwd(dy, x, m=None, s=None, dot=None, axis=(-1,)):
    """dx = y (dy - sum(dy y)) over the softmax axes (the sum reduced over a cut axis)."""
    y = softmax(x, m, s, axis)
    return y * (dy - ((dy * y).sum(axis=axis, keepdims=True) if dot is None else dot))


def _ln_parts(x, begin_norm_axis, epsilon):
    axes = tuple(range(begin_norm_axis, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + epsilon)
    return axes, (x - mu) * rstd, rstd


@kernel("auto.layer_norm")
def layer_norm(x, gamma, beta, begin_norm_axis, begin_params_axis, epsilon):
    _, xhat, _ = _ln_parts(x, begin_norm_axis, epsilon)
    return xhat * gamma + beta


@kernel("auto.layer_norm_bwd")
def layer_norm_bwd(dy, x, gamma, beta, begin_norm_axis, begin_params_axis, epsilon):
    """dx over the normalised axes (Ba, Kiros & Hinton 2016); dgamma, dbeta summed over the
    dims before begin_params_axis (this rank's rows: a partial sum where they are cut)."""
    axes, xhat, rstd = _ln_parts(x, begin_norm_axis, epsilon)
    lead = tuple(range(begin_params_axis))
    dgamma, dbeta = (dy * xhat).sum(axis=lead), dy.sum(axis=lead)
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return dx, dgamma, dbeta


@kernel("auto.reduce")
def reduce(x, axis, keep_dims, kind, scale):
    if kind == "max":
        return x.max(axis=axis, keepdims=keep_dims)
    return x.sum(axis=axis, keepdims=keep_dims) * scale


@kernel("auto.reduce_bwd")
def reduce_bwd(dy, x, axis, keep_dims, kind, scale):
    d = dy if keep_dims else np.expand_dims(dy, axis)
    if kind == "max":
        hit = x == x.max(axis=axis, keepdims=True)
        return d * hit / hit.sum(axis=axis, keepdims=True)
    return np.broadcast_to(d * scale, x.shape).copy()


def _rows(indices, offset, n_rows):
    """This rank's row of each index (clipped) and whether the index is in its rows."""
    local = np.asarray(indices).astype(np.int64) - offset
    inside = (local >= 0) & (local < n_rows)
    return np.clip(local, 0, n_rows - 1), inside


@kernel("auto.gather")
def gather(table, indices, offset=0):
    rows, inside = _rows(indices, offset, table.shape[0])
    return table[rows] * inside[..., None]


@kernel("auto.gather_bwd")
def gather_bwd(dy, table, indices, offset=0):
    rows, inside = _rows(indices, offset, table.shape[0])
    out = np.zeros_like(table)
    np.add.at(out, rows[inside], dy[inside])
    return out


@kernel("auto.one_hot")
def one_hot(indices, on_value, off_value, offset=0, depth=1):
    cols, inside = _rows(indices, offset, depth)
    out = np.full(np.shape(indices) + (depth,), off_value)
    hit = np.zeros(np.shape(indices) + (depth,), dtype=bool)
    np.put_along_axis(hit, cols[..., None], inside[..., None], axis=-1)
    out[hit] = on_value
    return out


# ---- the fused cross-entropy (ops_loss.py) ----------------------------------------------------
@kernel("auto.ce_max")
def ce_max(logits, labels, **_):
    return logits.max(axis=-1)


@kernel("auto.ce_sumexp")
def ce_sumexp(logits, labels, m, **_):
    return np.exp(logits - m[:, None]).sum(axis=-1)


def _target(logits, labels, sparse, offset):
    if not sparse:
        return np.asarray(labels, dtype=logits.dtype)
    cols, inside = _rows(labels, offset, logits.shape[1])
    t = np.zeros_like(logits)
    t[np.arange(len(cols))[inside], cols[inside]] = 1.0
    return t


@kernel("auto.ce")
def ce(logits, labels, m, s, scale, sparse, reduce_rows, offset=0, first=1.0):
    """This rank's share of each row's loss -sum_c t_c log p_c = (m + log s) - sum_c t_c z_c for
    labels t that sum to 1 per row (one-hot or a distribution, as MindSpore requires):
    (m + log s) on the first class block, minus the target's logits on its own columns; summed
    over rows x scale for the mean loss."""
    t = _target(logits, labels, sparse, offset)
    rows = first * (m + np.log(s)) - (t * logits).sum(axis=-1)
    return np.asarray(rows.sum() * scale) if reduce_rows else rows * scale


@kernel("auto.ce_bwd")
def ce_bwd(dy, logits, labels, m, s, scale, sparse, reduce_rows, offset=0, first=1.0):
    t = _target(logits, labels, sparse, offset)
    p = np.exp(logits - m[:, None]) / s[:, None]
    g = dy * scale if reduce_rows else (dy * scale)[:, None]
    return (p - t) * g


@kernel("auto.mse")
def mse(y, t, scale):
    return np.asarray(((y - t) ** 2).sum() * scale)


@kernel("auto.mse_bwd")
def mse_bwd(dy, y, t, scale):
    d = 2.0 * (y - t) * (scale * dy)
    return d, -d
