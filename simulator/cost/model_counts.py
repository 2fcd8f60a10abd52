"""What a `ModelSpec` counts (mixed into it): its parameters, the ones one token uses and the matmul
FLOPs per token, layer by layer; a mixed model's dense layers (`moe_layer_freq`, `simulator.cost.
layer_kinds`) and multi-token prediction's modules (`mtp_num_layers`, `simulator.cost.mtp`) included."""

from __future__ import annotations

from dataclasses import replace

from simulator.cost.flops import model_flops_per_token


class ModelCounts:
    """Counts of a `ModelSpec` (module docstring); it reads only the spec's fields."""

    @property
    def moe_layers(self) -> int:
        """Layers with experts: all of them with num_experts unless `moe_layer_freq` makes some dense."""
        return sum(self.moe_layer_freq) if self.moe_layer_freq else self.layers * bool(self.num_experts)

    def dense_layer(self) -> "ModelCounts":
        """The model whose every layer is this model's dense layer (`moe_layer_freq` 0): no experts."""
        return replace(self, num_experts=0, moe_shared_expert_hidden=0, moe_layer_freq=())

    def mtp_layer(self) -> "ModelCounts":
        """The model whose layer each MTP module holds: the last decoder layer's kind (Megatron-Core
        builds the module's layer from that spec, megatron/core/transformer/multi_token_prediction.py)."""
        return self.dense_layer() if self.moe_layer_freq and not self.moe_layer_freq[-1] else self

    def mtp_module_params(self) -> int:
        """One MTP module: its layer, the 2h -> h projection (eh_proj, no bias) and three norms
        (enorm, hnorm, final); it shares the embedding and the output layer."""
        return self.mtp_layer().layer_params() + 2 * self.hidden * self.hidden + 3 * (2 if self.biases else 1) * self.hidden

    def mlp_params(self, ffn: int | None = None) -> int:
        """One MLP (expert): (2 or 3) h f weights, plus f + h biases for GPT."""
        h, f = self.hidden, self.ffn_hidden if ffn is None else ffn
        return (3 if self.gated_mlp else 2) * h * f + ((f + h) if self.biases else 0)

    def attention_params(self) -> int:
        """The attention's linear layers (`attention_linears`: QKV h (h + 2 kv) + projection h^2 for
        GPT), plus their biases for GPT, plus MLA's two latent norms."""
        lin = self.attention_linears()
        norms = self.q_lora_rank + self.kv_lora_rank if self.multi_latent_attention else 0
        return sum(i * o for _n, i, o, _s in lin) + (sum(o for _n, _i, o, _s in lin) if self.biases else 0) + norms

    def layer_params(self) -> int:
        """Per layer: attention + MLP (num_experts experts and an h x E router with MoE) + two norms."""
        h = self.hidden
        norms = 2 * (2 * h if self.biases else h)
        if self.num_experts:
            mlp = self.num_experts * self.mlp_params(self.moe_ffn_hidden) + h * self.num_experts
            mlp += self.mlp_params(self.moe_shared_expert_hidden) if self.moe_shared_expert_hidden else 0
        else:
            mlp = self.mlp_params()
        return self.attention_params() + mlp + norms

    def params(self) -> int:
        """All parameters. For GPT this is 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) (Narayanan et al. 2021, Sec. 5.1)."""
        h = self.hidden
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        pos = self.seq * h if self.position_embedding else 0
        final_norm = 2 * h if self.biases else h
        # the GPT formula omits the final LayerNorm (2h): kept out to match it exactly
        layers = self.moe_layers * self.layer_params() + (self.layers - self.moe_layers) * self.dense_layer().layer_params()
        return layers + emb + pos + (0 if self.biases else final_norm) + self.mtp_num_layers * self.mtp_module_params()

    def active_params(self) -> int:
        """Parameters one token uses: with MoE only top-k experts' MLPs (Fedus et al. 2021)."""
        if not self.num_experts:
            return self.params()
        idle = (self.num_experts - self.moe_router_topk) * self.mlp_params(self.moe_ffn_hidden)
        return self.params() - (self.moe_layers + self.mtp_num_layers * bool(self.mtp_layer().num_experts)) * idle

    def matmul_params(self) -> int:
        """N of PaLM's 6N: the weights one token multiplies by in matmuls: per layer QKV, projection,
        the MLP (with MoE the top-k experts and the h x E router), and the output layer V h. Not the
        position table, the input lookup of an untied embedding, biases or norm scales (element-wise
        work, which no FLOP count of the hardware (Narayanan et al. 2021 eq. 3) includes either: so
        hfu >= mfu)."""
        h, gate = self.hidden, (3 if self.gated_mlp else 2)
        moe = gate * h * (self.moe_router_topk * self.moe_ffn_hidden + self.moe_shared_expert_hidden) \
            + h * self.num_experts
        attn = sum(i * o for _n, i, o, _s in self.attention_linears())
        mtp = self.mtp_num_layers * (attn + (moe if self.mtp_layer().num_experts else gate * h * self.ffn_hidden)
                                     + 2 * h * h + self.vocab * h)     # each MTP module: its layer, eh_proj, logits
        return self.layers * attn + self.moe_layers * moe + (self.layers - self.moe_layers) * gate * h * self.ffn_hidden \
            + self.vocab * h + mtp

    def model_flops_per_token(self, causal_attention_flops: bool = False) -> float:
        """PaLM (Chowdhery et al. 2022, App. B): 6 N + 12 L H Q T, H Q = h heads x head dim, T = s;
        6 L H Q T for the attention core's causal half (`simulator.cost.flops`, which publisher counts which)."""
        return model_flops_per_token(self.matmul_params(), self.layers + self.mtp_num_layers, self.hidden, self.seq,
                                     causal_attention_flops)
