"""Device kernels of context parallelism: attention over a sequence split across cp ranks.

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; Megatron-LM's
context parallelism): each rank keeps its queries and accumulates attention over the K/V blocks
that circulate around the ring, with the online softmax of FlashAttention (Dao et al. 2022,
Alg. 1; Milakov & Gimelshein 2018): per query row a running max m, a running sum l and an
unnormalised output o,

    s = q k_j^T / sqrt(d)  (masked where pos_k > pos_q);   m' = max(m, rowmax s)
    l' = e^(m - m') l + rowsum e^(s - m');                 o' = e^(m - m') o + e^(s - m') v_j
    out = o / l,   lse = m + log l.

Backward (Dao et al. 2022, Alg. 2, recomputing P from lse instead of storing it):
D = rowsum(dO * O);  P = e^(s - lse);  dV_j = P^T dO;  dS = P (dO V_j^T - D) / sqrt(d);
dQ += dS K_j;  dK_j = dS^T Q. dK_j, dV_j travel with the block back to its owner.

All-to-all (Ulysses, Jacobs et al. 2023, "DeepSpeed Ulysses"): q, k, v of T/cp tokens and all
heads are exchanged for all T tokens of a/cp heads, attention runs locally (one "ring step" over
the whole sequence), and a second all-to-all returns the output to the token split.

Shapes: B micro-batch, Tl tokens this rank holds, T = cp Tl, h hidden, a heads, d = h / a.
Positions (`q_pos`, `k_pos`) are the global token indices, so causal masking is exact whatever
chunks a rank holds (the load-balanced split gives rank i chunks i and 2cp-1-i).
"""

from __future__ import annotations

import numpy as np

from ..models import functional as K
from ..models.attention import merge_heads as _merge
from ..models.attention import split_heads as _heads
from ..ops import kernel


def _acc(grads: tuple, existing: tuple) -> tuple:
    return tuple(g + e for g, e in zip(grads, existing)) if existing else grads


def _scores(qh, kh, q_pos, k_pos, causal):
    """(B, a, Tq, d) @ (B, a, d, Tk) / sqrt(d), -inf where a query may not see a key."""
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(qh.shape[-1])
    if causal:
        s = np.where(np.asarray(k_pos)[None, :] <= np.asarray(q_pos)[:, None], s, -np.inf)
    return s


# ---- the projections around attention (the rest of the block is its steps: block_lane.py) ----------
@kernel("cp_qkv_fwd")
def cp_qkv_fwd(a, w_qkv, b_qkv):
    """qkv = a W_qkv + b.  (B, Tl, h) @ (h, 3w) -> q (B, Tl, w), kv (2, B, Tl, w); w = h, or h/tp
    for the columns of a tensor rank's heads."""
    w = w_qkv.shape[1] // 3
    qkv, _ = K.linear_forward(a, w_qkv, b_qkv)
    return qkv[..., :w].copy(), np.stack([qkv[..., w:2 * w], qkv[..., 2 * w:]])


@kernel("cp_qkv_bwd")
def cp_qkv_bwd(a, dq, dkv, w_qkv, *existing):
    """-> (da (B, Tl, h), a partial sum over tensor ranks when tp > 1; dW_qkv, db_qkv)."""
    da, wc = cp_qkv_bwd_input(a, dq, dkv, w_qkv)
    return (da,) + cp_qkv_bwd_weight(wc, *existing)


@kernel("cp_qkv_bwd_input")
def cp_qkv_bwd_input(a, dq, dkv, w_qkv):
    """B: -> (da, weight cache (a, dqkv))."""
    dqkv = np.concatenate([dq, dkv[0], dkv[1]], axis=-1)  # (B, Tl, 3w)
    return K.linear_backward_input(dqkv, w_qkv), (a, dqkv)


@kernel("cp_qkv_bwd_weight")
def cp_qkv_bwd_weight(wc, *existing):
    """W: -> (dW_qkv = a^T dqkv, db_qkv)."""
    return _acc(K.linear_backward_weight(*wc), existing)


@kernel("cp_o_fwd")
def cp_o_fwd(att, w_o):
    """Row-parallel output projection of a tensor rank's heads: (B, Tl, h/tp) @ (h/tp, h), a partial sum."""
    return att @ w_o


@kernel("cp_o_bwd")
def cp_o_bwd(att, dout, w_o, *existing):
    """dout (B, Tl, h) -> (datt (B, Tl, h/tp), dW_o (h/tp, h))."""
    datt, wc = cp_o_bwd_input(att, dout, w_o)
    return (datt,) + cp_o_bwd_weight(wc, *existing)


@kernel("cp_o_bwd_input")
def cp_o_bwd_input(att, dout, w_o):
    """B: -> (datt, weight cache (att, dout))."""
    return K.linear_backward_input(dout, w_o), (att, dout)


@kernel("cp_o_bwd_weight")
def cp_o_bwd_weight(wc, *existing):
    """W: dW_o = att^T dout."""
    return _acc((K.linear_backward_weight(*wc, has_bias=False)[0],), existing)


# ---- ring attention ------------------------------------------------------------------------------
@kernel("ring_attn_fwd_step")
def ring_attn_fwd_step(q, kv, *state, heads: int, q_pos: tuple, k_pos: tuple, causal: bool = True):
    """One ring step: fold the K/V block `kv` (2, B, Tk, h) into the running (o, m, l) of the
    queries q (B, Tq, h).  -> state (o (B, a, Tq, d), m (B, a, Tq), l (B, a, Tq))."""
    qh = _heads(q, heads)
    if state:
        o, m, l = state[0]
    else:
        o, m, l = np.zeros_like(qh), np.full(qh.shape[:-1], -np.inf), np.zeros(qh.shape[:-1])
    s = _scores(qh, _heads(kv[0], heads), q_pos, k_pos, causal)  # (B, a, Tq, Tk)
    m_new = np.maximum(m, s.max(axis=-1))
    base = np.where(np.isfinite(m_new), m_new, 0.0)  # a row that has seen no key yet stays at 0
    p = np.exp(s - base[..., None])  # masked entries -> 0
    alpha = np.exp(m - base)  # m = -inf -> 0
    return ((alpha[..., None] * o + p @ _heads(kv[1], heads), m_new, alpha * l + p.sum(axis=-1)),)


@kernel("ring_attn_finish")
def ring_attn_finish(state):
    """out = o / l (B, Tq, h) and lse = m + log l (B, a, Tq), kept for backward."""
    o, m, l = state
    return _merge(o / l[..., None]), m + np.log(l)


@kernel("ring_attn_bwd_step")
def ring_attn_bwd_step(q, kv, out, dout, lse, *acc, heads: int, q_pos: tuple, k_pos: tuple, causal: bool = True,
                       has_dq: bool = False):
    """Gradients from one K/V block: dQ (B, Tq, h) accumulated here, dKV (2, B, Tk, h) for the
    block's owner, added to the dKV it arrived with.  acc = ([dq so far], [dkv so far])."""
    acc = list(acc)
    dq_acc = acc.pop(0) if has_dq else None
    dkv_acc = acc.pop(0) if acc else None
    qh, kh, vh, do = _heads(q, heads), _heads(kv[0], heads), _heads(kv[1], heads), _heads(dout, heads)
    D = (do * _heads(out, heads)).sum(axis=-1)  # (B, a, Tq) = rowsum(dP * P)
    s = _scores(qh, kh, q_pos, k_pos, causal)
    p = np.exp(s - lse[..., None])  # (B, a, Tq, Tk), masked -> 0
    dv = p.transpose(0, 1, 3, 2) @ do
    ds = p * (do @ vh.transpose(0, 1, 3, 2) - D[..., None]) / np.sqrt(qh.shape[-1])
    dq = _merge(ds @ kh)
    dkv = np.stack([_merge(ds.transpose(0, 1, 3, 2) @ qh), _merge(dv)])
    return (dq if dq_acc is None else dq_acc + dq), (dkv if dkv_acc is None else dkv_acc + dkv)


@kernel("ring_dkv_add")
def ring_dkv_add(arrived, mine):
    """The dK/dV a block arrived with plus this step's (TE adds them after the step's kernel)."""
    return arrived + mine


# ---- all-to-all (Ulysses) ------------------------------------------------------------------------
def _by_heads(x, cp):
    """(..., B, Tl, h) -> (cp, ..., B, Tl, h/cp): head group g first (the all-to-all's split axis)."""
    parts = np.split(x, cp, axis=-1)
    return np.stack(parts)


@kernel("ulysses_pack")
def ulysses_pack(q, kv, cp: int):
    """q (B, Tl, h), kv (2, B, Tl, h) -> (cp, 3, B, Tl, h/cp), head group g to rank g."""
    return _by_heads(np.concatenate([q[None], kv]), cp)


@kernel("ulysses_attn_fwd")
def ulysses_attn_fwd(recv, heads: int, positions: tuple, causal: bool = True):
    """recv (cp, 3, B, Tl, h/cp) from every rank (their tokens, my heads) -> the whole sequence
    q, k, v (B, T, h/cp), attention over it, and the output cut back by source rank for the
    second all-to-all: (cp, B, Tl, h/cp).  cache = (q, kv, out, lse) for backward."""
    cp = recv.shape[0]
    full = np.concatenate(list(recv), axis=-2)  # (3, B, T, h/cp), tokens in rank order
    q, kv = full[0], full[1:]
    state = ring_attn_fwd_step(q, kv, heads=heads, q_pos=positions, k_pos=positions, causal=causal)[0]
    out, lse = ring_attn_finish(state)
    return np.stack(np.split(out, cp, axis=1)), (q, kv, out, lse)


@kernel("ulysses_unpack")
def ulysses_unpack(recv):
    """(cp, ..., B, Tl, h/cp) by head group -> (..., B, Tl, h), the head groups side by side."""
    return np.concatenate(list(recv), axis=-1)


@kernel("ulysses_split_heads")
def ulysses_split_heads(x, cp: int):
    """(B, Tl, h) -> (cp, B, Tl, h/cp)."""
    return _by_heads(x, cp)


@kernel("ulysses_attn_bwd")
def ulysses_attn_bwd(cache, recv, heads: int, positions: tuple, causal: bool = True):
    """recv (cp, B, Tl, h/cp): dO of my heads from every rank's tokens -> dq, dk, dv of my heads,
    cut by source rank for the return all-to-all: (cp, 3, B, Tl, h/cp)."""
    q, kv, out, lse = cache
    cp = recv.shape[0]
    dout = np.concatenate(list(recv), axis=1)  # (B, T, h/cp)
    dq, dkv = ring_attn_bwd_step(q, kv, out, dout, lse, heads=heads, q_pos=positions, k_pos=positions, causal=causal)
    full = np.concatenate([dq[None], dkv])  # (3, B, T, h/cp)
    return np.stack(np.split(full, cp, axis=-2))


@kernel("ulysses_unpack_grads")
def ulysses_unpack_grads(recv):
    """(cp, 3, B, Tl, h/cp) by head group -> dq (B, Tl, h), dkv (2, B, Tl, h)."""
    full = np.concatenate(list(recv), axis=-1)
    return full[0], full[1:]
