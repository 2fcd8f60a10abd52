"""Device kernels of Megatron-style tensor (and sequence) parallel layers (Shoeybi et al. 2019;
Korthikanti et al. 2022). Each is a pure numpy function registered in `simulator.ops`; the
collectives between them (AllReduce, or AllGather / ReduceScatter under sequence parallelism) are
separate Collective instructions emitted by simulator/parallel/tensor_parallel.py.

Notation: n tensor ranks, h hidden, a heads, V vocabulary, T tokens of a sequence, T' the tokens
this rank holds (T, or T/n in a sequence-parallel region). A rank holds a/n heads, 4h/n MLP
columns, V/n vocabulary rows. "part" marks a partial sum that a collective completes.

Gradient kernels take `acc` existing gradients as trailing inputs and add into them (gradient
accumulation over micro-batches), like simulator/parallel/layer_kernels.py.
"""

from __future__ import annotations

import numpy as np

from ..models import functional as K
from ..models.attention import attention_backward, attention_forward
from ..ops import kernel


def _acc(grads: tuple, existing: tuple) -> tuple:
    return tuple(g + e for g, e in zip(grads, existing)) if existing else grads


def _bias_grad(dy):
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)


# ---- layer norm and residual (replicated weights; tokens split under sequence parallelism) --------
@kernel("tp_ln_fwd")
def tp_ln_fwd(x, gamma, beta):
    """a = LN(x) on this rank's tokens.  (B, T', h) -> (a (B, T', h), cache)."""
    return K.layer_norm_forward(x, gamma, beta)


@kernel("tp_residual_ln_fwd")
def tp_residual_ln_fwd(x, o, bias, gamma, beta):
    """x1 = x + o + bias (bias of the row-parallel linear, added once after the reduction);
    m = LN(x1).  -> (x1, m, ln cache), all (B, T', h)."""
    x1 = x + o + bias
    m, cache = K.layer_norm_forward(x1, gamma, beta)
    return x1, m, cache


@kernel("tp_residual")
def tp_residual(x1, p, bias):
    """y = x1 + p + bias.  (B, T', h)."""
    return x1 + p + bias


@kernel("tp_res_ln_bwd")
def tp_res_ln_bwd(cache, dres, dln, gamma, *existing):
    """Backward of  out = res + f(LN(res) ...)  around a reduced branch: dres is d out, dln the
    reduced gradient of the LN output.  dx = dres + LN'(dln);  d gamma, d beta of the LN; d bias
    of the branch's row-parallel linear = sum of dres.  -> (dx, dgamma, dbeta, dbias)."""
    dx, wc = tp_res_ln_bwd_input(cache, dres, dln, gamma)
    return (dx,) + tp_res_ln_bwd_weight(wc, *existing)


@kernel("tp_res_ln_bwd_input")
def tp_res_ln_bwd_input(cache, dres, dln, gamma):
    """B: -> (dx, weight cache)."""
    return dres + K.layer_norm_backward_input(cache, dln, gamma), (cache, dln, dres)


@kernel("tp_res_ln_bwd_weight")
def tp_res_ln_bwd_weight(wc, *existing):
    """W: -> (dgamma, dbeta, dbias)."""
    cache, dln, dres = wc
    return _acc(K.layer_norm_backward_weight(cache, dln) + (_bias_grad(dres),), existing)


@kernel("tp_ln_bwd")
def tp_ln_bwd(cache, dln, gamma, *existing):
    """dx = LN'(dln) and (dgamma, dbeta)."""
    dx, wc = tp_ln_bwd_input(cache, dln, gamma)
    return (dx,) + tp_ln_bwd_weight(wc, *existing)


@kernel("tp_ln_bwd_input")
def tp_ln_bwd_input(cache, dln, gamma):
    return K.layer_norm_backward_input(cache, dln, gamma), (cache, dln)


@kernel("tp_ln_bwd_weight")
def tp_ln_bwd_weight(wc, *existing):
    return _acc(tuple(K.layer_norm_backward_weight(*wc)), existing)


# ---- attention: column-parallel q, k, v by head group, row-parallel output projection --------------
@kernel("tp_attn_fwd")
def tp_attn_fwd(a, w_qkv, b_qkv, w_o, heads: int, causal: bool = True):
    """qkv = a W_qkv[:, mine] + b  (B, T, h) @ (h, 3h/n) -> (B, T, 3h/n); this rank's a/n heads;
    o_part = att W_o[mine, :]  (B, T, h/n) @ (h/n, h) -> (B, T, h), a partial sum over ranks."""
    hl = w_qkv.shape[1] // 3
    qkv, _ = K.linear_forward(a, w_qkv, b_qkv)
    att, c_att = attention_forward(qkv[..., :hl], qkv[..., hl:2 * hl], qkv[..., 2 * hl:], heads, causal)
    return att @ w_o, (c_att, att)


@kernel("tp_attn_bwd")
def tp_attn_bwd(cache, a, dout, w_qkv, w_o, *existing):
    """dout (B, T, h) full.  -> (da_part (B, T, h), dW_qkv (h, 3h/n), db_qkv (3h/n,), dW_o (h/n, h))."""
    da_part, wc = tp_attn_bwd_input(cache, a, dout, w_qkv, w_o)
    return (da_part,) + tp_attn_bwd_weight(wc, *existing)


@kernel("tp_attn_bwd_input")
def tp_attn_bwd_input(cache, a, dout, w_qkv, w_o):
    """B: -> (da_part, weight cache (a, dqkv, att, dout))."""
    c_att, att = cache
    datt = K.linear_backward_input(dout, w_o)  # (B, T, h) @ (h, h/n)
    dq, dk, dv = attention_backward(c_att, datt)
    dqkv = np.concatenate([dq, dk, dv], axis=-1)  # (B, T, 3h/n)
    return K.linear_backward_input(dqkv, w_qkv), (a, dqkv, att, dout)  # (B, T, 3h/n) @ (3h/n, h)


@kernel("tp_attn_bwd_weight")
def tp_attn_bwd_weight(wc, *existing):
    """W: -> (dW_qkv = a^T dqkv, db_qkv, dW_o = att^T dout)."""
    a, dqkv, att, dout = wc
    dw_qkv, db_qkv = K.linear_backward_weight(a, dqkv)
    dw_o, _ = K.linear_backward_weight(att, dout, has_bias=False)
    return _acc((dw_qkv, db_qkv, dw_o), existing)


# ---- MLP: column-parallel fc (gelu local), row-parallel proj -----------------------------------------
@kernel("tp_mlp_fwd")
def tp_mlp_fwd(m, w_fc, b_fc, w_proj):
    """f = m W_fc[:, mine] + b  (B, T, h) @ (h, 4h/n); g = gelu(f) locally (no communication);
    p_part = g W_proj[mine, :]  (B, T, 4h/n) @ (4h/n, h) -> (B, T, h), a partial sum."""
    f, _ = K.linear_forward(m, w_fc, b_fc)
    g, _ = K.gelu_forward(f)
    return g @ w_proj, (f, g)


@kernel("tp_mlp_bwd")
def tp_mlp_bwd(cache, m, dout, w_fc, w_proj, *existing):
    """-> (dm_part (B, T, h), dW_fc, db_fc, dW_proj)."""
    dm_part, wc = tp_mlp_bwd_input(cache, m, dout, w_fc, w_proj)
    return (dm_part,) + tp_mlp_bwd_weight(wc, *existing)


@kernel("tp_mlp_bwd_input")
def tp_mlp_bwd_input(cache, m, dout, w_fc, w_proj):
    """B: -> (dm_part, weight cache (m, df, g, dout))."""
    f, g = cache
    dg = K.linear_backward_input(dout, w_proj)  # (B, T, h) @ (h, 4h/n)
    df = K.gelu_backward(f, dg)
    return K.linear_backward_input(df, w_fc), (m, df, g, dout)  # (B, T, 4h/n) @ (4h/n, h)


@kernel("tp_mlp_bwd_weight")
def tp_mlp_bwd_weight(wc, *existing):
    """W: -> (dW_fc = m^T df, db_fc, dW_proj = g^T dout)."""
    m, df, g, dout = wc
    dw_fc, db_fc = K.linear_backward_weight(m, df)
    dw_proj, _ = K.linear_backward_weight(g, dout, has_bias=False)
    return _acc((dw_fc, db_fc, dw_proj), existing)


# ---- vocabulary-parallel embedding ------------------------------------------------------------------
def _local_ids(tokens, start: int, rows: int):
    inside = (tokens >= start) & (tokens < start + rows)
    return np.where(inside, tokens - start, 0), inside


@kernel("tp_embed_fwd")
def tp_embed_fwd(tokens, wte, start: int):
    """Masked lookup in rows [start, start + V/n):  e_part[b, t] = wte[tok - start] if this rank
    holds tok else 0 (Megatron's VocabParallelEmbedding).  -> (e_part (B, T, h), cache = tokens)."""
    ids, inside = _local_ids(tokens, start, wte.shape[0])
    return wte[ids] * inside[..., None], np.array(tokens, copy=True)


@kernel("tp_embed_pos")
def tp_embed_pos(e, wpe, offset: int = 0):
    """y = e + wpe[offset : offset + T'] (the positions of this rank's tokens)."""
    return e + wpe[offset:offset + e.shape[1]]


@kernel("tp_embed_bwd")
def tp_embed_bwd(tokens, dy, *existing, start: int, rows: int, seq: int):
    """dy (B, T, h) full.  dwte rows of this rank (V/n, h); dwpe (s, h), identical on every rank."""
    ids, inside = _local_ids(tokens, start, rows)
    h = dy.shape[-1]
    dwte = np.zeros((rows, h), dtype=dy.dtype)
    np.add.at(dwte, ids[inside], dy[inside].reshape(-1, h))
    dwpe = np.zeros((seq, h), dtype=dy.dtype)
    dwpe[:tokens.shape[1]] = dy.sum(axis=0)
    return _acc((dwte, dwpe), existing)


@kernel("tp_embed_bwd_weight")
def tp_embed_bwd_weight(wc, *existing, start: int, rows: int, seq: int):
    """W of the embedding (it has no input gradient): wc = (tokens, dy) kept by B."""
    return tp_embed_bwd(*wc, *existing, start=start, rows=rows, seq=seq)


# ---- vocabulary-parallel LM head and cross-entropy --------------------------------------------------
@kernel("tp_logits_fwd")
def tp_logits_fwd(a, w_out):
    """logits of this rank's vocabulary slice: (B, T, h) @ (h, V/n) -> (B, T, V/n)."""
    return a @ w_out


@kernel("tp_logits_bwd")
def tp_logits_bwd(a, dlogits, w_out, *existing):
    """-> (da_part (B, T, h), dW_out (h, V/n))."""
    da_part, wc = tp_logits_bwd_input(a, dlogits, w_out)
    return (da_part,) + tp_logits_bwd_weight(wc, *existing)


@kernel("tp_logits_bwd_input")
def tp_logits_bwd_input(a, dlogits, w_out):
    return K.linear_backward_input(dlogits, w_out), (a, dlogits)


@kernel("tp_logits_bwd_weight")
def tp_logits_bwd_weight(wc, *existing):
    return _acc((K.linear_backward_weight(*wc, has_bias=False)[0],), existing)


@kernel("vp_ce_max")
def vp_ce_max(logits):
    """Local max over this rank's vocabulary slice: (B, T, V/n) -> (B, T); AllReduce(max) follows."""
    return logits.max(axis=-1)


@kernel("vp_ce_stats")
def vp_ce_stats(logits, zmax, targets, start: int):
    """sum_v exp(z_v - max) over the slice, and z[target] where this rank holds the target (else 0);
    both are AllReduced (sum) next.  -> (sumexp (B, T), target_logit (B, T))."""
    ids, inside = _local_ids(targets, start, logits.shape[-1])
    sumexp = np.exp(logits - zmax[..., None]).sum(axis=-1)
    picked = np.take_along_axis(logits, ids[..., None], axis=-1)[..., 0]
    return sumexp, picked * inside


@kernel("vp_ce_loss")
def vp_ce_loss(logits, zmax, sumexp, target_logit, targets, start: int, ignore_index: int = -1):
    """loss_sum = sum over counted tokens of log(sum exp) + max - z[target]
    (Megatron's vocab_parallel_cross_entropy).  -> (loss_sum 0-d, cache)."""
    valid = targets != ignore_index
    per_token = (np.log(sumexp) + zmax - target_logit) * valid
    probs = np.exp(logits - zmax[..., None]) / sumexp[..., None]  # (B, T, V/n) softmax slice
    ids, inside = _local_ids(targets, start, logits.shape[-1])
    return np.asarray(per_token.sum(), dtype=np.float64), (probs, ids, inside & valid, valid)


@kernel("vp_ce_bwd")
def vp_ce_bwd(cache, scale: float):
    """d(scale * loss_sum)/d z = scale (softmax - onehot) on this rank's slice."""
    probs, ids, hit, valid = cache
    d = probs.copy()
    onehot = np.zeros_like(d)
    np.put_along_axis(onehot, ids[..., None], hit[..., None].astype(d.dtype), axis=-1)
    return (d - onehot) * (scale * valid)[..., None]
