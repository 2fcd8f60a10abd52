"""The tensor-parallel collectives outside the transformer blocks, per micro-batch, and sequence
parallelism's one all-reduce of partial gradients per step: the one home the scale program
(`scale_program`) emits and the closed form (`analytic`) prices. The runnable programs emit the same
(the vocabulary-parallel embedding and LM head of `parallel/block_lane.tensor_parallel`, the loss and
the partial gradients of `parallel/lane.ShardedLane`; compared in tests/test_one_compiler.py).

Megatron-LM (megatron/core at d98e8a6, read for this):
- the embedding (`tensor_parallel/layers.py`, VocabParallelEmbedding.forward): each rank looks up its
  rows, then an all-reduce of the (b, s, h) sum (`reduce_from_tensor_model_parallel_region`, whose
  backward is the identity). Under SP with rotary positions a reduce-scatter instead
  (`reduce_scatter_embeddings`, `models/common/embeddings/language_model_embedding.py`); with learned
  positions the all-reduce, the positions added, then `scatter_to_sequence_parallel_region` (a local
  split). Under SP the backward of either is an all-gather of the (b, s/t, h) gradient.
- the output layer (ColumnParallelLinear, `LinearWithGradAccumulationAndAsyncCommunication`): without
  SP the input gradient is all-reduced (`allreduce_dgrad`); with SP the input is all-gathered in the
  forward, gathered again in the backward for the weight gradient, and its gradient reduce-scattered.
- the loss (`tensor_parallel/cross_entropy.py`, _VocabParallelCrossEntropy.forward, the default without
  --cross-entropy-loss-fusion): the logits cast to fp32, then three all-reduces of (b, s) fp32 values:
  the max, the target logit, the sum of exponentials.
- SP's partial gradients (`distributed/finalize_model_grads.py`: finish_grad_sync, then
  `_allreduce_non_tensor_model_parallel_grads`): the gradients of every parameter marked
  sequence_parallel (norms, row-parallel biases, the MoE router: `rank_params.replicated_layer_params`,
  and the final norm) flattened into one all-reduce over the tensor group, after the data-parallel one.

Sizes are a collective's program size (`Collective.nbytes`): an all-gather's is each member's share.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.cost.comm import NVLS, collective_time_s
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import mtp_replicated_params, replicated_layer_params
from simulator.cost.scale_kernels import activation_nbytes

CE_STAT_BYTES = 4      # the cross entropy's statistics are fp32 whatever the training dtype (module docstring)


class EndCollectives(NamedTuple):
    """(kind, program bytes) per place, in program order: the embedding's forward (after the lookup)
    and backward; the output layer's forward input, the loss after the logits, the backward's
    input (before its GEMMs) and output (the input gradient)."""

    emb_fwd: tuple = ()
    emb_bwd: tuple = ()
    head_fwd: tuple = ()
    loss: tuple = ()
    head_bwd_in: tuple = ()
    head_bwd_out: tuple = ()


def end_collectives(model: ModelSpec, cfg: ParallelConfig, dtype: str = "bf16") -> EndCollectives:
    """One micro-batch's tensor-parallel collectives outside the blocks (module docstring)."""
    t = cfg.tp
    if t == 1:
        return EndCollectives()
    act, sp = activation_nbytes(model, cfg, dtype), cfg.sequence_parallel
    share = (("all_gather", act // t),) if sp else ()
    stat = ("all_reduce", int(CE_STAT_BYTES * cfg.micro_batch_size * model.seq / cfg.cp))
    emb = "reduce_scatter" if sp and not model.position_embedding else "all_reduce"
    return EndCollectives(emb_fwd=((emb, act),), emb_bwd=share, head_fwd=share, loss=(stat,) * 3,
                          head_bwd_in=share, head_bwd_out=(("reduce_scatter" if sp else "all_reduce", act),))


def sp_partial_params(model: ModelSpec, layers: int, final_norm: bool, dense_layers: int = 0) -> float:
    """Parameters of one pipeline device whose gradients are partial sums under SP: its layers'
    norms and row-parallel biases (and router; `dense_layers` of them a mixed model's dense ones,
    `layer_kinds`), the final norm on the last stage's device."""
    plain = dense_layers * replicated_layer_params(model.dense_layer()) if dense_layers else 0
    return (layers - dense_layers) * replicated_layer_params(model) + plain \
        + (final_norm and (2 if model.biases else 1) * model.hidden + mtp_replicated_params(model))


def end_times_s(model: ModelSpec, cfg: ParallelConfig, A: Assumptions, topo) -> tuple[float, float, float, float]:
    """Seconds of one micro-batch's end collectives over rank 0's tensor group, as the event clock
    prices them (blocking): (first stage forward, first stage backward, last stage forward, last
    stage backward)."""
    ends = end_collectives(model, cfg, A.dtype)
    return tuple(tp_seconds(x, cfg, A, topo) for x in (ends.emb_fwd, ends.emb_bwd, ends.head_fwd + ends.loss,
                                                        ends.head_bwd_in + ends.head_bwd_out))


def tp_seconds(items, cfg: ParallelConfig, A: Assumptions, topo) -> float:
    """Seconds of (kind, program bytes) collectives one after another over rank 0's tensor group."""
    grp, n, out = cfg.tp_group(), cfg.tp, 0.0
    for kind, nbytes in items:
        whole = nbytes * n if kind == "all_gather" else nbytes
        out += collective_time_s(kind, whole, grp, topo, NVLS if A.nvls and kind == "all_reduce" else A.collective_algo)
    return out


def sp_grad_time_s(model: ModelSpec, cfg: ParallelConfig, A: Assumptions, topo, layers: int, final_norm: bool,
                   dense_layers: int = 0) -> float:
    """Seconds of SP's one all-reduce of partial gradients on a device (0 without SP)."""
    if cfg.tp == 1 or not cfg.sequence_parallel:
        return 0.0
    nbytes = A.grad_reduce_bytes * sp_partial_params(model, layers, final_norm, dense_layers)
    return collective_time_s("all_reduce", nbytes, cfg.tp_group(), topo, NVLS if A.nvls else A.collective_algo)
