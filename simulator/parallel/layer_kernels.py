"""Device kernels for training programs: a model layer's forward, backward (whole, or split into
input-gradient B and weight-gradient W for zero-bubble schedules), the loss, the optimizer update,
gradient buckets. Registered in `simulator.ops` by name; every kernel is pure (returns new arrays).

A layer is named by (model config, layer index): configs are plain frozen data, so a device
rebuilds the same layer from them (`build_model` is deterministic and cached here).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..models import SGD, Adam, build_model
from ..ops import kernel


@lru_cache(maxsize=64)
def _model(config):
    return build_model(config)


def layer_of(config, index: int):
    return _model(config).layers[index]


def _params(layer, arrays) -> dict:
    return dict(zip(layer.param_shapes(), arrays))


@kernel("layer_fwd")
def layer_fwd(x, *params, config, layer: int):
    """(x, params...) -> (y, cache)."""
    lyr = layer_of(config, layer)
    return lyr.forward(_params(lyr, params), x)


def _accumulate(grads: dict, layer, existing) -> tuple:
    names = list(layer.param_shapes())
    if existing:
        return tuple(grads[n] + e for n, e in zip(names, existing))
    return tuple(grads[n] for n in names)


@kernel("layer_bwd")
def layer_bwd(cache, dy, *rest, config, layer: int, n_params: int, want_dx: bool = True):
    """(cache, dy, params..., [grads so far...]) -> ([dx], grads...): B and W together.
    Gradients of several micro-batches are summed into the existing ones when given."""
    lyr = layer_of(config, layer)
    params, existing = rest[:n_params], rest[n_params:]
    dx, grads = lyr.backward(_params(lyr, params), cache, dy)
    out = _accumulate(grads, lyr, existing)
    return ((dx,) + out) if want_dx else out


@kernel("layer_bwd_input")
def layer_bwd_input(cache, dy, *params, config, layer: int, want_dx: bool = True):
    """B: (cache, dy, params...) -> ([dx], wcache)."""
    lyr = layer_of(config, layer)
    dx, wcache = lyr.backward_input(_params(lyr, params), cache, dy)
    return (dx, wcache) if want_dx else (wcache,)


@kernel("layer_bwd_weight")
def layer_bwd_weight(wcache, *rest, config, layer: int, n_params: int):
    """W: (wcache, params..., [grads so far...]) -> grads..."""
    lyr = layer_of(config, layer)
    params, existing = rest[:n_params], rest[n_params:]
    return _accumulate(lyr.backward_weight(_params(lyr, params), wcache), lyr, existing)


@kernel("loss_fwd")
def loss_fwd(logits, targets, config):
    """-> (loss_sum as a 0-d array, cache)."""
    loss_sum, _count, cache = _model(config).loss.forward(logits, targets)
    return np.asarray(loss_sum, dtype=np.float64), cache


@kernel("loss_bwd")
def loss_bwd(cache, config, scale: float):
    """d(scale * loss_sum)/d logits."""
    return _model(config).loss.backward(cache, scale)


@kernel("increment")
def increment(counter):
    return counter + 1


@kernel("opt_update")
def opt_update(param, grad, step, *state, optimizer):
    """(param, grad, step, state...) -> (param, state...), elementwise (works on any shard)."""
    names = sorted(optimizer.init_state(np.zeros(1)))
    new_p, new_state = optimizer.update(param, grad, dict(zip(names, state)), int(step))
    return (new_p,) + tuple(new_state[n] for n in names)


def optimizer_state_names(optimizer) -> list[str]:
    return sorted(optimizer.init_state(np.zeros(1)))


@kernel("flatten")
def flatten(*arrays, dtype: str | None = None):
    """Concatenate flattened arrays into one bucket (optionally cast, e.g. to float16)."""
    flat = np.concatenate([np.ravel(a) for a in arrays])
    return flat.astype(dtype) if dtype else flat


@kernel("unflatten")
def unflatten(flat, shapes: tuple, dtype: str = "float64"):
    sizes = [int(np.prod(s)) for s in shapes]
    parts = np.split(np.asarray(flat, dtype=dtype), np.cumsum(sizes)[:-1])
    return tuple(p.reshape(s) for p, s in zip(parts, shapes))


__all__ = ["Adam", "SGD", "layer_of", "optimizer_state_names"]
