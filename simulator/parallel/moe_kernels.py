"""Device kernels of an expert-parallel MoE block: the three parts of `experts.MoEBlock` (pre,
experts, post) and their backward, so the AllToAll dispatch and combine can sit between them.

Expert-side buffers arrive from the dispatch AllToAll (axis 0) as (ep x E_loc, T, h), blocks in
source-rank order; the expert kernels view them as (E_loc, ep x T, h) and give their output
back in the same source-major layout, so the combine AllToAll returns each rank (E, T, h) in
global expert order (rank i holds experts i E_loc .. (i + 1) E_loc - 1).
"""

from __future__ import annotations

from ..ops import kernel
from .experts import EXPERT_PARAMS
from .layer_kernels import layer_of


def dense_names(layer) -> list[str]:
    """The block's parameters that every rank holds whole (attention, layer norms, router)."""
    return [n for n in layer.param_shapes() if n not in EXPERT_PARAMS]


def _to_experts(buf, ep: int):
    """(ep E_loc, T, h) source-major -> (E_loc, ep T, h)."""
    n, T, h = buf.shape
    return buf.reshape(ep, n // ep, T, h).transpose(1, 0, 2, 3).reshape(n // ep, ep * T, h)


def _from_experts(buf, ep: int):
    """(E_loc, ep T, h) -> (ep E_loc, T, h) source-major."""
    e, n, h = buf.shape
    return buf.reshape(e, ep, n // ep, h).transpose(1, 0, 2, 3).reshape(ep * e, n // ep, h)


@kernel("moe_pre")
def moe_pre(x, *params, config, layer: int):
    """(x, dense params...) -> (dispatch (E, B C, h), cache, routing stats (E + 1,))."""
    lyr = layer_of(config, layer)
    return lyr.pre(dict(zip(dense_names(lyr), params)), x)


@kernel("moe_experts_fwd")
def moe_experts_fwd(buf, *params, config, layer: int, ep: int):
    """(tokens for my experts (ep E_loc, T, h), my expert params...) -> (outputs, cache)."""
    lyr = layer_of(config, layer)
    out, cache = lyr.experts_forward(dict(zip(EXPERT_PARAMS, params)), _to_experts(buf, ep))
    return _from_experts(out, ep), cache


@kernel("moe_post")
def moe_post(cache, eout, config, layer: int):
    """(pre cache, expert outputs back in (E, B C, h)) -> y."""
    return layer_of(config, layer).post(cache, eout)


@kernel("moe_post_bwd")
def moe_post_bwd(cache, eout, dy, config, layer: int):
    """-> (d expert outputs (E, B C, h), d gates)."""
    return layer_of(config, layer).post_backward(cache, eout, dy)


@kernel("moe_experts_bwd")
def moe_experts_bwd(ecache, dbuf, *rest, config, layer: int, ep: int):
    """(cache, d outputs (ep E_loc, T, h), expert params..., [grads so far...]) -> (d inputs, grads...)."""
    lyr = layer_of(config, layer)
    params, existing = rest[:len(EXPERT_PARAMS)], rest[len(EXPERT_PARAMS):]
    dxin, grads = lyr.experts_backward(dict(zip(EXPERT_PARAMS, params)), ecache, _to_experts(dbuf, ep))
    out = [grads[n] for n in EXPERT_PARAMS]
    if existing:
        out = [g + e for g, e in zip(out, existing)]
    return (_from_experts(dxin, ep), *out)


@kernel("moe_pre_bwd")
def moe_pre_bwd(cache, ddisp, dgates, dy, *rest, config, layer: int, want_dx: bool = True):
    """(cache, d dispatch (E, B C, h), d gates, dy, dense params..., [grads so far...]) -> ([dx], grads...)."""
    lyr = layer_of(config, layer)
    names = dense_names(lyr)
    params, existing = rest[:len(names)], rest[len(names):]
    dx, grads = lyr.pre_backward(dict(zip(names, params)), cache, ddisp, dgates, dy)
    out = [grads[n] for n in names]
    if existing:
        out = [g + e for g, e in zip(out, existing)]
    return ((dx,) if want_dx else ()) + tuple(out)

