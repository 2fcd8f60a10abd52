"""The FLOPs a training step's kernels do (the "hardware" FLOPs of Narayanan et al. 2021, eq. 3,
with the recomputed ones), as the closed form (`analytic.estimate`) reports them: per token the forward
matmuls of each layer (MoE: the top-k experts padded to the capacity factor, the shared experts and
the h x E router; a mixed model's dense layers their ffn_hidden MLP, `layer_kinds`) and the attention
core, times 3 for forward and backward, plus what recomputation repeats, plus the output layer.
The model FLOPs conventions (6N + attention, causal or not) are `simulator.cost.flops`."""

from __future__ import annotations

from simulator.cost.moe import expert_tokens
from simulator.cost.sac import sac_recompute_flops_per_token
from simulator.cost.scale_kernels import padded_vocab


def hardware_flops_per_step(model, cfg, A) -> float:
    """FLOPs of one step of `cfg` (module docstring); `A` resolved on the model (`Assumptions.resolved`)."""
    h, s, L, t, experts, stack = model.hidden, model.seq, model.layers, cfg.tp, model.num_experts, A.profile
    gate = 3 if model.gated_mlp else 2
    if experts:   # top-k experts per token (padded to the capacity factor), shared experts, h x E router
        mlp_w = (expert_tokens(model, 1.0, A) * model.moe_ffn_hidden + model.moe_shared_expert_hidden) * gate * h \
            + h * experts
    else:
        mlp_w = gate * h * model.ffn_hidden
    per_tok_layer = 2 * (sum(i * o for _n, i, o, _s in model.attention_linears()) + mlp_w)
    attn_tok = 2 * s * model.heads * sum(model.core_dims)      # 4 s h when the heads split h
    if stack.selective_recompute == "every_other_matmul":   # torchtitan's op-level policy (`sac_recomputed`)
        selective_tok = sac_recompute_flops_per_token(model)
    else:
        selective_tok = 0.0 if A.flash_attention else attn_tok
    tokens = cfg.global_batch * s
    # a mixed model's dense layers (`layer_kinds`) multiply by their ffn_hidden-wide MLP instead
    n_plain = L - model.moe_layers if experts else 0
    plain_tok = per_tok_layer - 2 * mlp_w + 2 * gate * h * model.ffn_hidden
    # multi-token prediction (`simulator.cost.mtp`): per module a layer of the last layer's kind, the
    # 2h x h projection and the logits again, as Megatron-LM counts them
    mtp, mtp_tok = model.mtp_num_layers, (per_tok_layer if model.mtp_layer().num_experts else plain_tok)
    hw_flops = 0.0
    for n, tok in ((L - n_plain, per_tok_layer), (n_plain, plain_tok), (mtp, mtp_tok)):
        rc = {"none": 0.0, "selective": selective_tok, "full": tok + attn_tok}[cfg.recompute]
        hw_flops += tokens * n * (3 * (tok + attn_tok) + rc)
    hw_flops += tokens * 3 * 2 * (h * padded_vocab(model, t) * (1 + mtp) + mtp * 2 * h * h)
    return hw_flops
