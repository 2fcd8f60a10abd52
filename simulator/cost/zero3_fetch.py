"""DeepSpeed ZeRO-3's parameter fetches: how many all-gathers one micro-batch issues, of what.

DeepSpeed (deepspeed/runtime/zero/stage3.py and partition_parameters.py since v0.3.13, March 2021;
partitioned_param_coordinator.py today) all-gathers a sub-module's partitioned parameters just
before the sub-module runs (`fetch_sub_module`) and releases them after it, unless they are used
again before `stage3_max_reuse_distance` elements (default 1e9) of other parameters have been
fetched (`_keep_for_later` / `__params_to_release`). Parameters smaller than
`stage3_param_persistence_threshold` (default 1e5 elements) stay gathered. In a GPT layer the
gathered sub-modules are therefore the four linear layers, on this tensor-parallel rank:
QKV h (h + 2 kv) / t, output projection h^2 / t, MLP in h f / t (2 h f / t with SwiGLU's gate),
MLP out f h / t; biases and norms fall under the threshold. Each fetch is
one collective (in 2021 one `torch.distributed.all_gather` per parameter; since DeepSpeed PR #1453,
January 2022, one coalesced all-gather per sub-module), so a pass over L layers pays 4 L collective
latencies, not one.

Per micro-batch the forward gathers every sub-module, and the backward gathers every sub-module
again (its forward use was a whole model of fetches earlier). With full activation recomputation
the backward of a layer first re-runs the layer's forward, which gathers its sub-modules, then runs
their backward in reverse order: after the re-run of sub-module i, the parameters fetched before
its backward are those of the sub-modules after it, twice (re-run forward, then backward), so i is
still gathered for its backward only if 2 x sum_{j > i} w_j < stage3_max_reuse_distance; otherwise
it is released and gathered a third time. For GPT-3 175B (t = 1) the QKV, projection and MLP-in
weights (453M, 151M, 604M elements: 2 x 604M > 1e9) are gathered three times per micro-batch, the
MLP-out weight twice: 2/3 of each layer's parameters move a third time. Layers whose four
sub-modules total under 1e9 / 2 elements (GPT h <= 6144) never re-gather.
"""

from __future__ import annotations

from simulator.cost.model_presets import ModelSpec
from simulator.cost.rank_params import (
    embedding_params_on_rank,
    head_params_on_rank,
    layer_params_on_rank,
    output_layer_own_unit,
)

STAGE3_MAX_REUSE_DISTANCE = 1e9        # DeepSpeed's default (elements)
STAGE3_PARAM_PERSISTENCE_THRESHOLD = 1e5


def linear_sizes(model: ModelSpec, tp: int = 1, ep: int = 1) -> tuple[float, ...]:
    """Elements of the gathered sub-modules of one layer in execution order (QKV, projection,
    MLP in, MLP out), on one tensor-parallel rank; an MoE layer's experts as one grouped in / out
    pair (Megatron-Core's grouped MLP) holding this rank's E / ep experts."""
    h, f = model.hidden, model.ffn_hidden
    experts = getattr(model, "num_experts", 0)
    n_mlp, width = (experts / ep, model.moe_ffn_hidden) if experts else (1, f)
    up = (2 if model.gated_mlp else 1) * h * width * n_mlp
    attn = tuple(i * o for _n, i, o, _s in model.attention_linears())
    sizes = attn + (up, width * h * n_mlp)
    return tuple(x / tp for x in sizes if x / tp >= STAGE3_PARAM_PERSISTENCE_THRESHOLD)


def zero3_pass(model: ModelSpec, tp: int, ep: int, layers: int, others: int, recompute: str,
               max_reuse_distance: float = STAGE3_MAX_REUSE_DISTANCE) -> tuple[int, float, int]:
    """(all-gathers of one forward or backward pass over `layers` layers and `others` further
    gathered modules (embedding, LM head), elements a third gather moves per micro-batch on this
    rank, all-gathers of that third gather). The third gather exists with full recomputation only."""
    sizes = linear_sizes(model, tp, ep)
    fetches = layers * max(1, len(sizes)) + others
    if recompute != "full" or not sizes:
        return fetches, 0.0, 0
    again = [w for i, w in enumerate(sizes) if 2 * sum(sizes[i + 1:]) >= max_reuse_distance]
    return fetches, layers * sum(again), layers * len(again)


def zero3_first_gathers(model: ModelSpec, cfg, k: int, last: int) -> tuple:
    """ZeRO-3 (DeepSpeed): elements of the gathers device k issues before a pass's first compute,
    which prefetching hides under nothing (`dp_sync`): the forward's embedding (first device) and
    first layer, the backward's output layer (last device; untied or pipelined) or first layer."""
    if cfg.zero_stage != 3:
        return ()
    layer = sum(layer_params_on_rank(model, cfg.tp, cfg.ep, cfg.expert_tp))
    emb = embedding_params_on_rank(model, cfg.tp) if k == 0 else 0.0
    holds_head = k == last and output_layer_own_unit(model, cfg.pp)
    return emb, layer, head_params_on_rank(model, cfg.tp) if holds_head else layer
