"""Layer objects: Dense (Linear + activation, for the MLP), Embedding, TransformerBlock (block.py),
LMHead, and the CrossEntropy loss. The interface is documented in base.py."""

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..units import DTYPE_BYTES
from . import block_plan as plan
from . import functional as K
from .base import Layer, normal_init
from .block import INIT_STD, TransformerBlock

F64 = DTYPE_BYTES["float64"]
I64 = DTYPE_BYTES["int64"]

__all__ = ["Layer", "Dense", "Embedding", "TransformerBlock", "LMHead", "CrossEntropy"]


def _positive(kind, **sizes):
    bad = {k: v for k, v in sizes.items() if not isinstance(v, (int, np.integer)) or v <= 0}
    if bad:
        raise ParasimError(f"{kind}: sizes must be positive integers, got " + ", ".join(f"{k}={v}" for k, v in bad.items()))


@dataclass(frozen=True)
class Dense(Layer):
    """y = act(x W + b). x (B, in) -> y (B, out). activation "gelu", "relu" or None (logits)."""

    name: str
    in_dim: int
    out_dim: int
    activation: str | None = None

    def __post_init__(self):
        _positive("dense", in_dim=self.in_dim, out_dim=self.out_dim)
        if self.activation is not None and self.activation not in K.ACTIVATIONS:
            raise ParasimError(f"dense: activation must be one of {sorted(K.ACTIVATIONS)} or None, got {self.activation!r}")

    def __repr__(self):
        act = f", {self.activation}" if self.activation else ""
        return f"Dense({self.name}: {self.in_dim}->{self.out_dim}{act})"

    def param_shapes(self):
        return {"w": (self.in_dim, self.out_dim), "b": (self.out_dim,)}

    def init(self, rng):
        """LeCun normal, std 1/sqrt(in_dim); zero bias."""
        return {"w": normal_init(rng, (self.in_dim, self.out_dim), self.in_dim**-0.5), "b": np.zeros(self.out_dim)}

    def forward(self, params, x):
        z, _ = K.linear_forward(x, params["w"], params["b"])  # (B, in) @ (in, out) -> (B, out)
        if self.activation is None:
            return z, (x, None)
        return K.ACTIVATIONS[self.activation][0](z)[0], (x, z)

    def backward_input(self, params, cache, dy):
        x, z = cache
        dz = dy if self.activation is None else K.ACTIVATIONS[self.activation][1](z, dy)
        return K.linear_backward_input(dz, params["w"]), (x, dz)

    def backward_weight(self, params, wcache):
        dw, db = K.linear_backward_weight(*wcache)
        return {"w": dw, "b": db}

    def forward_flops(self, batch):
        """2 B in out (one matmul)."""
        return float(2 * batch * self.in_dim * self.out_dim)

    def backward_flops(self, batch):
        f = self.forward_flops(batch)
        return f, f

    def activation_bytes(self, batch):
        """x (B, in) and, with an activation, the pre-activation z (B, out)."""
        return F64 * batch * (self.in_dim + (self.out_dim if self.activation else 0))


@dataclass(frozen=True)
class Embedding(Layer):
    """y[b, t] = wte[token] + wpe[t]: token (V, h) and learned position (s, h) tables."""

    name: str
    vocab: int
    seq_len: int
    hidden: int

    def __post_init__(self):
        _positive("embedding", vocab=self.vocab, seq_len=self.seq_len, hidden=self.hidden)

    def __repr__(self):
        return f"Embedding({self.name}: V={self.vocab}, s={self.seq_len}, h={self.hidden})"

    @property
    def steps(self) -> tuple:
        """Its order of operations (block_plan.embedding): token lookup, then + learned positions."""
        return plan.embedding(self.vocab, self.seq_len, self.hidden)

    def param_shapes(self):
        return plan.param_shapes(self.steps)

    def init(self, rng):
        return {k: normal_init(rng, s, INIT_STD) for k, s in self.param_shapes().items()}

    def forward(self, params, tokens):
        """tokens (B, T) int -> (B, T, h)."""
        values = {"x": tokens}
        cache = plan.forward(self.steps, params, values)
        return values["y"], cache

    def backward_input(self, params, cache, dy):
        """Token ids have no gradient: dx is None."""
        grads = {"y": dy}
        return None, plan.backward_input(self.steps, params, cache, grads)

    def backward_weight(self, params, wcache):
        grads = plan.backward_weight(self.steps, wcache)
        return {k: grads[k] for k in self.param_shapes()}

    def forward_flops(self, batch):
        """A table lookup: no matmul FLOPs."""
        return 0.0

    def backward_flops(self, batch):
        return 0.0, 0.0

    def activation_bytes(self, batch):
        """The int64 token ids (B, s)."""
        return I64 * batch * self.seq_len


@dataclass(frozen=True)
class LMHead(Layer):
    """logits = ln_f(x) W_out, W_out (h, V), no bias, not tied to the embedding."""

    name: str
    hidden: int
    vocab: int
    seq_len: int

    def __post_init__(self):
        _positive("lm head", hidden=self.hidden, vocab=self.vocab, seq_len=self.seq_len)

    def __repr__(self):
        return f"LMHead({self.name}: h={self.hidden} -> V={self.vocab})"

    @property
    def steps(self) -> tuple:
        """Its order of operations (block_plan.lm_head): layer norm, then the logit matmul."""
        return plan.lm_head(self.hidden, self.vocab)

    def param_shapes(self):
        return plan.param_shapes(self.steps)

    def init(self, rng):
        return {"ln_g": np.ones(self.hidden), "ln_b": np.zeros(self.hidden),
                "w_out": normal_init(rng, (self.hidden, self.vocab), INIT_STD)}  # fmt: skip

    def forward(self, params, x):
        """x (B, T, h) -> logits (B, T, V)."""
        values = {"x": x}
        cache = plan.forward(self.steps, params, values)
        return values["y"], cache

    def backward_input(self, params, cache, dy):
        grads = {"y": dy}
        wcache = plan.backward_input(self.steps, params, cache, grads)
        return grads["x"], wcache

    def backward_weight(self, params, wcache):
        grads = plan.backward_weight(self.steps, wcache)
        return {k: grads[k] for k in self.param_shapes()}

    def forward_flops(self, batch):
        """2 B s h V (the logit matmul)."""
        return plan.flops(self.steps, batch, self.seq_len)[0]

    def backward_flops(self, batch):
        _, fl_in, fl_w = plan.flops(self.steps, batch, self.seq_len)
        return fl_in, fl_w

    def activation_bytes(self, batch):
        """xhat (B, s, h), rstd (B, s, 1), normalised input a (B, s, h)."""
        return F64 * batch * self.seq_len * (2 * self.hidden + 1)


@dataclass(frozen=True)
class CrossEntropy:
    """Sum-reduced softmax cross-entropy; see kernels.cross_entropy_forward for why sum + scale."""

    ignore_index: int = -1

    def forward(self, logits, targets):
        """-> (loss_sum, count, cache)."""
        return K.cross_entropy_forward(logits, targets, self.ignore_index)

    def backward(self, cache, scale):
        """-> dlogits of scale * loss_sum."""
        return K.cross_entropy_backward(cache, scale)
