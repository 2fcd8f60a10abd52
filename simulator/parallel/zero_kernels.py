"""Device kernels for ZeRO (Rajbhandari et al. 2020): layers on flat parameters, flat gradients,
and the optimizer step on this rank's shard.

ZeRO keeps every parameter as one flat vector (its "flat buffer"), so a rank's shard is
`np.array_split(flat, N_d)[i]`, the same convention the ReduceScatter and AllGather collectives
use on a 1-D tensor. The layer kernels reshape the flat vectors to the layer's shapes (views, no
copies) and return flat gradients; the numbers are exactly those of `layer_fwd` / `layer_bwd`.
"""

from __future__ import annotations

import numpy as np

from ..ops import kernel
from .layer_kernels import layer_of


def _shaped(layer, arrays) -> dict:
    """Flat (or already shaped) arrays -> {name: array of the parameter's shape}."""
    return {n: np.reshape(a, s) for (n, s), a in zip(layer.param_shapes().items(), arrays)}


@kernel("zero_layer_fwd")
def zero_layer_fwd(x, *flat_params, config, layer: int):
    """(x, flat params...) -> (y, cache)."""
    lyr = layer_of(config, layer)
    return lyr.forward(_shaped(lyr, flat_params), x)


@kernel("zero_layer_bwd")
def zero_layer_bwd(cache, dy, *rest, config, layer: int, n_params: int, want_dx: bool = True):
    """(cache, dy, flat params..., [flat grads so far...]) -> ([dx], flat grads...)."""
    lyr = layer_of(config, layer)
    params, existing = rest[:n_params], rest[n_params:]
    dx, grads = lyr.backward(_shaped(lyr, params), cache, dy)
    flat = [np.ravel(grads[n]) for n in lyr.param_shapes()]
    if existing:
        flat = [g + e for g, e in zip(flat, existing)]
    return ((dx,) if want_dx else ()) + tuple(flat)


@kernel("zero_shard_update")
def zero_shard_update(param, grad_shard, step, *state, optimizer, parts: int, index: int):
    """Stages 1 and 2: (full flat param, grad shard, step, state shards...) -> (param shard, states...).
    Updates only this rank's 1/N_d of the elements (Adam and SGD are elementwise)."""
    shard = np.array_split(np.ravel(param), parts)[index]
    names = sorted(optimizer.init_state(np.zeros(1)))
    new_p, new_state = optimizer.update(shard, grad_shard, dict(zip(names, state)), int(step))
    return (new_p,) + tuple(new_state[n] for n in names)
