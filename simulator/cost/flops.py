"""FLOP conventions: what a "model TFLOP/s" and an MFU count, so every comparison names its own.

Model FLOPs per token (PaLM, Chowdhery et al. 2022, App. B):

    full   (default)  6 N + 12 L H Q T      N matmul weights, L layers, H Q = heads x head dim, T = s
    causal            6 N +  6 L H Q T      the attention core's causal half

The attention core of a causal model multiplies only the lower triangle of the s x s scores (a
fused kernel skips the blocks above the diagonal, Dao 2023), so counting the full 12 L H Q T credits
FLOPs nobody executes; publishers differ on which they report, and a comparison that mixes the two
is off by the attention share (4-7 % for 8k-token Llama 3 layouts):
- full: PaLM's definition; Megatron-LM's `num_floating_point_operations` up to core_r0.8.0
  (megatron/training/training.py: `+ (args.seq_length / args.hidden_size)`), so its README's H100
  weak-scaling table (r0.8.0, 2024); Narayanan et al. 2021 eq. 3; NeMo's flops_formulas.py until
  NVIDIA/NeMo commit 6251117f4c (2025-08-09, "Discount FLOPs in dot-product att"), so the NeMo 24.07
  and 25.02 performance summaries.
- causal: Megatron-LM since commit 8873b55d6a (2025-03-06, "Only half of the attention matrix is
  non-zero and needs to be multiplied with V": `seq_length / hidden_size / 2`); NeMo since
  6251117f4c (`0.5 if causal_self_attn`); Megatron-Bridge's flop_utils.py from its first version
  (NVIDIA-NeMo/Megatron-Bridge d42316e9, 2025-09-26, "Copy from Mcore"), so its 25.11 and 26.04
  performance summaries.

Utilisations (both against the datasheet's dense 16-bit peak, `Hardware.peak`, even under FP8, as
NeMo and Megatron report them):
- MFU = model FLOPs per second / peak (PaLM, App. B): no recomputation counted; the convention
  above decides its attention term (`Assumptions.causal_attention_flops`).
- HFU = hardware FLOPs per second / peak, recomputation included (Korthikanti et al. 2022, Sec. 6;
  Narayanan et al. 2021 eq. 3, whose full-attention count parasim's TFLOP/s per GPU keeps in both
  conventions: it is the work the roofline is asked to do, `simulator.cost.scale_kernels`).
"""

from __future__ import annotations

FULL, CAUSAL = "full", "causal"


def convention(causal_attention_flops: bool) -> str:
    """The name of the convention a result counts its model FLOPs by."""
    return CAUSAL if causal_attention_flops else FULL


def model_flops_per_token(matmul_params: float, layers: int, hidden: int, seq: int,
                          causal_attention_flops: bool = False) -> float:
    """6 N + 12 L H Q T (full) or 6 N + 6 L H Q T (causal), module docstring."""
    return 6 * matmul_params + (6 if causal_attention_flops else 12) * layers * hidden * seq
