"""Pre-LN transformer block (GPT-2, Radford et al. 2019; Xiong et al. 2020), its steps written once in block_plan.py:

    x1 = x  + W_o attn(ln1(x) W_qkv + b_qkv) + b_o
    y  = x1 + gelu(ln2(x1) W_fc + b_fc) W_proj + b_proj          (MLP hidden = 4h)

Parameters per block: 12 h^2 + 13 h (W_qkv 3h^2, W_o h^2, W_fc 4h^2, W_proj 4h^2; biases 9h; two
layer norms 4h), the per-layer term of Narayanan et al. 2021 (Sec. 5.1).
"""

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from . import block_plan as plan
from .base import Layer, normal_init

INIT_STD = 0.02  # GPT-2 / nanoGPT initialisation


@dataclass(frozen=True)
class TransformerBlock(Layer):
    name: str
    hidden: int  # h
    heads: int  # a, divides h
    seq_len: int  # s, used by the FLOP and activation formulas
    causal: bool = True

    def __post_init__(self):
        if min(self.hidden, self.heads, self.seq_len) <= 0:
            raise ParasimError(f"block: hidden {self.hidden}, heads {self.heads}, seq_len {self.seq_len} must all be > 0")
        if self.hidden % self.heads:
            raise ParasimError(f"block: heads {self.heads} must divide hidden {self.hidden}")

    def __repr__(self):
        return f"TransformerBlock({self.name}: h={self.hidden}, a={self.heads}, s={self.seq_len})"

    @property
    def steps(self) -> tuple:
        """The block's order of operations (block_plan.dense_block): the one place it is written."""
        return plan.dense_block(self.hidden, self.heads, self.causal)  # read at call time: one home

    def param_shapes(self):
        return plan.param_shapes(self.steps)

    def init(self, rng):
        out = {}
        for key, shape in self.param_shapes().items():
            if key.startswith("w_"):
                out[key] = normal_init(rng, shape, INIT_STD)
            elif key.endswith("_g"):
                out[key] = np.ones(shape)
            else:
                out[key] = np.zeros(shape)
        return out

    def forward(self, params, x):
        """x (B, T, h) -> y (B, T, h); the cache maps each step's name to what its backward keeps."""
        values = {"x": x}
        cache = plan.forward(self.steps, params, values)
        return values["y"], cache

    def backward_input(self, params, cache, dy):
        """Input gradient only; wcache keeps each weight's (input, output-gradient) pair."""
        grads = {"y": dy}
        wcache = plan.backward_input(self.steps, params, cache, grads)
        return grads["x"], wcache

    def backward_weight(self, params, wcache):
        grads = plan.backward_weight(self.steps, wcache)
        return {key: grads[key] for key in self.param_shapes()}

    def forward_flops(self, batch):
        """24 B s h^2 + 4 B s^2 h: QKV 6Bsh^2, QK^T 2Bs^2h, PV 2Bs^2h, W_o 2Bsh^2, MLP 16Bsh^2
        (Narayanan et al. 2021, Sec. 5.1 / App.), summed over the steps. Layer norms, softmax,
        GELU not counted."""
        return plan.flops(self.steps, batch, self.seq_len)[0]

    def backward_flops(self, batch):
        """B: every matmul's input gradient (weights 24Bsh^2) plus attention's four matmuls (8Bs^2h);
        W: the weight gradients, 24Bsh^2. Sum = 2 x forward."""
        return plan.flops(self.steps, batch, self.seq_len)[1:]

    def activation_bytes(self, batch):
        """Float64 cache for full-length sequences: (16 B s h + 2 B s + a B s^2) x 8 bytes.
        Per token: ln1 xhat h + rstd 1, a h, q k v 3h, probs a s, att h, ln2 h + 1, m h, f 4h, g 4h.
        (Korthikanti et al. 2022 count 34 sbh + 5 a s^2 b bytes in 16-bit with dropout masks.)"""
        return plan.activation_bytes(self.steps, batch, self.seq_len)
