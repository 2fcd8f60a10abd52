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

Not matched, recorded: parasim prices these FP8 runs 1.4-1.5x too fast. Its FP8 runs the matmuls
at the fp8 peak (1979 of 989 TFLOP/s) at the measured fp8 matmul plateau (73 % of peak against
bf16's 80 %, `simulator.cost.compute`) and so speeds a step up ~1.7x; the same layouts priced in
BF16 come out at 0.83-0.90 of the published FP8 throughput, i.e. the published runs gain ~1.15x
from FP8 end to end. What parasim does not price: Transformer Engine's casts, transposes and amax
reductions around every FP8 GEMM (memory-bound passes over activations, weights and gradients at
every micro-batch) and whatever else keeps real FP8 steps from their matmul speed-up. The tests
assert these bounds so a better FP8 model shows up here.
"""

from dataclasses import replace

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import MODERN, ParallelConfig

# (model, GPUs, GBS, TP, PP, CP, VP, published Model TFLOP/s per GPU, embedding balanced in the split)
ROWS = [("llama3-70b", 64, 128, 4, 8, 1, 5, 719, False), ("llama3.1-405b", 1024, 512, 8, 8, 2, 8, 737, True),
        ("gpt3-175b", 128, 256, 4, 8, 1, 6, 782, False)]


def _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, fp8):
    cfg = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), global_batch=gbs, schedule="interleaved",
                         virtual_stages=vp, sequence_parallel=True, zero_stage=1, balance_embedding=balanced)
    return estimate(get_model(name), cfg, "h100-sxm", replace(MODERN, fp8=fp8))


@pytest.mark.parametrize("name,gpus,gbs,tp,pp,cp,vp,tflops,balanced", ROWS, ids=["70b", "405b", "175b"])
def test_fp8_runs_are_priced_within_the_recorded_bounds(name, gpus, gbs, tp, pp, cp, vp, tflops, balanced):
    fp8 = _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, True)
    bf16 = _priced(name, gpus, gbs, tp, pp, cp, vp, balanced, False)
    assert not fp8.oom
    assert 1.3 < fp8.model_tflops_per_gpu / tflops < 1.6           # the recorded disagreement
    assert 0.8 < bf16.model_tflops_per_gpu / tflops < 1.0           # BF16 of the same layout: below FP8's
    assert 1.6 < fp8.model_tflops_per_gpu / bf16.model_tflops_per_gpu < 1.8   # parasim's FP8 gain
