"""Which layers of a mixture-of-experts model are dense (Megatron-LM's --moe-layer-freq,
`ModelSpec.moe_layer_freq`), per model chunk and per pipeline device: the one home the closed form
(`analytic`), the scale program, memory and the search count them from.

A dense layer of a MoE model is `ModelSpec.dense_layer()`'s layer: the same attention, an MLP of
ffn_hidden (Megatron-Core's TransformerLayer with an MLP in place of the MoELayer, megatron/core/
models/gpt/moe_module_specs.py, `get_gpt_decoder_block_spec`'s moe_layer_pattern). Layers are
placed in model order: chunk c holds the next `ParallelConfig.chunk_layers` of them.
"""

from __future__ import annotations

from simulator.cost.fsdp import is_fsdp
from simulator.errors import ParasimError


def mixed(model) -> bool:
    """Does the model have both MoE and dense layers?"""
    return bool(model.num_experts) and model.moe_layers < model.layers


def chunk_dense_layers(model, cfg) -> tuple[int, ...]:
    """Per model chunk (`ParallelConfig.chunk_layers`, model order), its dense layers of a mixed
    model (0s otherwise)."""
    chunks = cfg.chunk_layers(model.layers)
    if not mixed(model):
        return (0,) * len(chunks)
    out, start = [], 0
    for n in chunks:
        out.append(n - sum(model.moe_layer_freq[start:start + n]))
        start += n
    return tuple(out)


def chunk_dense_flags(model, cfg) -> tuple[tuple[bool, ...], ...]:
    """Per model chunk, whether each of its layers (in model order) is a mixed model's dense layer."""
    out, start = [], 0
    for n in cfg.chunk_layers(model.layers):
        out.append(tuple(mixed(model) and not model.moe_layer_freq[i] for i in range(start, start + n)))
        start += n
    return tuple(out)


def device_dense_layers(model, cfg) -> tuple[int, ...]:
    """Per pipeline device, the dense layers of a mixed model its chunks hold (`ParallelConfig.stage_map`)."""
    per_chunk = chunk_dense_layers(model, cfg)
    return tuple(sum(per_chunk[c] for c in row) for row in cfg.stage_map)


def is_dense_layer(model, cfg, chunk: int, layer: int) -> bool:
    """Is layer `layer` of model chunk `chunk` a dense layer of a mixed model?"""
    if not mixed(model):
        return False
    return not model.moe_layer_freq[sum(cfg.chunk_layers(model.layers)[:chunk]) + layer]


def check_mixed(model, cfg, A) -> None:
    """What is not priced yet for a model with dense and MoE layers, refused in one line."""
    if not mixed(model):
        return
    if cfg.zero_stage == 3 and not is_fsdp(cfg):
        raise ParasimError(f"--moe-layer-freq makes {model.layers - model.moe_layers} of the {model.layers} layers "
                           f"dense: DeepSpeed ZeRO-3 (its per-sub-module fetches are priced for layers of one kind; "
                           f"FSDP is priced) is not priced yet with dense layers")
