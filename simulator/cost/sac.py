"""torchtitan's op-level selective activation checkpointing, as the cost model prices it.

torchtitan (commit 9dec370, torchtitan/parallelisms/parallelize_llama.py: `_save_list` and
`_custom_policy`, selected by train_configs' `selective_ac_option = 'op'`) saves the output of every
matmul but every second one (counting a block's aten.mm calls from 1 in forward order) and of the
SDPA kernel; every other op is recomputed in the backward. A stack with `selective_recompute =
"every_other_matmul"` (`simulator.cost.stack`) prices `recompute="selective"` so; the element-wise
part (every op of the forward again) is added by `scale_kernels.layer_kernels`.
"""

from __future__ import annotations

from simulator.cost.model_presets import ModelSpec
from simulator.errors import ParasimError


def block_linears(model: ModelSpec) -> tuple[tuple[str, int, int], ...]:
    """(name, in, out) of a block's linear layers as separate matmuls, in forward order: the fused
    QKV as q, k, v (torchtitan's wq, wk, wv) and a gated up-projection as gate and up (w1, w3)."""
    h, f = model.hidden, model.moe_ffn_hidden if model.num_experts else model.ffn_hidden
    out = []
    for name, i, o, _split in model.attention_linears():
        if name == "qkv":
            q = model.heads * model.head_dim
            out += [("q", i, q), ("k", i, model.kv_dim), ("v", i, model.kv_dim)]
        else:
            out.append((name, i, o))
    up = [("gate", h, f), ("up", h, f)] if model.gated_mlp else [("up", h, f)]
    return (*out, *up, ("down", f, h))


def sac_recomputed(model: ModelSpec) -> tuple[str, ...]:
    """The linears torchtitan's op-level selective checkpointing recomputes: its policy saves every
    matmul output but every second one, counting a block's aten.mm calls from 1 in forward order
    (torchtitan commit 9dec370, torchtitan/parallelisms/parallelize_llama.py, `_save_list` and
    `_custom_policy`: "Saves output of all compute ops, except every second mm"); Llama: wk, wo, w3."""
    return tuple(name for n, (name, _i, _o) in enumerate(block_linears(model), 1) if n % 2 == 0)


def sac_forward(model: ModelSpec, qkv, proj, up, down, gate: int):
    """The forward (m, n, k) shapes on this rank of the linears `sac_recomputed` names: (attention
    half's, MLP half's). Refused for MoE (torchtitan's experts run grouped GEMMs its policy does not count)."""
    if model.num_experts:
        raise ParasimError(f"model {model.name}: the op-level selective recompute (stack selective_recompute = "
                           "every_other_matmul) is priced for dense models only; use recompute none or full")
    again = set(sac_recomputed(model))
    if model.multi_latent_attention:
        attn = {name: shape for (name, *_), shape in zip(model.attention_linears(), (*qkv, proj))}
    else:   # the fused QKV (T, (q + 2 kv)/t, h) as q, k, v
        T, width, h = qkv[0]
        kv = width * model.kv_dim / (model.heads * model.head_dim + 2 * model.kv_dim)
        attn = {"q": (T, width - 2 * kv, h), "k": (T, kv, h), "v": (T, kv, h), "proj": proj}
    mlp = {"gate": (up[0], up[1] / gate, up[2]), "up": (up[0], up[1] / gate, up[2]), "down": down}
    return tuple(attn[n] for n in attn if n in again), tuple(mlp[n] for n in mlp if n in again)


def sac_recompute_flops_per_token(model: ModelSpec) -> float:
    """Matmul FLOPs per token and layer the op-level selective recompute repeats (`sac_recomputed`)."""
    again = set(sac_recomputed(model))
    return 2.0 * sum(i * o for name, i, o in block_linears(model) if name in again)
