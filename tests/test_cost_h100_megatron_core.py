"""The cost model against NVIDIA's published Megatron-Core / NeMo FP8 throughput on DGX-H100.

References (Model TFLOP/s per GPU as NVIDIA reports it; FP8; DGX-H100; no activation recomputation):
  NeMo docs/source/performance/performance_summary.md, NeMo 24.07 container, last revision
  (github.com/NVIDIA/NeMo commit 8e3d65d, "24.07 perf numbers"; delayed-scaling FP8):
    model          GPUs  GBS  MBS  seq   TP PP CP VP   TFLOP/s
    GPT3-5B          64 2048    4  2048   1  1  1  1   765
    GPT3-20B         64  256    2  2048   2  1  1  1   750
    GPT3-175B       128  256    1  2048   4  8  1  6   771
    GPT3-175B       512 2048    2  2048   4  8  1  6   888
    LLAMA2-7B         8  128    1  4096   1  1  1  1   780
    LLAMA2-13B       16  128    1  4096   1  4  1 10   760
    LLAMA2-70B       64  128    1  4096   4  4  1 20   768
    Nemotron-8B      64  256    4  4096   2  1  1  1   643
    Nemotron-22B     64  256    2  4096   2  4  1 10   562
    LLAMA3-8B         8  128    1  8192   1  1  2  1   711
    LLAMA3-70B       64  128    1  8192   4  4  2  5   734
  NeMo 25.02 container, NeMo 2.0 (docs.nvidia.com/nemo-framework/user-guide, performance summary,
  System: DGX-H100; current-scaling FP8):
    GPT3-175B       512 2048    2  2048   4  8  1  6   932
  Megatron-Bridge docs/performance-summary.md and performance-summary-archive.md (github.com/
  NVIDIA-NeMo/Megatron-Bridge; FP8 current scaling, DDP with the distributed optimizer):
    LLAMA3_70B      64  128    1  8192   4  8  1  5   719   (25.11 container)
    LLAMA3_70B      64  256    1  8192   4  8  1  5   731   (26.04.01)
    LLAMA3.1_405B 1024  512    1  8192   8  8  2  8   737   (25.11)
    LLAMA3.1_405B 1024 1536    1  8192   8  8  2  8   827   (26.04.01)
Model shapes: NeMo's GPTConfig5B / GPTConfig20B (24 x 4096 and 44 x 6144, 4h MLP, GPT-2 vocabulary)
and Nemotron3Config8B / 22B (32 x 4096 and 40 x 6144, squared-ReLU 4h MLP, no biases, rotary, untied,
vocabulary 256000), `nemo/collections/llm/gpt/model/{base,nemotron}.py`; the others are presets.
Priced with what these recipes turn on (`MODERN`: FlashAttention, gradient/parameter/TP overlap,
distributed optimizer, SP) and FP8 linear layers. Nemotron-340B (128 GPUs, t8 p8 v12) is left out:
without recomputation its published layout needs 102 GB per GPU as Megatron counts memory, so the
recipe ran with something we are not told.

What brought the rows in (the FP8 rows were 1.16-1.35x before; the model changes are documented in
`simulator.cost.compute` and `simulator.cost.scale_kernels`): the FP8 plateau measured on H100 itself
(70.9 %, not H200's 73.4 %); the half-efficiency dimension of a GEMM scaled by the device's FLOP per HBM
byte (H100 bf16 124, fp8 247, A100 64), which reproduces NVIDIA's FP8-over-BF16 GEMM speedups (1.75x
large, >= 1.25x most others, cuBLAS 12.9 blog); Transformer Engine's userbuffers taking 16 of 132 SMs
from the GEMMs they overlap; Megatron's unfused vocab-parallel cross-entropy (38 + 14 bytes per logit).
FLOP convention (`simulator.cost.flops`, `CONVENTION` below): NeMo's 24.07 and 25.02 tables count
the full attention core (PaLM's 12 L H Q T); Megatron-Bridge's flop_utils.py counts its causal half
(`seq_length / hidden_size / 2`, from its first version d42316e9, 2025-09-26), so its four rows are
compared with `causal_attention_flops=True`. Compared under full attention they came out 4-7 % higher
(Llama 3.1 405B at GBS 512 at 1.17, outside 15 %, now 1.12; its layout at GBS 1536 1.09, now 1.04).
Two rows stay above 15 % and are asserted at their recorded ratio: the two small models with
4-sequence micro-batches (GPT3-5B 1.16, Nemotron-8B 1.17: the Megatron-Core BF16 weak-scaling table
shows the same excess for small models, tests/test_cost_h100_bf16_megatron.py). Nemotron-8B was 1.19, and
the rotary rows 0.01-0.02 lower than before, until the fused RoPE kernel's traffic (4 bytes per query and
key element, the stack's rope_bytes, `simulator.cost.stack`) was priced.
"""

from dataclasses import replace

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import MODERN, ParallelConfig

_NEMOTRON = dict(biases=False, position_embedding=False, tied_embeddings=False)
MODELS = {"gpt3-5b": ModelSpec("gpt3-5b", 24, 4096, 32, 2048, 50257),
          "gpt3-20b": ModelSpec("gpt3-20b", 44, 6144, 48, 2048, 50257),
          "nemotron-8b": ModelSpec("nemotron-8b", 32, 4096, 32, 4096, 256000, ffn_hidden=16384, **_NEMOTRON),
          "nemotron-22b": ModelSpec("nemotron-22b", 40, 6144, 48, 4096, 256000, ffn_hidden=24576, **_NEMOTRON)}

# (row id, model, GPUs, GBS, MBS, TP, PP, CP, VP, published Model TFLOP/s per GPU): module docstring
ROWS = [("gpt3-5b", "gpt3-5b", 64, 2048, 4, 1, 1, 1, 1, 765), ("gpt3-20b", "gpt3-20b", 64, 256, 2, 2, 1, 1, 1, 750),
        ("gpt3-175b-128", "gpt3-175b", 128, 256, 1, 4, 8, 1, 6, 771),
        ("gpt3-175b-512", "gpt3-175b", 512, 2048, 2, 4, 8, 1, 6, 888),
        ("gpt3-175b-512-25.02", "gpt3-175b", 512, 2048, 2, 4, 8, 1, 6, 932),
        ("llama2-7b", "llama2-7b", 8, 128, 1, 1, 1, 1, 1, 780), ("llama2-13b", "llama2-13b", 16, 128, 1, 1, 4, 1, 10, 760),
        ("llama2-70b", "llama2-70b", 64, 128, 1, 4, 4, 1, 20, 768),
        ("nemotron-8b", "nemotron-8b", 64, 256, 4, 2, 1, 1, 1, 643),
        ("nemotron-22b", "nemotron-22b", 64, 256, 2, 2, 4, 1, 10, 562),
        ("llama3-8b-cp2", "llama3-8b", 8, 128, 1, 1, 1, 2, 1, 711),
        ("llama3-70b-cp2", "llama3-70b", 64, 128, 1, 4, 4, 2, 5, 734),
        ("llama3-70b-25.11", "llama3-70b", 64, 128, 1, 4, 8, 1, 5, 719),
        ("llama3-70b-26.04", "llama3-70b", 64, 256, 1, 4, 8, 1, 5, 731),
        ("llama3.1-405b-25.11", "llama3.1-405b", 1024, 512, 1, 8, 8, 2, 8, 737),
        ("llama3.1-405b-26.04", "llama3.1-405b", 1024, 1536, 1, 8, 8, 2, 8, 827)]
# priced / published where parasim stays more than 15 % off (module docstring): a change of the model
# that moves them must update this table, the module docstring and the README's validation section
RECORDED = {"gpt3-5b": 1.16, "nemotron-8b": 1.17}
# the FLOP convention each source counts its Model TFLOP/s by (`simulator.cost.flops`): NeMo 24.07 and
# 25.02 full attention (NeMo's flops_formulas.py halved it only from commit 6251117f4c, 2025-08-09);
# Megatron-Bridge's flop_utils.py counts the causal half from its first version (d42316e9, 2025-09-26)
CONVENTION = {row[0]: "causal" if row[0].endswith(("-25.11", "-26.04")) else "full" for row in ROWS}


def priced_row(row, fp8=True):
    """The estimate of published row `row` under the FLOP convention its source counts by."""
    _, name, gpus, gbs, mbs, tp, pp, cp, vp, _tflops = next(r for r in ROWS if r[0] == row)
    return _priced(name, gpus, gbs, mbs, tp, pp, cp, vp, fp8, CONVENTION[row] == "causal")


def _priced(name, gpus, gbs, mbs, tp, pp, cp, vp, fp8, causal=False):
    model = MODELS.get(name) or get_model(name)
    cfg = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), micro_batch_size=mbs, global_batch=gbs,
                         schedule="interleaved" if vp > 1 else "1f1b", virtual_stages=vp,
                         sequence_parallel=tp > 1, zero_stage=1, balance_embedding=model.layers % (pp * vp) > 0)
    return estimate(model, cfg, "h100-sxm", replace(MODERN, fp8=fp8, causal_attention_flops=causal))


@pytest.mark.parametrize("row,name,gpus,gbs,mbs,tp,pp,cp,vp,tflops", ROWS, ids=[r[0] for r in ROWS])
def test_nvidia_fp8_runs_on_h100(row, name, gpus, gbs, mbs, tp, pp, cp, vp, tflops):
    fp8 = priced_row(row)
    assert not fp8.oom                      # the recipes ran without recomputation, and fit
    ratio = fp8.model_tflops_per_gpu / tflops
    if row in RECORDED:
        assert ratio == pytest.approx(RECORDED[row], abs=0.01)      # the recorded disagreement
    else:
        assert ratio == pytest.approx(1.0, abs=0.15)


def test_fp8_gain_over_bf16_on_the_same_layout():
    """No NVIDIA table pairs BF16 and FP8 for one dense layout on H100; the FP8 gain is the priced
    ratio of the two on each published layout. Only the linear layers' GEMMs speed up (at most 1.75x,
    NVIDIA's large-GEMM figure); the BF16 attention core and output layer, the element-wise passes and
    the casts do not, so the gain is 1.25-1.5x, largest for the big models whose GEMMs dominate."""
    gains = {}
    for row, name, gpus, gbs, mbs, tp, pp, cp, vp, _ in ROWS:
        fp8, bf16 = (_priced(name, gpus, gbs, mbs, tp, pp, cp, vp, x) for x in (True, False))
        gains[row] = fp8.model_tflops_per_gpu / bf16.model_tflops_per_gpu
    assert all(1.2 < g < 1.5 for g in gains.values())
    assert gains["gpt3-175b-128"] > gains["gpt3-20b"] > gains["nemotron-22b"]



def test_the_causal_convention_removes_half_the_attention_core_from_model_flops_only():
    """Same step, same hardware FLOPs; model FLOPs lose 6 L h s per token, half PaLM's 12 L H Q T
    (`simulator.cost.flops`): Llama 3 70B at 8k tokens on the Megatron-Bridge layout, BF16."""
    m = get_model("llama3-70b")
    full, causal = (_priced("llama3-70b", 64, 128, 1, 4, 8, 1, 5, False, causal=c) for c in (False, True))
    per_token = 6 * m.matmul_params() + 12 * m.layers * m.hidden * m.seq
    expected = (per_token - 6 * m.layers * m.hidden * m.seq) / per_token
    assert causal.step_time_s == full.step_time_s and causal.tflops_per_gpu == full.tflops_per_gpu
    assert causal.model_tflops_per_gpu / full.model_tflops_per_gpu == pytest.approx(expected, rel=1e-12)
    assert causal.mfu / full.mfu == pytest.approx(expected, rel=1e-12)
    assert 0.93 < expected < 0.94     # the 6-7 % a comparison mixing the conventions is off by
