"""PyTorch-native training on H100 against torchtitan's published tables (issue 25 items 2 and 6).

References (github.com/pytorch/torchtitan; "Grand Teton" hosts: 8 x H100 SXM with 96 GB HBM2e at
2.4 TB/s, 400 Gb/s per GPU, "the default 500W power limit"; tokens per second per GPU, no FLOP
convention involved):
benchmarks/llama3_h100_202412_torchtitan.md (added in commit 820504e2; the runs used torchtitan
9dec370, torch 1963fc8, December 2024), Llama 3.1 8B and 70B, sequence 8192 unless given:
    Table 1/3  8B FSDP 8 / 128 GPUs, local batch 2, selective AC (train_configs/llama3_8b.toml:
               selective_ac_option = 'op'): eager 5,762 / 5,605 (82.4 / 67.0 GiB), torch.compile
               6,667 / 6,514 (77.0 / 62.0 GiB)
    Table 2    8B, 8 GPUs, FSDP x CP, compile + Float8, local batch 1, full AC: 32k FSDP 8 3,890;
               64k FSDP 4 CP 2 2,540; 128k FSDP 2 CP 4 1,071; 256k CP 8 548
    Table 4    70B, 256 GPUs, FSDP 32 x TP 8, compile + Float8, local batch 16, full AC: 829, async TP 876
benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (commit 820504e2, same hosts), bfloat16 with
torch.compile: 8B on 64 GPUs FSDP 8 x TP 8, per-op SAC, local batch 12: 4,378, async TP 4,809.4;
70B as Table 4: 597.3, async TP 652.4.
benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy, June 2025, torchtitan e7c0cae): 8B
FSDP on 4 and 8 hosts of 8 H200, local batch 2, compile, Float8 (float8 all-gather), op-level SAC:
10,938 and 10,753 (47.96 and 46.97 GiB).
The first page: the eager FSDP runs reach "33% to 39% MFU" (eager, compiled) against the SXM peak,
and the capped part's real peak lies "between SXM and NVL". Tables 5 and 6 (405B, pp 8 over 126
layers) are left out: torchtitan's uneven split of that time is not stated.
Priced as they ran: the hardware as a file override (`h100-sxm:power_cap_W=500,memory_GB=96,
hbm_TBps=2.4`, docs/hardware.md), FSDP2 over the data x context ranks (`fsdp="fsdp2"`: prefetch,
float32 reduce-scatter, `simulator.cost.fsdp`), selective recomputation as torchtitan does it (every
element-wise op and every second matmul of a block recomputed, `simulator.cost.sac`), stack
torchtitan (eager) or torchtitan-compile, Float8 as `Assumptions.fp8`, async TP as overlap_tp_comm.

What brought the eager FSDP rows from 1.55x / 1.60x to 1.11x / 1.14x, each counted from torchtitan's
code at 9dec370 (the stack files' sources): eager PyTorch moves every element-wise op through HBM --
RMSNorm 36 bytes per element (five fp32 ops) against a fused kernel's 4, RoPE 20 per query and key
element, the K/V repeat of grouped-query attention and the attention output's layout copy, SwiGLU
10 -- and the op-level checkpointing policy recomputes all of them and wk, wo and w3 in the backward
(1.55 -> 1.13, 1.60 -> 1.16); FSDP2's copy-out of every gathered unit on the compute stream
(`simulator.cost.fsdp.COPY_OUT_BYTES`) gave 0.02 more. Six of sixteen rows are within 15 % (both
eager FSDP rows, CP 1 and 2, the 70B 2D FP8 row and its bf16 row); the median is 1.21. What stays fast, asserted at
its recorded ratio:
- compiled FSDP rows (1.16, 1.19): eager and compiled runs leave about the same 0.3 s per step
  unexplained, so the missing term is common to both, not fusion; candidates with no published
  figure: the clock under the 500 W cap (priced at (500/700)^(1/3) = 0.89 of the boost clock; an
  NVL-level peak, 0.84, would give back ~5 %), FSDP2's reduce-scatter copy-in and float32 cast on
  its own stream, NCCL kernels sharing SMs and HBM with the overlapped compute. Memory is 15-28 % above
  the published peak (the op-level policy saves fewer activations than parasim's selective
  recomputation keeps: its memory model prices Megatron's), so the 8-GPU rows are priced out of
  the 96 GB.
- H200 FSDP with Float8 (1.29, 1.32; memory 1.71x): torchao's Float8 is priced with Transformer
  Engine's casts (`scale_kernels.fp8_cast_nbytes`: in the forward only the projection's input
  pays), while torchao scales and casts every linear's input and output gradient, and the float8
  all-gather is not modelled; the op-level policy's smaller activation memory shows most here.
- CP 4 and 8 (1.31, 1.35): from CP 2 to CP 4 the published model FLOP rate falls from about 376 to
  269 TFLOP/s per GPU (6 N + 12 L h s per token, non-embedding N; 0.72x), while parasim keeps the
  rate nearly flat; what the longer ring loses is not priced.
- Tensor parallelism (1.13-1.43): async TP is priced as hiding every TP collective, while the
  published gain is 1.04-1.10 (parasim 1.15-1.27); and the 8B bf16 TP row is fast even without it
  (1.23): DTensor's TP in eager autograd is not priced beyond its collectives. (These rows moved
  down when the TP collectives outside the blocks were priced, `simulator.cost.tp_ends`.)
A change of the model that moves a ratio must update RECORDED, this docstring and docs/validation.md.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig

HW = "h100-sxm:power_cap_W=500,memory_GB=96,hbm_TBps=2.4"   # Grand Teton's H100 (module docstring)
FSDP_8B = dict(micro_batch_size=2, recompute="selective")  # Tables 1 and 3: local batch 2, op-level SAC
# (row id, stack, hardware, model, seq, degrees and batch, fp8, async TP, published TPS/GPU, memory GiB or None)
TABLE = [("8-gpus", "torchtitan", HW, "llama3-8b", None, dict(dp=8, **FSDP_8B), False, False, 5762, 82.4),
         ("8-gpus-compile", "torchtitan-compile", HW, "llama3-8b", None, dict(dp=8, **FSDP_8B), False, False, 6667, 77.0),
         ("128-gpus", "torchtitan", HW, "llama3-8b", None, dict(dp=128, **FSDP_8B), False, False, 5605, 67.0),
         ("128-gpus-compile", "torchtitan-compile", HW, "llama3-8b", None, dict(dp=128, **FSDP_8B), False, False,
          6514, 62.0)]
# Table 2 (FSDP + CP + torch.compile + Float8, 8 GPUs, local batch 1, full AC) and Table 4 (Llama 3.1 70B,
# FSDP 32 x TP 8 + torchtitan.compile + Float8, local batch 16, full AC), the same page; and
# benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (commit 820504e2, same hosts; bfloat16 rows,
# torch.compile): Llama 3 8B FSDP 8 x TP 8 with per-op SAC, local batch 12, and the 70B of Table 4,
# each with vanilla and async TP. Memory is not compared for these (the pages' peaks include the
# caching allocator's reserve at 32k-262k tokens).
for dp, cp, seq, tps in ((8, 1, 32768, 3890), (4, 2, 65536, 2540), (2, 4, 131072, 1071), (1, 8, 262144, 548)):
    TABLE.append((f"cp{cp}-{seq // 1024}k", "torchtitan-compile", HW, "llama3-8b", seq,
                  dict(dp=dp, cp=cp, micro_batch_size=1, recompute="full"), True, False, tps, None))
_TP70 = dict(tp=8, dp=32, micro_batch_size=16, recompute="full", sequence_parallel=True)
_TP8 = dict(tp=8, dp=8, micro_batch_size=12, recompute="selective", sequence_parallel=True)
TABLE += [("70b-2d", "torchtitan-compile", HW, "llama3-70b", None, _TP70, True, False, 829, None),
          ("70b-2d-async-tp", "torchtitan-compile", HW, "llama3-70b", None, _TP70, True, True, 876, None),
          ("8b-tp8-bf16", "torchtitan-compile", HW, "llama3-8b", None, _TP8, False, False, 4378, None),
          ("8b-tp8-bf16-async-tp", "torchtitan-compile", HW, "llama3-8b", None, _TP8, False, True, 4809.4, None),
          ("70b-2d-bf16", "torchtitan-compile", HW, "llama3-70b", None, _TP70, False, False, 597.3, None),
          ("70b-2d-bf16-async-tp", "torchtitan-compile", HW, "llama3-70b", None, _TP70, False, True, 652.4, None)]
# benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy on WhiteFiber, June 2025, torchtitan
# e7c0cae): 8B FSDP over 4 and 8 hosts of 8 H200 (400 Gb/s per GPU, no power cap stated), local batch 2,
# torch.compile, Float8 with float8 all-gather, the 8B config's op-level selective AC
TABLE += [(f"h200-{n * 8}-gpus", "torchtitan-compile", "h200", "llama3-8b", None, dict(dp=n * 8, **FSDP_8B), True,
           False, tps, gib) for n, tps, gib in ((4, 10938, 47.96), (8, 10753, 46.97))]
# priced / published: throughput, memory (module docstring); OUTSIDE: the rows more than 15 % fast
RECORDED = {"8-gpus": (1.11, 1.15), "8-gpus-compile": (1.16, 1.23), "128-gpus": (1.14, 1.18),
            "128-gpus-compile": (1.19, 1.28), "cp1-32k": (1.08, None), "cp2-64k": (0.99, None),
            "cp4-128k": (1.31, None), "cp8-256k": (1.35, None), "70b-2d": (1.00, None), "70b-2d-async-tp": (1.27, None),
            "8b-tp8-bf16": (1.23, None), "8b-tp8-bf16-async-tp": (1.43, None), "70b-2d-bf16": (1.13, None),
            "70b-2d-bf16-async-tp": (1.30, None), "h200-32-gpus": (1.29, 1.72), "h200-64-gpus": (1.32, 1.71)}
OUTSIDE = tuple(row for row, (speed, _m) in RECORDED.items() if speed > 1.15)


def priced(row):
    """The estimate of published row `row` as it ran (module docstring)."""
    _, stack, hardware, name, seq, kw, fp8, async_tp, _tps, _gib = next(r for r in TABLE if r[0] == row)
    model = get_model(name, seq=seq) if seq else get_model(name)
    cfg = ParallelConfig(**kw, global_batch=kw["micro_batch_size"] * kw["dp"], zero_stage=3, fsdp="fsdp2")
    return estimate(model, cfg, hardware, Assumptions(stack=stack, fp8=fp8, overlap_tp_comm=async_tp))


@pytest.mark.parametrize("row,tps,gib", [(r[0], r[-2], r[-1]) for r in TABLE], ids=[r[0] for r in TABLE])
def test_torchtitan_published_rows_on_h100(row, tps, gib):
    res = priced(row)
    speed, memory = RECORDED[row]
    ratio = res.tokens_per_s / res.gpus / tps
    assert ratio == pytest.approx(speed, abs=0.005)   # (the 8-GPU FSDP rows: priced out of memory, memory recorded)
    if gib is not None:
        assert res.memory.total_bytes / 2**30 / gib == pytest.approx(memory, abs=0.005)
    if row not in OUTSIDE:
        assert ratio == pytest.approx(1.0, abs=0.15)


def test_within_15_percent_and_the_median():
    """Six of the sixteen rows within 15 %; the median of all is 1.21 (module docstring)."""
    ratios = sorted(speed for speed, _m in RECORDED.values())
    assert len(ratios) == 16 and len(ratios) - len(OUTSIDE) == 6
    assert (ratios[7] + ratios[8]) / 2 == pytest.approx(1.21, abs=1e-9)


def test_the_eager_stack_pays_what_compile_fuses_and_the_op_policy_recomputes():
    """Same layout, three stacks: Megatron-Core's fused kernels < compiled < eager; the compiled
    stack's element-wise traffic per norm is a fused kernel's (4 bytes per element), eager's 36."""
    times = {row: priced(row).step_time_s for row in ("8-gpus", "8-gpus-compile")}
    cfg = ParallelConfig(dp=8, micro_batch_size=2, global_batch=16, zero_stage=3, fsdp="fsdp2", recompute="selective")
    fused = estimate(get_model("llama3-8b"), cfg, HW, Assumptions(stack="megatron-core")).step_time_s
    assert fused < times["8-gpus-compile"] < times["8-gpus"]
    # published speed-up of compile over eager 6667 / 5762 = 1.157; priced 1.21 (module docstring)
    assert times["8-gpus"] / times["8-gpus-compile"] == pytest.approx(1.21, abs=0.01)
