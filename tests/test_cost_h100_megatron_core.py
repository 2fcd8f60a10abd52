"""The cost model against NVIDIA's published Megatron-Core / NeMo throughput on DGX-H100 (FP8).

References (Model TFLOP/s per GPU as NVIDIA reports it, FP8 current scaling, DGX-H100):
  Megatron-Bridge docs/performance-summary.md, "25.11 NeMo Container", System: DGX-H100
  (https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md):
    LLAMA3_70B     64 GPUs, GBS 128, MBS 1, seq 8192, TP 4, PP 8, CP 1, VP 5       719
    LLAMA3.1_405B  1024 GPUs, GBS 512, MBS 1, seq 8192, TP 8, PP 8, CP 2, VP 8     737
  NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100, FP8)
  (https://github.com/NVIDIA/NeMo/blob/main/docs/source/performance/performance_summary.md):
    GPT3-175B      128 GPUs, GBS 256, MBS 1, seq 2048, TP 4, PP 8, CP 1, VP 6      782
Priced with what these recipes turn on (`MODERN`: FlashAttention, gradient/parameter/TP overlap,
distributed optimizer, SP) and FP8 matmuls, no recomputation.

Llama 3 70B 1.16x, GPT-3 175B 1.28x, Llama 3.1 405B 1.35x the published figures: recorded, not matched.
parasim's FP8 follows Transformer Engine: only the linear layers' GEMMs run in FP8 (at the measured
fp8 matmul plateau, 73 % of the 1979 TFLOP/s peak, `simulator.cost.compute`), the attention core and
the output layer stay BF16, and every FP8 GEMM pays its casts (amax + cast + transpose passes over
the inputs not fused into a norm or activation and over the output gradients,
`simulator.cost.scale_kernels.fp8_cast_nbytes`). That gives the
published layouts an FP8 gain of 1.38-1.54x over BF16; the same layouts priced in BF16 come out at
0.83-0.90 of the published FP8 throughput, so the published runs gain only ~1.15x end to end. The
remainder (FP8 GEMM tiles losing more to small or odd shapes than BF16 ones, scaling-factor
bookkeeping, kernels we do not list) is not priced. The bounds below are the recorded disagreement,
so a better FP8 model shows up here.
"""

from dataclasses import replace

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import MODERN, ParallelConfig

# (model, GPUs, GBS, TP, PP, CP, VP, published Model TFLOP/s per GPU, embedding balanced in the split)
ROWS = [("llama3-70b", 64, 128, 4, 8, 1, 5, 719, False), ("llama3.1-405b", 1024, 512, 8, 8, 2, 8, 737, True),
        ("gpt3-175b", 128, 256, 4, 8, 1, 6, 782, False)]
# parasim's figures as recorded (priced / published FP8 throughput; priced FP8 / priced BF16): a change
# of the FP8 model moves them and must update the module docstring and the README's validation section
RECORDED = {"llama3-70b": (1.16, 1.38), "llama3.1-405b": (1.35, 1.50), "gpt3-175b": (1.28, 1.54)}


def _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, fp8):
    cfg = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), global_batch=gbs, schedule="interleaved",
                         virtual_stages=vp, sequence_parallel=True, zero_stage=1, balance_embedding=balanced)
    return estimate(get_model(name), cfg, "h100-sxm", replace(MODERN, fp8=fp8))


@pytest.mark.parametrize("name,gpus,gbs,tp,pp,cp,vp,tflops,balanced", ROWS, ids=["70b", "405b", "175b"])
def test_fp8_runs_are_priced_within_the_recorded_bounds(name, gpus, gbs, tp, pp, cp, vp, tflops, balanced):
    fp8 = _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, True)
    bf16 = _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, False)
    assert not fp8.oom
    ratio, gain = RECORDED[name]
    assert fp8.model_tflops_per_gpu / tflops == pytest.approx(ratio, abs=0.01)      # the recorded disagreement
    assert 0.8 < bf16.model_tflops_per_gpu / tflops < 0.91          # BF16 of the same layout: below FP8's
    assert fp8.model_tflops_per_gpu / bf16.model_tflops_per_gpu == pytest.approx(gain, abs=0.01)  # FP8 gain
