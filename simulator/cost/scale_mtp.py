"""Multi-token prediction's modules in a scale program (`scale_program`; what they are and cost:
`simulator.cost.mtp`): on the last model stage, after its layers and before the output layer, each
module's embedding collective, eh_proj, its layer and the logits and loss again; in the backward the
reverse, after the output layer's; its gradients (the layers', eh_proj's, the norms') complete
together after the last micro-batch's backward and join the buckets, the experts' share over the
expert-data-parallel group."""

from __future__ import annotations

from simulator.cost.mtp import mtp_collectives, mtp_kernels
from simulator.cost.rank_params import mtp_params_on_rank


class MtpEmission:
    """Mixed into `scale_program._Emitter` (its model, cfg, A, K, ends, S, logits, dense_at, bw,
    `comp`, `tp_sized`, `layer_fwd`, `layer_bwd`, `kernels`)."""

    def mtp_setup(self) -> None:
        model, cfg, A = self.model, self.cfg, self.A
        self.mtp = model.mtp_num_layers if self.logits else 0
        if not self.mtp:
            return
        self.mtp_k = mtp_kernels(model, cfg, A)
        self.mtp_c = mtp_collectives(model, cfg, self.ends, A.dtype)
        self.mtp_bw = self.mtp_k[1] + self.mtp_k[2]
        dense, expert = mtp_params_on_rank(model, cfg.tp, cfg.ep, cfg.expert_tp)
        self.mtp_grad = (A.grad_reduce_bytes * (dense + expert), A.grad_reduce_bytes * expert if cfg.ep > 1 else 0.0)

    def mtp_forward(self, out, r, x, j, s) -> None:
        for i in range(self.mtp):
            self.tp_sized(out, r, x, j, self.mtp_c.fwd_in)
            self.comp(out, self.mtp_k[0], x, "forward", j, f"F{j} mtp{i} eh_proj")
            self.tp_sized(out, r, x, j, self.mtp_c.fwd_out)
            self.layer_fwd(out, r, x, j, s, ("mtp", i))
            self.tp_sized(out, r, x, j, self.ends.head_fwd)
            self.comp(out, self.K.logits_fwd, x, "forward", j, f"F{j} mtp{i} logits")
            self.tp_sized(out, r, x, j, self.ends.loss)

    def mtp_backward(self, out, r, c, s, j, kind, last_mb, grads_done) -> None:
        """Kind BW (input and weight gradients) or B (input gradients only) of every module, last first."""
        g = f"g{s}.{j}"
        for i in reversed(range(self.mtp)):
            self.tp_sized(out, r, g, j, self.ends.head_bwd_in)
            logits = self.K.logits_b + self.K.logits_w if kind == "BW" else self.K.logits_b
            self.comp(out, logits, g, "backward", j, f"{kind}{j} mtp{i} logits")
            self.tp_sized(out, r, g, j, self.ends.head_bwd_out)
            self.layer_bwd(out, r, c, g, j, s, ("mtp", i), kind, None)
            self.tp_sized(out, r, g, j, self.mtp_c.bwd_in)
            done = ("grad_mtp",) if last_mb and i == 0 else ()
            self.comp(out, self.mtp_bw if kind == "BW" else self.mtp_k[1], g, "backward", j,
                      f"{kind}{j} mtp{i} eh_proj", done)
            self.tp_sized(out, r, g, j, self.mtp_c.bwd_out)
        if last_mb:
            grads_done(out, r, None, None, j, "grad_mtp", *self.mtp_grad)

    def mtp_wgrad(self, out, r, s, j, last_mb, grads_done) -> None:
        """The weight gradients of every module (zero-bubble W actions), last first."""
        g = f"g{s}.{j}"
        for i in reversed(range(self.mtp)):
            self.comp(out, self.K.logits_w, g, "wgrad", j, f"W{j} mtp{i} logits")
            K = self.kernels(s, ("mtp", i))
            for kern in (K.mlp_w, K.attn_w):
                self.comp(out, kern, g, "wgrad", j, f"W{j} mtp{i} {kern.name}")
            done = ("grad_mtp",) if last_mb and i == 0 else ()
            self.comp(out, self.mtp_k[2], g, "wgrad", j, f"W{j} mtp{i} eh_proj", done)
        if last_mb:
            grads_done(out, r, None, None, j, "grad_mtp", *self.mtp_grad)
