"""Device kernels of Megatron-style tensor-parallel loss (Shoeybi et al. 2019); the embedding's,
the transformer block's and the LM head's are their own steps (models/block_plan.py) run by
block_lane.py (block_fwd / block_bwd). Each is a pure numpy function registered in `simulator.ops`; the
collectives between them (AllReduce, or AllGather / ReduceScatter under sequence parallelism) are
separate Collective instructions emitted by simulator/parallel/tensor_parallel.py.

Notation: n tensor ranks, h hidden, a heads, V vocabulary, T tokens of a sequence, T' the tokens
this rank holds (T, or T/n in a sequence-parallel region). A rank holds a/n heads, 4h/n MLP
columns, V/n vocabulary rows. "part" marks a partial sum that a collective completes.

Gradient kernels take `acc` existing gradients as trailing inputs and add into them (gradient
accumulation over micro-batches), like simulator/parallel/layer_kernels.py.
"""

from __future__ import annotations

import numpy as np

from ..ops import kernel


def _local_ids(tokens, start: int, rows: int):
    """Ids of this rank's vocabulary slice [start, start + rows), 0 elsewhere, and where they lie."""
    inside = (tokens >= start) & (tokens < start + rows)
    return np.where(inside, tokens - start, 0), inside


# ---- vocabulary-parallel cross-entropy ---------------------------------------------------------------
@kernel("vp_ce_max")
def vp_ce_max(logits):
    """Local max over this rank's vocabulary slice: (B, T, V/n) -> (B, T); AllReduce(max) follows."""
    return logits.max(axis=-1)


@kernel("vp_ce_stats")
def vp_ce_stats(logits, zmax, targets, start: int):
    """sum_v exp(z_v - max) over the slice, and z[target] where this rank holds the target (else 0);
    both are AllReduced (sum) next.  -> (sumexp (B, T), target_logit (B, T))."""
    ids, inside = _local_ids(targets, start, logits.shape[-1])
    sumexp = np.exp(logits - zmax[..., None]).sum(axis=-1)
    picked = np.take_along_axis(logits, ids[..., None], axis=-1)[..., 0]
    return sumexp, picked * inside


@kernel("vp_ce_loss")
def vp_ce_loss(logits, zmax, sumexp, target_logit, targets, start: int, ignore_index: int = -1):
    """loss_sum = sum over counted tokens of log(sum exp) + max - z[target]
    (Megatron's vocab_parallel_cross_entropy).  -> (loss_sum 0-d, cache)."""
    valid = targets != ignore_index
    per_token = (np.log(sumexp) + zmax - target_logit) * valid
    probs = np.exp(logits - zmax[..., None]) / sumexp[..., None]  # (B, T, V/n) softmax slice
    ids, inside = _local_ids(targets, start, logits.shape[-1])
    return np.asarray(per_token.sum(), dtype=np.float64), (probs, ids, inside & valid, valid)


@kernel("vp_ce_bwd")
def vp_ce_bwd(cache, scale: float):
    """d(scale * loss_sum)/d z = scale (softmax - onehot) on this rank's slice."""
    probs, ids, hit, valid = cache
    d = probs.copy()
    onehot = np.zeros_like(d)
    np.put_along_axis(onehot, ids[..., None], hit[..., None].astype(d.dtype), axis=-1)
    return (d - onehot) * (scale * valid)[..., None]
