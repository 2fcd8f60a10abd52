"""A GPT written with the auto-parallel operators, and Megatron's strategies set by shard().

    net, feeds = gpt_network(layers=2, hidden=16, heads=4, seq=8, vocab=32, batch=2, dp=2, tp=4)
    train(net, AutoParallelContext("semi_auto_parallel", 8), feeds)

The model is simulator.models' GPT (embedding + positions, pre-LN blocks, LM head, mean
cross-entropy), written single-device style:

    e = Gather()(wte, tokens) + wpe                               # (B, S, H)
    per block: a = LN(x); q, k, v = a Wq, a Wk, a Wv (+ biases)    # BatchMatMul with 2-d weights
               heads: Reshape (B, S, n, d) -> Transpose (B, n, S, d)
               p = Softmax(q k^T + causal mask)  (1/sqrt(d) folded into Wq); o = p v
               x = x + (Transpose, Reshape back) Wo + bo
               x = x + GeLU(LN(x) Wfc + bfc) Wproj + bproj
    logits = LN(x) Wout -> Reshape (B S, V); loss = SparseSoftmaxCrossEntropyWithLogits

Megatron strategies (Shoeybi et al. 2019 Sec. 3; simulator/parallel/tensor_parallel.py) with
dp x tp = device_num: the table cut by vocabulary rows (vocabulary-parallel Gather: AllReduce),
Wq/Wk/Wv/Wfc cut by columns (column-parallel), Wo/Wproj by rows (row-parallel: AllReduce),
attention cut by heads, Wout by vocabulary columns and the fused cross-entropy with the class
dim cut; the batch cut dp ways everywhere. With sp=True (Korthikanti et al. 2022) the layer-norm
and residual regions are cut along the sequence too: the row-parallel outputs become
ReduceScatters (out_strategy) and the column-parallel inputs AllGathers (redistribution).

With key_only=True only the key operators carry the Megatron strategies: the embedding Gather,
every BatchMatMul (the linears, attention's two products, the LM head) and the loss, as
MindSpore's sharding_propagation tutorial configures only its MatMuls; auto_parallel's
sharding_propagation fills in the rest (layer norms, bias adds, softmax, residual adds).
"""

from __future__ import annotations

import numpy as np

from . import ops
from .graph import Network


def gpt_network(layers: int = 2, hidden: int = 16, heads: int = 4, seq: int = 8, vocab: int = 32,
                batch: int = 2, dp: int | None = None, tp: int | None = None, sp: bool = False,
                seed: int = 0, key_only: bool = False):
    """(net, feeds); with dp and tp the Megatron strategies are set (module docstring),
    without them no operator has a strategy (for auto_parallel's searches)."""
    rng = np.random.default_rng(seed)
    H, S, V, B, n, d = hidden, seq, vocab, batch, heads, hidden // heads
    mega = dp is not None and tp is not None
    a, t = (dp, tp) if mega else (1, 1)
    s = t if sp else 1  # sequence cut of the layer-norm regions

    def st(op, *strategy, out=None):
        key = isinstance(op, (ops.BatchMatMul, ops.Gather, ops.SparseSoftmaxCrossEntropyWithLogits))
        return op.shard(tuple(strategy), out) if mega and (key or not key_only) else op

    net = Network("gpt")
    tokens = net.input("tokens", (B, S), dtype="int64")
    labels = net.input("labels", (B * S,), dtype="int64")
    mask = net.input("mask", (S, S))

    def w(name, *shape, scale=None):
        return net.parameter(name, rng.standard_normal(shape) * (scale or shape[0] ** -0.5))

    def ln(name, x):
        g = net.parameter(f"{name}_g", 1 + rng.standard_normal(H) / 10)
        b = net.parameter(f"{name}_b", rng.standard_normal(H) / 10)
        return st(ops.LayerNorm(), (a, s, 1), (1,), (1,))(x, g, b)

    def column(x, wname, cols):
        """x (B, S, H) @ W (H, cols) + b: column-parallel (an AllGather of x under sp)."""
        y = st(ops.BatchMatMul(), (a, 1, 1), (1, t))(x, w(wname, H, cols, scale=(H * (d if wname.startswith("wq") else 1)) ** -0.5))
        return st(ops.BiasAdd(), (a, 1, t), (t,))(y, net.parameter("b" + wname[1:], rng.standard_normal(cols) / 10))

    def row(x, wname, rows):
        """x (B, S, rows) @ W (rows, H) + b: row-parallel, AllReduce (ReduceScatter under sp)."""
        y = st(ops.BatchMatMul(), (a, 1, t), (t, 1), out=((a, s, 1),) if sp else None)(x, w(wname, rows, H))
        return st(ops.BiasAdd(), (a, s, 1), (1,))(y, net.parameter("b" + wname[1:], rng.standard_normal(H) / 10))

    def gathered(x):
        """Under sp, one AllGather of the sequence before the column-parallel linears (Megatron's
        g; an Identity with the gathered layout, so q, k and v share it)."""
        return st(ops.Identity(), (a, 1, 1))(x) if sp and mega else x

    def split_heads(x):
        x = ops.Reshape((B, S, n, d))(x)
        return st(ops.Transpose((0, 2, 1, 3)), (a, 1, t, 1))(x)

    x = st(ops.Gather(), (t, 1), (a, 1), out=((a, s, 1),) if sp else None)(w("wte", V, H, scale=1.0), tokens)
    x = st(ops.Add(), (a, s, 1), (s, 1))(x, w("wpe", S, H, scale=0.1))
    for i in range(layers):
        h = gathered(ln(f"ln1_{i}", x))
        q, k, v = (split_heads(column(h, f"w{c}{i}", H)) for c in "qkv")
        att = st(ops.BatchMatMul(transpose_b=True), (a, t, 1, 1), (a, t, 1, 1))(q, k)
        att = st(ops.Softmax(), (a, t, 1, 1))(st(ops.Add(), (a, t, 1, 1), (1, 1))(att, mask))
        o = st(ops.BatchMatMul(), (a, t, 1, 1), (a, t, 1, 1))(att, v)
        o = ops.Reshape((B, S, H))(st(ops.Transpose((0, 2, 1, 3)), (a, t, 1, 1))(o))
        x = st(ops.Add(), (a, s, 1), (a, s, 1))(x, row(o, f"wo{i}", H))
        m = st(ops.GeLU(), (a, 1, t))(column(gathered(ln(f"ln2_{i}", x)), f"wfc{i}", 4 * H))
        x = st(ops.Add(), (a, s, 1), (a, s, 1))(x, row(m, f"wproj{i}", 4 * H))
    logits = st(ops.BatchMatMul(), (a, 1, 1), (1, t))(ln("lnf", x), w("wout", H, V))
    logits = ops.Reshape((B * S, V))(logits)
    st(ops.SparseSoftmaxCrossEntropyWithLogits(), (a, t), (a,))(logits, labels)
    feeds = {"tokens": rng.integers(0, V, (B, S)), "labels": rng.integers(0, V, B * S),
             "mask": np.triu(np.full((S, S), -1e9), 1)}
    return net, feeds
