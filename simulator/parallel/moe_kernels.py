"""Device kernels of an expert-parallel MoE block: the parts of `experts.MoEBlock` (attention
half, dispatch, experts, combine) and their backward, so the AllToAll dispatch and combine (and,
under context parallelism, the AllGather of the expert choices) can sit between them.

Expert-side buffers arrive from the dispatch AllToAll (axis 0) as (ep x E_loc, T, h), blocks in
source-rank order; the expert kernels view them as (E_loc, ep x T, h) and give their output
back in the same source-major layout, so the combine AllToAll returns each rank (E, T, h) in
global expert order (rank i of the expert group holds experts i E_loc .. (i + 1) E_loc - 1).
"""

from __future__ import annotations

import numpy as np

from ..ops import kernel
from .experts import EXPERT_PARAMS, choose
from .layer_kernels import layer_of


def dense_names(layer) -> list[str]:
    """The block's parameters that every rank of an expert group holds whole (attention, layer norms, router)."""
    return [n for n in layer.param_shapes() if n not in EXPERT_PARAMS]


def _acc(grads: tuple, existing: tuple) -> tuple:
    return tuple(g + e for g, e in zip(grads, existing)) if existing else grads


def _to_experts(buf, ep: int):
    """(ep E_loc, T, h) source-major -> (E_loc, ep T, h)."""
    n, T, h = buf.shape
    return buf.reshape(ep, n // ep, T, h).transpose(1, 0, 2, 3).reshape(n // ep, ep * T, h)


def _from_experts(buf, ep: int):
    """(E_loc, ep T, h) -> (ep E_loc, T, h) source-major."""
    e, n, h = buf.shape
    return buf.reshape(e, ep, n // ep, h).transpose(1, 0, 2, 3).reshape(ep * e, n // ep, h)


# ---- router and dispatch -----------------------------------------------------------------------------
@kernel("moe_choose")
def moe_choose(m, w_router, config, layer: int):
    """The experts each local token picks, (B, Tl, k) as float64 for the AllGather over the context group."""
    lyr = layer_of(config, layer)
    return choose(lyr.router_probs(w_router, m), lyr.top_k)[0].astype(np.float64)


@kernel("moe_dispatch")
def moe_dispatch(m, w_router, *gathered, config, layer: int, order: tuple = (), mine: tuple = ()):
    """(m (B, T, h), W_r, [expert choices of the whole context group (B, cp Tl, k) at positions `order`])
    -> (dispatch (E, B C, h), cache, routing stats (E + 1,)); `mine` are this rank's positions."""
    lyr = layer_of(config, layer)
    whole = None
    if gathered:
        g = gathered[0]
        full = np.zeros(g.shape, dtype=np.int64)
        full[:, list(order)] = g.astype(np.int64)  # back into position order
        whole = (full, mine)
    return lyr.dispatch(w_router, m, whole)


@kernel("moe_dispatch_bwd")
def moe_dispatch_bwd(cache, ddisp, dgates, w_router, *existing, config, layer: int):
    """-> (dm, dW_r)."""
    dm, wc = moe_dispatch_bwd_input(cache, ddisp, dgates, w_router, config=config, layer=layer)
    return (dm,) + moe_dispatch_bwd_weight(wc, *existing, config=config, layer=layer)


@kernel("moe_dispatch_bwd_input")
def moe_dispatch_bwd_input(cache, ddisp, dgates, w_router, config, layer: int):
    """B: -> (dm, weight cache (m, d router logits))."""
    return layer_of(config, layer).dispatch_backward_input(w_router, cache, ddisp, dgates)


@kernel("moe_dispatch_bwd_weight")
def moe_dispatch_bwd_weight(wc, *existing, config, layer: int):
    """W: -> (dW_r,)."""
    return _acc((layer_of(config, layer).router_weight_grad(*wc),), existing)


# ---- experts and combine -----------------------------------------------------------------------------
@kernel("moe_experts_fwd")
def moe_experts_fwd(buf, *params, config, layer: int, ep: int):
    """(tokens for my experts (ep E_loc, T, h), my expert params...) -> (outputs, cache)."""
    lyr = layer_of(config, layer)
    out, cache = lyr.experts_forward(dict(zip(EXPERT_PARAMS, params)), _to_experts(buf, ep))
    return _from_experts(out, ep), cache


@kernel("moe_combine")
def moe_combine(cache, x1, eout, config, layer: int):
    """(dispatch cache, x1, expert outputs back in (E, B C, h)) -> y."""
    return layer_of(config, layer).combine(cache, x1, eout)


@kernel("moe_post_bwd")
def moe_post_bwd(cache, eout, dy, config, layer: int):
    """-> (d expert outputs (E, B C, h), d gates)."""
    return layer_of(config, layer).post_backward(cache, eout, dy)


@kernel("moe_experts_bwd")
def moe_experts_bwd(ecache, dbuf, *rest, config, layer: int, ep: int):
    """(cache, d outputs (ep E_loc, T, h), expert params..., [grads so far...]) -> (d inputs, grads...)."""
    params, existing = rest[:len(EXPERT_PARAMS)], rest[len(EXPERT_PARAMS):]
    dxin, wc = moe_experts_bwd_input(ecache, dbuf, *params, config=config, layer=layer, ep=ep)
    return (dxin,) + moe_experts_bwd_weight(wc, *existing, config=config, layer=layer, ep=ep)


@kernel("moe_experts_bwd_input")
def moe_experts_bwd_input(ecache, dbuf, *params, config, layer: int, ep: int):
    """B: -> (d inputs in the source-major layout, weight cache)."""
    lyr = layer_of(config, layer)
    dxin, wc = lyr.experts_backward_input(dict(zip(EXPERT_PARAMS, params)), ecache, _to_experts(dbuf, ep))
    return _from_experts(dxin, ep), wc


@kernel("moe_experts_bwd_weight")
def moe_experts_bwd_weight(wc, *existing, config, layer: int, ep: int):
    """W: -> the expert grads (no communication: each rank's experts saw all their tokens in B)."""
    grads = layer_of(config, layer).experts_backward_weight(wc)
    return _acc(tuple(grads[n] for n in EXPERT_PARAMS), existing)
