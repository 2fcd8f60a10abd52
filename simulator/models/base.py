"""The Layer interface every strategy compiles against.

A layer is a frozen, plain-data description (sizes and a name). Parameters live outside it, in a
dict of float64 arrays, so the same layer object can run on any device holding any copy or shard:

    name: str
    param_shapes() -> dict[str, tuple[int, ...]]
    init(rng) -> dict[str, ndarray]                       # float64
    forward(params, x) -> (y, cache)
    backward_input(params, cache, dy) -> (dx, wcache)     # "B" (zero bubble); dx None for Embedding
    backward_weight(params, wcache) -> dict[str, ndarray] # "W": parameter gradients
    backward(params, cache, dy) -> (dx, grads)            # B then W
    forward_flops(batch) -> float                         # matmuls only, 2 m n k each
    backward_flops(batch) -> (input_flops, weight_flops)
    activation_bytes(batch) -> int                        # == units.nbytes_of(cache) for full length

`batch` counts samples: rows for the MLP, sequences of seq_len tokens for the GPT.
"""

import math

import numpy as np


class Layer:
    """Base class: subclasses are frozen dataclasses with a `name` field."""

    name: str

    def param_shapes(self) -> dict:
        raise NotImplementedError

    def init(self, rng: np.random.Generator) -> dict:
        raise NotImplementedError

    def forward(self, params, x):
        raise NotImplementedError

    def backward_input(self, params, cache, dy):
        raise NotImplementedError

    def backward_weight(self, params, wcache) -> dict:
        raise NotImplementedError

    def backward(self, params, cache, dy):
        """Both halves: (dx, grads) = B then W."""
        dx, wcache = self.backward_input(params, cache, dy)
        return dx, self.backward_weight(params, wcache)

    def forward_flops(self, batch: int) -> float:
        raise NotImplementedError

    def backward_flops(self, batch: int):
        raise NotImplementedError

    def activation_bytes(self, batch: int) -> int:
        raise NotImplementedError

    def param_count(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes().values())


def normal_init(rng, shape, std):
    """N(0, std^2) in float64."""
    return rng.normal(0.0, std, size=shape).astype(np.float64)
