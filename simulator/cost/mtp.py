"""Multi-token prediction (Megatron-LM --mtp-num-layers, `ModelSpec.mtp_num_layers`; DeepSeek-V3
technical report, arXiv 2412.19437 Sec. 2.2): the one home of what its modules hold and cost, which
the closed form (`analytic`), the scale program (`scale_program`) and memory read.

Megatron-Core (megatron/core/transformer/multi_token_prediction.py, read at d98e8a6): on the device
of the last model stage, after the decoder and before the main output layer, module k per micro-batch
  - embeds the tokens shifted by k (the shared vocabulary-parallel embedding: its collective, `tp_ends`),
  - normalises that embedding (enorm) and the previous hidden states (hnorm), concatenates them into
    eh_proj, a column-parallel 2h -> h linear (gather_output=False; under SP its 2h input all-gathered),
    gathers its output over the tensor group (gather_from_tensor_model_parallel_region; under SP split
    again locally, scatter_to_sequence_parallel_region),
  - runs one transformer layer built from the last decoder layer's spec (`ModelSpec.mtp_layer`),
  - applies its final norm, the shared output layer and the loss (as the main head's, `tp_ends`).
The backward runs the same in reverse: the loss and logits, the layer, eh_proj's input gradient
(all-reduced over the tensor group; under SP the output gradient all-gathered first, the input
gathered again for the weight gradient and its gradient reduce-scattered), the embedding's.
Parameters per module: its layer, eh_proj (2h x h, no bias) and three norms; the embedding and the
output layer are shared. With p > 1 and untied embeddings the last stage holds a copy of the word
embedding, whose gradient is all-reduced with the first stage's, as a tied one's (Megatron-LM
finalize_model_grads, _allreduce_word_embedding_grads). FLOPs as Megatron-LM counts them
(megatron/training/training.py, num_floating_point_operations): per module a layer of the last
layer's kind, the 2h x h projection and the logits once more.

With --overlap-moe-expert-parallel-comm a module's MoE layer merges as the decoder's layers do
(`moe_overlap.overlap_exposed_per_layer`, `mtp_parts`). Not priced with MTP, refused in one line
(`check_mtp`): ZeRO-3 / FSDP (per-layer gathers), and the overlap after a dense last layer.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.cost.scale_kernels import Kernel, MatMul, activation_nbytes
from simulator.cost.tp_ends import end_collectives, end_times_s, tp_seconds
from simulator.errors import ParasimError


class MtpCollectives(NamedTuple):
    """One MTP module's tensor-parallel collectives, (kind, program bytes) in program order: before
    eh_proj (the embedding's, SP's gather of its 2h input), after it (the output gathered), before its
    input gradient (SP: the output gradient gathered) and after it (SP: the input gathered again and
    the input gradient reduce-scattered; else all-reduced; then the embedding's backward)."""

    fwd_in: tuple = ()
    fwd_out: tuple = ()
    bwd_in: tuple = ()
    bwd_out: tuple = ()


def check_mtp(model, cfg, A) -> None:
    """What is not priced with MTP modules, refused in one line (module docstring)."""
    if not model.mtp_num_layers:
        return
    what = None
    if cfg.zero_stage == 3:
        what = "ZeRO-3 / FSDP (per-layer gathers)"
    elif A is not None and A.overlap_moe_comm and not model.mtp_layer().num_experts:
        what = "--overlap-moe-expert-parallel-comm after a dense last layer"
    if what:
        raise ParasimError(f"--mtp-num-layers {model.mtp_num_layers}: {what} is not priced yet with "
                           f"multi-token prediction")


def mtp_kernels(model, cfg, A) -> tuple[Kernel, Kernel, Kernel]:
    """One module's work besides its layer and the logits, on one tensor rank for one micro-batch:
    (forward: enorm, hnorm and the final norm, eh_proj; input gradient: its transpose and the norms'
    backward; weight gradient of eh_proj). Norms at the stack's bytes per element (`simulator.cost.stack`)."""
    h, t = model.hidden, cfg.tp
    T = cfg.micro_batch_size * model.seq / cfg.cp
    rep = 1 / t if cfg.sequence_parallel else 1.0
    norms = 3 * A.profile.norm_bytes * T * h * rep
    return (Kernel("mtp_eh_fwd", (MatMul(T, h / t, 2 * h),), norms, 4),
            Kernel("mtp_eh_bgrad", (MatMul(T, 2 * h, h / t),), 2 * norms, 4),
            Kernel("mtp_eh_wgrad", (MatMul(2 * h, h / t, T),), launches=1))


def mtp_collectives(model, cfg, ends, dtype: str = "bf16") -> MtpCollectives:
    """One module's TP collectives (`MtpCollectives`); `ends`: the model's `tp_ends.EndCollectives`."""
    t = cfg.tp
    if t == 1:
        return MtpCollectives()
    act, sp = activation_nbytes(model, cfg, dtype), cfg.sequence_parallel
    wide = ("all_gather", 2 * act // t)
    if sp:
        return MtpCollectives(ends.emb_fwd + (wide,), (("all_gather", act // t),), (("all_gather", act // t),),
                              (wide, ("reduce_scatter", 2 * act)) + ends.emb_bwd)
    return MtpCollectives(ends.emb_fwd, (("all_gather", act // t),), (), (("all_reduce", 2 * act),) + ends.emb_bwd)


def mtp_parts(model, cfg, A, topo, logits: tuple, kt) -> tuple:
    """One MTP module's work besides its layer, for one micro-batch on the last device, in the
    closed form: (forward before its layer, forward after it, (B, W) before its layer's backward,
    (B, W) after it, its TP collectives' seconds): eh_proj (`mtp_kernels`) with its collectives
    (`mtp_collectives`) before the layer, the logits and loss (`logits`: their F, B, W kernel seconds)
    with the head's collectives (`tp_ends`) after it. `kt` prices a Kernel."""
    fwd, b, w = (kt(k) for k in mtp_kernels(model, cfg, A))
    c = mtp_collectives(model, cfg, end_collectives(model, cfg, A.dtype), A.dtype)
    _ef, _eb, hf, hb = end_times_s(model, cfg, A, topo)
    cf, cb = tp_seconds(c.fwd_in + c.fwd_out, cfg, A, topo), tp_seconds(c.bwd_in + c.bwd_out, cfg, A, topo)
    lf, lb, lw = logits
    return fwd + cf, lf + hf, (lb + hb, lw), (b + cb, w), cf + cb + hf + hb


def mtp_times_s(model, cfg, A, topo, layer: tuple, logits: tuple, kt) -> tuple[float, float, float, float]:
    """The closed form's (F, B, W, their TP collectives' seconds) of all the MTP modules for one
    micro-batch on the last device: each module's layer (`layer`: its F, B, W with their exposed
    communication, `analytic.layer_times` of `ModelSpec.mtp_layer`) and `mtp_parts`."""
    n = model.mtp_num_layers
    if not n:
        return 0.0, 0.0, 0.0, 0.0
    f0, f1, (b0, w0), (b1, w1), comm = mtp_parts(model, cfg, A, topo, logits, kt)
    f_l, b_l, w_l = layer
    return n * (f_l + f0 + f1), n * (b_l + b0 + b1), n * (w_l + w0 + w1), n * comm
