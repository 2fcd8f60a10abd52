"""Optimizers as frozen dataclasses with ELEMENTWISE, non-mutating updates.

    state = opt.init_state(param)                         # dict of arrays shaped like param
    new_param, new_state = opt.update(param, grad, state, step)   # step = 1, 2, ...

Elementwise means updating any flat shard of (param, grad, state) gives exactly the numbers of the
matching slice of the whole update: ZeRO (Rajbhandari et al. 2020) shards optimizer state this way.
Inputs are never modified; new arrays are returned.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError


def _check_step(step):
    if step < 1:
        raise ParasimError(f"optimizer: step counts from 1, got {step}")


@dataclass(frozen=True)
class SGD:
    """p <- p - lr v,  v <- momentum v + g  (PyTorch's SGD; plain SGD when momentum = 0)."""

    lr: float
    momentum: float = 0.0

    def __post_init__(self):
        if not self.lr > 0:
            raise ParasimError(f"SGD: lr must be > 0, got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            raise ParasimError(f"SGD: momentum must lie in [0, 1), got {self.momentum}")

    def __repr__(self):
        return f"SGD(lr={self.lr:g}, momentum={self.momentum:g})"

    @property
    def state_arrays(self) -> int:
        """Arrays of optimizer state per parameter (for memory accounting)."""
        return 1 if self.momentum else 0

    def init_state(self, param):
        return {"velocity": np.zeros_like(param)} if self.momentum else {}

    def update(self, param, grad, state, step):
        _check_step(step)
        if not self.momentum:
            return param - self.lr * grad, {}
        v = self.momentum * state["velocity"] + grad
        return param - self.lr * v, {"velocity": v}


@dataclass(frozen=True)
class Adam:
    """Kingma & Ba 2015, Algorithm 1:
    m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;  p <- p - lr m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        if not self.lr > 0:
            raise ParasimError(f"Adam: lr must be > 0, got {self.lr}")
        for n in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, n) < 1.0:
                raise ParasimError(f"Adam: {n} must lie in [0, 1), got {getattr(self, n)}")
        if not self.eps > 0:
            raise ParasimError(f"Adam: eps must be > 0, got {self.eps}")

    def __repr__(self):
        return f"Adam(lr={self.lr:g}, beta1={self.beta1:g}, beta2={self.beta2:g}, eps={self.eps:g})"

    @property
    def state_arrays(self) -> int:
        return 2

    def init_state(self, param):
        return {"m": np.zeros_like(param), "v": np.zeros_like(param)}

    def update(self, param, grad, state, step):
        _check_step(step)
        m = self.beta1 * state["m"] + (1.0 - self.beta1) * grad
        v = self.beta2 * state["v"] + (1.0 - self.beta2) * grad * grad
        mhat = m / (1.0 - self.beta1**step)
        vhat = v / (1.0 - self.beta2**step)
        return param - self.lr * mhat / (np.sqrt(vhat) + self.eps), {"m": m, "v": v}


def init_states(opt, params: list) -> list:
    """One state dict per parameter for a model's list of per-layer parameter dicts."""
    return [{k: opt.init_state(p) for k, p in layer.items()} for layer in params]


def apply_updates(opt, params: list, grads: list, states: list, step: int):
    """Update every parameter of a model: -> (new params, new states), inputs untouched."""
    new_p, new_s = [], []
    for lp, lg, ls in zip(params, grads, states):
        out = {k: opt.update(lp[k], lg[k], ls[k], step) for k in lp}
        new_p.append({k: v[0] for k, v in out.items()})
        new_s.append({k: v[1] for k, v in out.items()})
    return new_p, new_s
