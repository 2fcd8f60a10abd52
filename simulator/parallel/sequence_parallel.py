"""Sequence parallelism on top of tensor parallelism (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", Sec. 4.2.2).

Under plain tensor parallelism the layer norms, residual additions and the dropouts are computed
redundantly on every rank of the tensor group and their activations are stored n times. Here those
regions hold T/n tokens of each sequence on each rank instead:

    x (B, T/n, h) -> LN -> AllGather (g) -> column-parallel -> row-parallel -> ReduceScatter (g-bar) -> + x

The AllGather replaces the identity before each column-parallel linear and the ReduceScatter the
AllReduce after each row-parallel one; in backward their conjugates run (ReduceScatter of the input
gradient, AllGather of the output gradient). The bytes moved are the same as TP's AllReduce (a ring
AllReduce is a ReduceScatter plus an AllGather). The gathered LN outputs are not stored: backward
gathers them again (Sec. 4.2.2), so every stored activation of the block is split n ways and the
activation memory per layer falls from sbh(10 + 24/t + 5as/(ht)) to sbh/t (34 + 5as/h)
(Korthikanti et al. 2022, activation memory per layer). The layer-norm weights and the row-parallel biases see only T/n tokens, so
their gradients are AllReduced over the tensor group after backward.

Our model has no dropout (the GPT of simulator/models has none), so only the layer norms and the
residual additions form the sequence-parallel regions. The embedding's AllReduce becomes a
ReduceScatter too; the LM head gathers its normalised input and keeps the vocabulary split.
Pipeline stages exchange the sequence shards (1/n of TP's point-to-point bytes).
"""

from __future__ import annotations

from dataclasses import replace

from .config import TrainConfig
from .replicated import Compiled
from .tensor_parallel import compile_tensor_parallel


def compile_sequence_parallel(cfg: TrainConfig) -> Compiled:
    return compile_tensor_parallel(replace(cfg, strategy="sp"), sp=True)
