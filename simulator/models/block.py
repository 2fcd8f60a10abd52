"""Pre-LN transformer block (GPT-2, Radford et al. 2019; Xiong et al. 2020):

    x1 = x  + W_o attn(ln1(x) W_qkv + b_qkv) + b_o
    y  = x1 + gelu(ln2(x1) W_fc + b_fc) W_proj + b_proj          (MLP hidden = 4h)

Parameters per block: 12 h^2 + 13 h (W_qkv 3h^2, W_o h^2, W_fc 4h^2, W_proj 4h^2; biases 9h; two
layer norms 4h), the per-layer term of Narayanan et al. 2021 (Sec. 5.1).
"""

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..units import DTYPE_BYTES
from . import functional as K
from .attention import attention_backward, attention_forward
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

    def param_shapes(self):
        h = self.hidden
        return {
            "ln1_g": (h,), "ln1_b": (h,),
            "w_qkv": (h, 3 * h), "b_qkv": (3 * h,),
            "w_o": (h, h), "b_o": (h,),
            "ln2_g": (h,), "ln2_b": (h,),
            "w_fc": (h, 4 * h), "b_fc": (4 * h,),
            "w_proj": (4 * h, h), "b_proj": (h,),
        }  # fmt: skip

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
        """x (B, T, h) -> y (B, T, h)."""
        p, h = params, self.hidden
        a, c_ln1 = K.layer_norm_forward(x, p["ln1_g"], p["ln1_b"])
        qkv, _ = K.linear_forward(a, p["w_qkv"], p["b_qkv"])  # (B, T, h) @ (h, 3h) -> (B, T, 3h)
        att, c_att = attention_forward(qkv[..., :h], qkv[..., h : 2 * h], qkv[..., 2 * h :], self.heads, self.causal)
        o, _ = K.linear_forward(att, p["w_o"], p["b_o"])  # (B, T, h) @ (h, h)
        x1 = x + o
        m, c_ln2 = K.layer_norm_forward(x1, p["ln2_g"], p["ln2_b"])
        f, _ = K.linear_forward(m, p["w_fc"], p["b_fc"])  # (B, T, h) @ (h, 4h) -> (B, T, 4h)
        g, _ = K.gelu_forward(f)
        y = x1 + K.linear_forward(g, p["w_proj"], p["b_proj"])[0]  # (B, T, 4h) @ (4h, h)
        return y, {"ln1": c_ln1, "a": a, "att_cache": c_att, "att": att, "ln2": c_ln2, "m": m, "f": f, "g": g}

    def backward_input(self, params, cache, dy):
        """Input gradient only; wcache keeps each weight's (input, output-gradient) pair."""
        p, c = params, cache
        dg = K.linear_backward_input(dy, p["w_proj"])
        df = K.gelu_backward(c["f"], dg)
        dm = K.linear_backward_input(df, p["w_fc"])
        dx1 = dy + K.layer_norm_backward_input(c["ln2"], dm, p["ln2_g"])
        datt = K.linear_backward_input(dx1, p["w_o"])
        dq, dk, dv = attention_backward(c["att_cache"], datt)
        dqkv = np.concatenate([dq, dk, dv], axis=-1)  # (B, T, 3h)
        da = K.linear_backward_input(dqkv, p["w_qkv"])
        dx = dx1 + K.layer_norm_backward_input(c["ln1"], da, p["ln1_g"])
        wcache = {"proj": (c["g"], dy), "fc": (c["m"], df), "ln2": (c["ln2"], dm),
                  "o": (c["att"], dx1), "qkv": (c["a"], dqkv), "ln1": (c["ln1"], da)}  # fmt: skip
        return dx, wcache

    def backward_weight(self, params, wcache):
        grads = {}
        for lin in ("qkv", "o", "fc", "proj"):
            grads["w_" + lin], grads["b_" + lin] = K.linear_backward_weight(*wcache[lin])
        for ln in ("ln1", "ln2"):
            grads[ln + "_g"], grads[ln + "_b"] = K.layer_norm_backward_weight(*wcache[ln])
        return {key: grads[key] for key in self.param_shapes()}

    def forward_flops(self, batch):
        """24 B s h^2 + 4 B s^2 h: QKV 6Bsh^2, QK^T 2Bs^2h, PV 2Bs^2h, W_o 2Bsh^2, MLP 16Bsh^2
        (Narayanan et al. 2021, Sec. 5.1 / App.). Layer norms, softmax, GELU not counted."""
        B, s, h = batch, self.seq_len, self.hidden
        return float(24 * B * s * h * h + 4 * B * s * s * h)

    def backward_flops(self, batch):
        """B: every matmul's input gradient (weights 24Bsh^2) plus attention's four matmuls (8Bs^2h);
        W: the weight gradients, 24Bsh^2. Sum = 2 x forward."""
        B, s, h = batch, self.seq_len, self.hidden
        return float(24 * B * s * h * h + 8 * B * s * s * h), float(24 * B * s * h * h)

    def activation_bytes(self, batch):
        """Float64 cache for full-length sequences: (16 B s h + 2 B s + a B s^2) x 8 bytes.
        Per token: ln1 xhat h + rstd 1, a h, q k v 3h, probs a s, att h, ln2 h + 1, m h, f 4h, g 4h.
        (Korthikanti et al. 2022 count 34 sbh + 5 a s^2 b bytes in 16-bit with dropout masks.)"""
        B, s, h, a = batch, self.seq_len, self.hidden, self.heads
        return DTYPE_BYTES["float64"] * (16 * B * s * h + 2 * B * s + a * B * s * s)
