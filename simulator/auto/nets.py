"""Example networks for the strategy searches: an MLP, a tiny language model (embedding ->
MatMul -> cross-entropy, lesson 10) and a stack of transformer layers.

Written in single-device style with simulator.auto.ops; no strategy is set, so an
auto_parallel search decides every operator. Weights are small random float64 arrays (the
networks can be run and checked against the single-device run).

Transformer layer (single attention head, so every op is 3-d: (B, S, H)):

    h  = LayerNorm(x)                                  # (B, S, H)
    q, k, v = h @ Wq, h @ Wk, h @ Wv                   # BatchMatMul with 2-d weights (H, H)
    p  = Softmax(q @ k^T)                              # BatchMatMul, transpose_b: (B, S, S)
    x  = x + (p @ v) @ Wo                              # BatchMatMul x2, Add (residual)
    x  = x + GeLU(LayerNorm(x) @ W1) @ W2              # (H, F) and (F, H), Add (residual)
"""

from __future__ import annotations

import numpy as np

from . import ops
from .graph import Network, Tensor


def mlp_network(n: int = 16, d: int = 8, f: int = 12, c: int = 4, seed: int = 0, bias: bool = True,
                x_grad: bool = False):
    """x (n, d) -> MatMul w1 (d, f) [-> BiasAdd b1] -> GeLU -> MatMul w2 (f, c) ->
    SoftmaxCrossEntropy. x_grad: x wants its gradient (as a layer inside a deeper network
    would). Returns (net, feeds)."""
    rng = np.random.default_rng(seed)
    net = Network("mlp")
    x = net.input("x", (n, d), requires_grad=x_grad)
    lab = net.input("labels", (n,), dtype="int64")
    h = ops.MatMul()(x, net.parameter("w1", rng.standard_normal((d, f)) / np.sqrt(d)))
    if bias:
        h = ops.BiasAdd()(h, net.parameter("b1", rng.standard_normal(f) / 5))
    h = ops.GeLU()(h)
    y = ops.MatMul()(h, net.parameter("w2", rng.standard_normal((f, c)) / np.sqrt(f)))
    ops.SoftmaxCrossEntropy()(y, lab)
    feeds = {"x": rng.standard_normal((n, d)), "labels": rng.integers(0, c, n)}
    return net, feeds


def tiny_lm_network(strategies=None, n_tokens: int = 8, hidden: int = 16, vocab: int = 32, seed: int = 0):
    """tokens (n,) -> Gather from the table wte (vocab, hidden) -> MatMul wout (hidden, vocab) ->
    SparseSoftmaxCrossEntropyWithLogits against labels (n,). strategies: None (nothing set) or the
    shard() strategies (gather, matmul, loss) of the three operators, e.g. vocabulary parallel on
    D devices: ((D, 1), (1,)), ((1, 1), (1, D)), ((1, D), (1,)). Returns (net, feeds)."""
    rng = np.random.default_rng(seed)
    gather, matmul, loss = (ops.Gather(), ops.MatMul(), ops.SparseSoftmaxCrossEntropyWithLogits())
    if strategies is not None:
        for op, strategy in zip((gather, matmul, loss), strategies, strict=True):
            op.shard(strategy)
    net = Network("tiny-lm")
    tokens = net.input("tokens", (n_tokens,), dtype="int64")
    labels = net.input("labels", (n_tokens,), dtype="int64")
    wte = net.parameter("wte", rng.standard_normal((vocab, hidden)))
    wout = net.parameter("wout", rng.standard_normal((hidden, vocab)) / np.sqrt(hidden))
    loss(matmul(gather(wte, tokens), wout), labels)
    feeds = {"tokens": rng.integers(0, vocab, n_tokens), "labels": rng.integers(0, vocab, n_tokens)}
    return net, feeds


def transformer_network(layers: int = 2, batch: int = 4, seq: int = 8, hidden: int = 16,
                        ffn: int | None = None, seed: int = 0, values: bool = True):
    """`layers` transformer layers (module docstring) and an MSE loss against a target.
    values=False: parameters are zero-stride placeholders (shapes only, for a search of a
    model too large to hold; such a network cannot be run). Returns (net, feeds)."""
    rng = np.random.default_rng(seed)
    ffn = ffn or 4 * hidden
    net = Network("transformer")
    shape = (batch, seq, hidden)
    x = net.input("x", shape)
    tgt = net.input("target", shape)

    def param(name, make, shape):
        if values:
            return net.parameter(name, make(shape))
        t = net._new(Tensor(net, name, tuple(shape), "float64", "parameter", True))
        net.params[name] = np.broadcast_to(np.float64(0.0), tuple(shape))  # 8 bytes, any shape
        return t

    def w(name, *s):
        return param(name, lambda sh: rng.standard_normal(sh) / np.sqrt(sh[0]), s)

    def norm(name, t):
        g = param(f"{name}_g", lambda sh: 1 + rng.standard_normal(sh) / 10, (hidden,))
        b = param(f"{name}_b", lambda sh: rng.standard_normal(sh) / 10, (hidden,))
        return ops.LayerNorm()(t, g, b)

    for i in range(layers):
        h = norm(f"ln{i}a", x)
        q = ops.BatchMatMul()(h, w(f"wq{i}", hidden, hidden))
        k = ops.BatchMatMul()(h, w(f"wk{i}", hidden, hidden))
        v = ops.BatchMatMul()(h, w(f"wv{i}", hidden, hidden))
        p = ops.Softmax()(ops.BatchMatMul(transpose_b=True)(q, k))  # (B, S, S)
        a = ops.BatchMatMul()(ops.BatchMatMul()(p, v), w(f"wo{i}", hidden, hidden))
        x = ops.Add()(x, a)
        h = ops.GeLU()(ops.BatchMatMul()(norm(f"ln{i}b", x), w(f"w1_{i}", hidden, ffn)))
        x = ops.Add()(x, ops.BatchMatMul()(h, w(f"w2_{i}", ffn, hidden)))
    ops.MSELoss()(x, tgt)
    if not values:
        return net, {}
    feeds = {"x": rng.standard_normal(shape), "target": rng.standard_normal(shape)}
    return net, feeds
