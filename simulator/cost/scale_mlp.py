"""The layers' MLPs of a scale-program device (`scale_program`): a MoE layer's experts between the
dispatch and combine collectives (the router where Megatron-Core runs it, `cost.moe`; the shared experts
beside them with --moe-shared-expert-overlap, `moe_overlap`), a dense layer's MLP plain, and which
layers are which (a mixed model's dense layers, `layer_kinds`)."""

from __future__ import annotations

from simulator.cost.layer_kinds import chunk_dense_layers, is_dense_layer
from simulator.cost.moe import moe_group
from simulator.cost.moe_overlap import shared_expert_mlp
from simulator.cost.rank_params import layer_params_on_rank
from simulator.cost.scale_kernels import LayerKernels, layer_kernels
from simulator.program import Collective


class LayerMLP:
    """Mixed into `scale_program._Emitter`, whose fields (model, cfg, A, K, chunks, stage_of, w,
    layer_grad, expert_local, moe_dispatch, moe_combine, moe_async) and `comp` / `group_comm` it uses."""

    def layer_kinds(self) -> None:
        model, cfg, A, K = self.model, self.cfg, self.A, self.K
        # a mixed model's dense layers (`layer_kinds`): per model stage their count, their kernels and gradient
        self.plain = chunk_dense_layers(model, cfg)
        self.dense_at = {(s, l) for s in range(len(self.plain)) for l in range(self.chunks[s])
                         if is_dense_layer(model, cfg, s, l)}
        if model.num_experts and not model.mtp_layer().num_experts and self.logits:   # MTP after a dense last layer
            self.dense_at |= {(self.S - 1, ("mtp", i)) for i in range(model.mtp_num_layers)}
        if self.dense_at:
            self.KD = layer_kernels(model.dense_layer(), cfg, A)
            self.plain_local = layer_params_on_rank(model.dense_layer(), cfg.tp)[0]
            self.plain_grad = A.grad_reduce_bytes * self.plain_local
        self.bw = {}    # fused B + W, of the model's layer and a mixed model's dense one
        for x in (K, getattr(self, "KD", K)):
            self.bw.update({x.mlp_b: x.mlp_b + x.mlp_w, x.attn_b: x.attn_b + x.attn_w})
        P = K.moe_parts      # MoE: (before the dispatch, between dispatch and combine, after the combine)
        self.moe_split = {K.mlp_fwd: (P.router_fwd, P.experts_fwd, None), K.mlp_b: (None, P.experts_b, P.router_b),
                          self.bw[K.mlp_b]: (None, P.experts_bw, P.router_bw)} if P else {}

    def kernels(self, s, l) -> LayerKernels:
        """Layer l of model stage s: a mixed model's dense layer, or the model's (`layer_kinds`)."""
        return self.KD if (s, l) in self.dense_at else self.K

    def layer_grad_at(self, r, c, l) -> tuple[float, float]:
        """(gradient bytes, the experts' share of them) of layer l of device r's chunk c."""
        if (self.stage_of[r // self.w][c], l) in self.dense_at:
            return self.plain_grad, 0.0
        return self.layer_grad, self.A.grad_reduce_bytes * self.expert_local

    def unit_of(self, r, c, l) -> tuple[float, float]:
        """(elements, the experts' of them) ZeRO-3 / FSDP gathers for unit l of device r's chunk c:
        the embedding's or output layer's (`unit_params`), a dense layer's, or the model's layer's."""
        if l in ("emb", "head"):
            return self.unit_params(l), 0.0
        if (self.stage_of[r // self.w][c], l) in self.dense_at:
            return self.plain_local, 0.0
        return self.unit_params(l), (self.expert_local if self.fsdp and self.cfg.ep > 1 else 0.0)

    def mlp(self, out, r, x, j, s, l, kern, phase, label, done=(), needs=()):
        """The MLP of layer l of stage s: plain when dense, else between the MoE collectives."""
        if (s, l) in self.dense_at:
            self.comp(out, kern, x, phase, j, label, done, needs)
        else:
            self.expert_mlp(out, r, x, j, kern, phase, label, done, needs)

    def expert_mlp(self, out, r, x, j, kern, phase, label, done=(), needs=()):
        """The MLP kernel between the MoE dispatch and combine (none for a dense model); with
        --moe-shared-expert-overlap the shared experts beside them (`moe_overlap.shared_expert_mlp`)."""
        if self.A.shared_expert_overlap:
            return shared_expert_mlp(self, out, r, x, j, kern, phase, label, done, needs)
        before, kern, after = self.moe_split.get(kern, (None, kern, None))   # the router where Megatron runs it
        if before:
            self.comp(out, before, x, phase, j, f"{label} router", needs=needs)
            needs = ()
        self.mlp_comm(out, r, x, j, "before")
        self.comp(out, kern, x, phase, j, label, () if after else done, needs)
        self.mlp_comm(out, r, x, j, "after")
        if after:
            self.comp(out, after, x, phase, j, f"{label} router", done)

    def mlp_comm(self, out, r, x, j, where):
        """MoE: the dispatch ("before" the experts) or combine ("after") collectives (`cost.moe`); an
        all-gather's program size is each member's share."""
        for c in (self.moe_dispatch if where == "before" else self.moe_combine):
            n = len(moe_group(self.cfg, c.group)) if c.kind == "all_gather" else 1
            if self.moe_async:      # read by whatever reads x next (`moe_overlap`)
                out.append(Collective(c.kind, x, x, (r,), nbytes=int(c.nbytes / n), tag=c.group, microbatch=j,
                                      blocking=False))
            else:
                self.group_comm(out, r, x, j, c.group, c.kind, int(c.nbytes / n))
