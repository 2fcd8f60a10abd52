"""Multi-head softmax attention on already-projected q, k, v (no weights).

    A = softmax(Q K^T / sqrt(d) + M) V        (Vaswani et al. 2017, eq. 1), per head,

with M = -inf above the diagonal when causal. The functions take q, k, v of shape (B, T, a*d)
and the number of heads a that those columns hold, so a tensor-parallel caller (Megatron-LM,
Shoeybi et al. 2019) can pass the columns of its own a/t heads and run exactly those heads.
There are no weights, so the backward is an input gradient only.
"""

import numpy as np

from ..errors import ParasimError


def split_heads(x, n_heads):
    B, T, H = x.shape
    return x.reshape(B, T, n_heads, H // n_heads).transpose(0, 2, 1, 3)  # (B, a, T, d)


def merge_heads(x):
    B, a, T, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, a * d)  # (B, T, a*d)


def causal_mask(T):
    """Boolean (T, T): True where query t may attend key u, i.e. u <= t."""
    return np.tril(np.ones((T, T), dtype=bool))


def attention_forward(q, k, v, n_heads, causal=True):
    """q, k, v (B, T, a*d) -> out (B, T, a*d).   cache = (qh, kh, vh (B, a, T, d), probs (B, a, T, T))."""
    if q.ndim != 3 or q.shape != k.shape or q.shape != v.shape:
        raise ParasimError(f"attention: q, k, v must share one (B, T, H) shape, got {q.shape}, {k.shape}, {v.shape}")
    if n_heads <= 0 or q.shape[-1] % n_heads:
        raise ParasimError(f"attention: {n_heads} heads must divide the width {q.shape[-1]}")
    qh, kh, vh = (split_heads(x, n_heads) for x in (q, k, v))
    d = qh.shape[-1]
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d)  # (B, a, T, d) @ (B, a, d, T) -> (B, a, T, T)
    if causal:
        scores = np.where(causal_mask(q.shape[1]), scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    probs = e / e.sum(axis=-1, keepdims=True)  # (B, a, T, T), rows sum to 1, masked entries 0
    out = probs @ vh  # (B, a, T, T) @ (B, a, T, d) -> (B, a, T, d)
    return merge_heads(out), (qh, kh, vh, probs)


def attention_backward(cache, dout):
    """Returns (dq, dk, dv), each (B, T, a*d).

    dV = P^T dO;  dP = dO V^T;  dS = P (dP - rowsum(dP P)) / sqrt(d);  dQ = dS K;  dK = dS^T Q.
    Masked entries have P = 0, so their dS is 0 and nothing leaks from the future.
    """
    qh, kh, vh, probs = cache
    n_heads, d = qh.shape[1], qh.shape[-1]
    do = split_heads(dout, n_heads)  # (B, a, T, d)
    dv = probs.transpose(0, 1, 3, 2) @ do  # (B, a, T, T) @ (B, a, T, d)
    dp = do @ vh.transpose(0, 1, 3, 2)  # (B, a, T, d) @ (B, a, d, T) -> (B, a, T, T)
    ds = probs * (dp - (dp * probs).sum(axis=-1, keepdims=True)) / np.sqrt(d)
    dq = ds @ kh  # (B, a, T, T) @ (B, a, T, d)
    dk = ds.transpose(0, 1, 3, 2) @ qh
    return merge_heads(dq), merge_heads(dk), merge_heads(dv)
