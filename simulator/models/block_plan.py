"""The transformer block written once: an ordered list of named steps (issue 24, item 4).

Every consumer of the block's order of operations reads it here: the single-device
`TransformerBlock` (block.py) runs these steps, the mixture-of-experts block runs the attention
half of them (`attention_half`), and the parallel compilers transform them (tensor / sequence /
context / expert parallelism shard a step's parameters and put collectives between steps).

    x1 = x  + W_o attn(ln1(x) W_qkv + b_qkv) + b_o
    y  = x1 + gelu(ln2(x1) W_fc + b_fc) W_proj + b_proj

as `dense_block(h, a)`:

    step   kind        reads      writes  params
    ln1    layer_norm  x          a       ln1_g, ln1_b
    qkv    linear      a          qkv     w_qkv (h, 3h), b_qkv
    attn   attention   qkv        att     -               (a heads, causal)
    o      linear      att        o       w_o (h, h), b_o
    res1   add         x, o       x1      -
    ln2    layer_norm  x1         m       ln2_g, ln2_b
    fc     linear      m          f       w_fc (h, 4h), b_fc
    act    gelu        f          g       -
    proj   linear      g          p       w_proj (4h, h), b_proj
    res2   add         x1, p      y       -

Interface (`Step`, one per row; `KINDS[step.kind]` holds its math):
    forward(step, params, *inputs) -> (output, cache)
    backward_input(step, params, cache, d output) -> (d inputs (a tuple), weight cache or None)
    backward_weight(step, weight cache) -> gradients of step.params, in order
    flops(step, B, s) -> (forward, input gradient, weight gradient), matmuls only, 2 m n k each
    cached(step, s) -> float64 elements per token the forward keeps for the backward
and the interpreter over a list of steps: `forward`, `backward_input`, `backward_weight`
(zero-bubble B and W; `backward` is both), `param_shapes`, `flops`, `activation_bytes`.
Values are named (the reads / writes columns), so a gradient reaching a value from two steps
(the residual stream) is summed in reverse step order; a value no gradient reaches (the MoE
routing choices, `moe_steps.py`) is skipped.

Adding a step kind is one edit here: RMSNorm is a "rms_norm" entry in KINDS and `ln1` / `ln2`
using it; SwiGLU is a "swiglu" activation entry and `fc` writing 2f columns. The FLOP counts are
Narayanan et al. 2021 (Sec. 5.1): 24 B s h^2 + 4 B s^2 h forward for the dense block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..errors import ParasimError
from . import functional as K
from .attention import attention_backward, attention_forward


@dataclass(frozen=True)
class Step:
    """One operation of the block. `params` are (name, shape) pairs; `width` is the feature width
    the step works on (a linear's input, a norm's, attention's q width); `out_width` a linear's
    output; `heads` and `causal` attention's."""

    name: str
    kind: str
    reads: tuple[str, ...]
    writes: str
    params: tuple[tuple[str, tuple[int, ...]], ...] = ()
    width: int = 0
    out_width: int = 0
    heads: int = 0
    causal: bool = True
    experts: int = 0  # the mixture-of-experts steps' (models/moe_steps.py): experts held, top-k,
    top_k: int = 0  # capacity slots per sequence, the expert-parallel group the experts serve,
    capacity: int = 0  # and (key, value) pairs a transform adds (the context-parallel positions)
    ep: int = 1
    meta: tuple = ()

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.params)


class Kind(NamedTuple):
    forward: Callable
    backward_input: Callable
    backward_weight: Callable | None
    flops: Callable
    cached: Callable
    differentiable: bool = True  # False: its output has no gradient (routing choices, counts)
    grad_inputs: bool = True  # False: what it reads has no gradient (token ids)


def _ln_fwd(step, p, x):
    return K.layer_norm_forward(x, *p)


def _ln_bwd_in(step, p, cache, dy):
    return (K.layer_norm_backward_input(cache, dy, p[0]),), (cache, dy)


def _linear_fwd(step, p, x):
    return K.linear_forward(x, *p)  # cache: the input x


def _linear_bwd_in(step, p, x, dy):
    return (K.linear_backward_input(dy, p[0]),), (x, dy)


def _linear_bwd_w(step, wc):
    dw, db = K.linear_backward_weight(*wc, has_bias=len(step.params) > 1)
    return (dw, db) if len(step.params) > 1 else (dw,)


def _linear_flops(step, B, s):
    f = 2.0 * B * s * step.width * step.out_width
    return f, f, f


def _attn_fwd(step, p, qkv):
    w = step.width
    return attention_forward(qkv[..., :w], qkv[..., w:2 * w], qkv[..., 2 * w:], step.heads, step.causal)


def _attn_bwd_in(step, p, cache, dy):
    return (np.concatenate(attention_backward(cache, dy), axis=-1),), None


def _attn_flops(step, B, s):
    """QK^T and PV, 2 B s^2 w each; backward four such products (no weights)."""
    return 4.0 * B * s * s * step.width, 8.0 * B * s * s * step.width, 0.0


def _gelu_fwd(step, p, x):
    return K.gelu_forward(x)  # cache: the pre-activation


def _gelu_bwd_in(step, p, x, dy):
    return (K.gelu_backward(x, dy),), None


def _add_fwd(step, p, a, b):
    return a + b, None


def _add_bwd_in(step, p, cache, dy):
    return (dy, dy), None


def _bias_fwd(step, p, x):
    return x + p[0], None


def _bias_bwd_in(step, p, cache, dy):
    return (dy,), dy


def _identity_fwd(step, p, x):
    return x, None


def _identity_bwd_in(step, p, cache, dy):
    return (dy,), None


def _embed_fwd(step, p, tokens):
    """Rows of this rank's token table: wte (rows, h) holds ids [start, start + rows) (all of them
    unless a transform cuts the vocabulary, Megatron's VocabParallelEmbedding); other ids give 0."""
    (wte,), start = p, dict(step.meta).get("start", 0)
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ParasimError(f"embedding: tokens must be a 2-d integer array (B, T), got {tokens.dtype} {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= step.out_width):
        raise ParasimError(f"embedding: token ids must lie in [0, {step.out_width}), got [{tokens.min()}, {tokens.max()}]")
    inside = (tokens >= start) & (tokens < start + wte.shape[0])
    return wte[np.where(inside, tokens - start, 0)] * inside[..., None], tokens.copy()


def _embed_bwd_in(step, p, tokens, dy):
    return (None,), (tokens, dy, p[0].shape[0])  # token ids have no gradient


def _embed_bwd_w(step, wc):
    tokens, dy, rows = wc
    start, h = dict(step.meta).get("start", 0), dy.shape[-1]
    inside = (tokens >= start) & (tokens < start + rows)
    dwte = np.zeros((rows, h), dtype=dy.dtype)
    np.add.at(dwte, tokens[inside] - start, dy[inside].reshape(-1, h))
    return (dwte,)


def _positions(step, e, wpe):
    pos = dict(step.meta).get("positions") or tuple(range(e.shape[1]))
    if max(pos) >= wpe.shape[0]:
        raise ParasimError(f"embedding: sequence length {e.shape[1]} exceeds the {wpe.shape[0]} learned positions")
    return list(pos)


def _pos_fwd(step, p, e):
    """+ the learned positions of these tokens (0 .. T-1, or a rank's chunks under a transform)."""
    return e + p[0][_positions(step, e, p[0])], None


def _pos_bwd_in(step, p, cache, dy):
    return (dy,), (dy, _positions(step, dy, p[0]), p[0].shape[0])


def _pos_bwd_w(step, wc):
    dy, pos, rows = wc
    dwpe = np.zeros((rows, dy.shape[-1]), dtype=dy.dtype)
    dwpe[pos] = dy.sum(axis=0)
    return (dwpe,)


def _no_flops(step, B, s):
    return 0.0, 0.0, 0.0


KINDS: dict[str, Kind] = {
    "layer_norm": Kind(_ln_fwd, _ln_bwd_in, lambda step, wc: K.layer_norm_backward_weight(*wc), _no_flops,
                       lambda step, s: step.width + 1),  # xhat and rstd
    "linear": Kind(_linear_fwd, _linear_bwd_in, _linear_bwd_w, _linear_flops, lambda step, s: step.width),
    "attention": Kind(_attn_fwd, _attn_bwd_in, None, _attn_flops,
                      lambda step, s: 3 * step.width + step.heads * s),  # q, k, v and the probabilities
    "gelu": Kind(_gelu_fwd, _gelu_bwd_in, None, _no_flops, lambda step, s: step.width),
    "add": Kind(_add_fwd, _add_bwd_in, None, _no_flops, lambda step, s: 0),
    # what the parallel transforms insert: a row-parallel linear's bias added after the reduction,
    # and a collective that is the identity in one direction (Megatron's f and g operators)
    "bias": Kind(_bias_fwd, _bias_bwd_in, lambda step, dy: (dy.reshape(-1, dy.shape[-1]).sum(axis=0),), _no_flops,
                 lambda step, s: 0),
    "identity": Kind(_identity_fwd, _identity_bwd_in, None, _no_flops, lambda step, s: 0),
    # the embedding: token lookup (its input, the ids, has no gradient) and the learned positions
    "embed": Kind(_embed_fwd, _embed_bwd_in, _embed_bwd_w, _no_flops, lambda step, s: 1, grad_inputs=False),
    "pos": Kind(_pos_fwd, _pos_bwd_in, _pos_bwd_w, _no_flops, lambda step, s: 0),
}


def layer_norm(name, reads, writes, h):
    return Step(name, "layer_norm", (reads,), writes, ((f"{name}_g", (h,)), (f"{name}_b", (h,))), width=h)


def linear(name, reads, writes, d_in, d_out, bias=True):
    params = ((f"w_{name}", (d_in, d_out)),) + (((f"b_{name}", (d_out,)),) if bias else ())
    return Step(name, "linear", (reads,), writes, params, width=d_in, out_width=d_out)


def attention_half(h: int, heads: int, causal: bool = True) -> tuple[Step, ...]:
    """x -> x1 (the residual stream after attention) and m = ln2(x1), the MLP's (or router's) input."""
    return (
        layer_norm("ln1", "x", "a", h),
        linear("qkv", "a", "qkv", h, 3 * h),
        Step("attn", "attention", ("qkv",), "att", width=h, heads=heads, causal=causal),
        linear("o", "att", "o", h, h),
        Step("res1", "add", ("x", "o"), "x1"),
        layer_norm("ln2", "x1", "m", h),
    )


def dense_block(h: int, heads: int, causal: bool = True, ffn: int | None = None) -> tuple[Step, ...]:
    """The pre-LN GPT-2 block (Radford et al. 2019), MLP hidden `ffn` (4h by default)."""
    f = ffn or 4 * h
    return attention_half(h, heads, causal) + (
        linear("fc", "m", "f", h, f),
        Step("act", "gelu", ("f",), "g", width=f),
        linear("proj", "g", "p", f, h),
        Step("res2", "add", ("x1", "p"), "y"),
    )


def embedding(vocab: int, seq: int, h: int) -> tuple[Step, ...]:
    """The input embedding: y[b, t] = wte[tokens[b, t]] + wpe[t] (GPT-2's learned positions)."""
    return (Step("tok", "embed", ("x",), "e", (("wte", (vocab, h)),), width=h, out_width=vocab),
            Step("pos", "pos", ("e",), "y", (("wpe", (seq, h)),), width=h))


def lm_head(h: int, vocab: int) -> tuple[Step, ...]:
    """The LM head: logits = ln_f(x) W_out, W_out (h, V) with no bias (GPT-2's final layer norm,
    untied). Under tensor parallelism W_out is column-parallel: each rank's logits of V/tp words,
    which the vocabulary-parallel cross entropy reads (Megatron-LM)."""
    return (layer_norm("ln", "x", "a", h), linear("out", "a", "y", h, vocab, bias=False))


# ---- the interpreter ----------------------------------------------------------------------------
def param_shapes(steps) -> dict[str, tuple[int, ...]]:
    return {n: s for step in steps for n, s in step.params}


def forward(steps, params: dict, values: dict) -> dict:
    """Run `steps` on `values` (name -> array, e.g. {"x": x}), adding each step's output to it.
    -> the cache: step name -> what its backward needs (steps keeping nothing are left out)."""
    cache = {}
    for step in steps:
        y, c = KINDS[step.kind].forward(step, [params[n] for n in step.param_names], *(values[v] for v in step.reads))
        values[step.writes] = y
        if c is not None:
            cache[step.name] = c
    return cache


def backward_input(steps, params: dict, cache: dict, grads: dict) -> dict:
    """B: walk `steps` in reverse from `grads` (value name -> its gradient, e.g. {"y": dy}), adding
    the gradient of every value read. -> weight cache: step name -> what its weight gradient needs."""
    wcache = {}
    for step in reversed(steps):
        if step.writes not in grads:  # no gradient reaches it (a routing choice, a count)
            continue
        dy = grads.pop(step.writes)
        dins, wc = KINDS[step.kind].backward_input(step, [params[n] for n in step.param_names], cache.get(step.name), dy)
        for v, d in zip(step.reads, dins):
            if d is not None:  # None: the read has no gradient (routing slots)
                grads[v] = grads[v] + d if v in grads else d
        if step.params:
            wcache[step.name] = wc
    return wcache


def backward_weight(steps, wcache: dict) -> dict:
    """W: parameter name -> gradient for every step with parameters."""
    out = {}
    for step in steps:
        if step.params:
            out.update(zip(step.param_names, KINDS[step.kind].backward_weight(step, wcache[step.name])))
    return out


def flops(steps, batch: int, seq: int) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) matmul FLOPs of `batch` sequences of `seq` tokens."""
    per = [KINDS[step.kind].flops(step, batch, seq) for step in steps]
    return tuple(float(sum(p[i] for p in per)) for i in range(3))


def activation_bytes(steps, batch: int, seq: int) -> int:
    """Float64 bytes the forward caches for `batch` sequences of `seq` tokens."""
    return 8 * batch * seq * sum(KINDS[step.kind].cached(step, seq) for step in steps)
