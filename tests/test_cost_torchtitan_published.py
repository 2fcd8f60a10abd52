"""PyTorch-native FSDP training of Llama 3.1 8B on H100 against torchtitan's published tables
(issue 25 items 2 and 6).

Reference: torchtitan benchmarks/llama3_h100_202412_torchtitan.md (github.com/pytorch/torchtitan,
commit 820504e2 added it; the runs used torchtitan 9dec370, torch 1963fc8, December 2024): Llama 3.1
8B, FSDP (1D), local batch size 2, selective activation checkpointing (train_configs/llama3_8b.toml:
selective_ac_option = 'op'), sequence 8192; "Grand Teton" hosts: 8 x H100 SXM with 96 GB HBM2e at
2.4 TB/s, 400 Gb/s per GPU, "the default 500W power limit". Tokens per second per GPU (no FLOP
convention involved) and peak memory:
    GPUs  global batch  technique        TPS/GPU  memory GiB
       8        16      FSDP               5,762     82.4     (Table 1)
       8        16      + torch.compile    6,667     77.0     (Table 1)
     128       256      FSDP               5,605     67.0     (Table 3)
     128       256      + torch.compile    6,514     62.0     (Table 3)
The same page: these runs reach "33% to 39% MFU" (eager, compiled) against the SXM peak, whose
footnote says the capped part's real peak lies "between SXM and NVL".
Priced as they ran: the hardware as a file override (`h100-sxm:power_cap_W=500,memory_GB=96,
hbm_TBps=2.4`, docs/hardware.md), FSDP2 over all GPUs (`fsdp="fsdp2"`, torchtitan's prefetch and
float32 gradient reduce-scatter, `simulator.cost.fsdp`), selective recomputation as torchtitan's
stack does it (every element-wise op and every second matmul of a block recomputed,
`simulator.cost.sac`), stack torchtitan (eager) or torchtitan-compile.

What brought the eager rows from 1.55x / 1.60x to 1.13x / 1.16x, each counted from torchtitan's code
at 9dec370 (the stack files' sources): eager PyTorch moves every element-wise op through HBM --
RMSNorm 36 bytes per element (five fp32 ops) against a fused kernel's 4, RoPE 20 per query and key
element, the K/V repeat of grouped-query attention and the attention output's layout copy, SwiGLU
10 -- and the op-level checkpointing policy recomputes all of them and wk, wo and w3 in the backward.
Still fast by 13-21 %: the 8-GPU eager row is within 15 %, the 128-GPU one just outside (1.158) and
the compiled rows further (1.18x / 1.21x); all four are asserted at their recorded ratio. Both tables leave about the
same 0.3-0.4 s per step unexplained, so the missing term is common to eager and compiled runs, not
fusion: candidates with no published figure are the clock under the 500 W cap (priced at
(500/700)^(1/3) = 0.89 of the boost clock; an NVL-level peak, 0.84, would give back ~5 %), FSDP2's
copy-in/copy-out of every gathered and reduced unit, NCCL kernels sharing SMs and HBM with the
overlapped compute. Memory stays 15-18 % above the published peak (the op-level policy saves fewer
activations than parasim's selective recomputation keeps). A change of the model that moves a ratio
must update RECORDED, this docstring and docs/validation.md.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig

HW = "h100-sxm:power_cap_W=500,memory_GB=96,hbm_TBps=2.4"   # Grand Teton's H100 (module docstring)
# (row id, stack, GPUs, published TPS/GPU, published memory GiB): module docstring
TABLE = [("8-gpus", "torchtitan", 8, 5762, 82.4), ("8-gpus-compile", "torchtitan-compile", 8, 6667, 77.0),
         ("128-gpus", "torchtitan", 128, 5605, 67.0), ("128-gpus-compile", "torchtitan-compile", 128, 6514, 62.0)]
# priced / published: throughput, memory (module docstring); OUTSIDE: the rows more than 15 % fast
OUTSIDE = ("128-gpus", "8-gpus-compile", "128-gpus-compile")
RECORDED = {"8-gpus": (1.13, 1.15), "8-gpus-compile": (1.18, 1.23), "128-gpus": (1.16, 1.18),
            "128-gpus-compile": (1.21, 1.28)}


def priced(row):
    """The estimate of published row `row` as it ran (module docstring)."""
    _, stack, gpus, _tps, _gib = next(r for r in TABLE if r[0] == row)
    cfg = ParallelConfig(dp=gpus, micro_batch_size=2, global_batch=2 * gpus, zero_stage=3, fsdp="fsdp2",
                         recompute="selective")
    return estimate(get_model("llama3-8b"), cfg, HW, Assumptions(stack=stack))


@pytest.mark.parametrize("row,stack,gpus,tps,gib", TABLE, ids=[r[0] for r in TABLE])
def test_torchtitan_llama3_8b_fsdp_on_h100(row, stack, gpus, tps, gib):
    res = priced(row)
    speed, memory = RECORDED[row]
    ratio = res.tokens_per_s / gpus / tps
    assert ratio == pytest.approx(speed, abs=0.005)
    assert res.memory.total_bytes / 2**30 / gib == pytest.approx(memory, abs=0.005)
    if row not in OUTSIDE:
        assert ratio == pytest.approx(1.0, abs=0.15)
    else:
        assert ratio > 1.15             # the recorded disagreement (module docstring)


def test_the_eager_stack_pays_what_compile_fuses_and_the_op_policy_recomputes():
    """Same layout, three stacks: Megatron-Core's fused kernels < compiled < eager; the compiled
    stack's element-wise traffic per norm is a fused kernel's (4 bytes per element), eager's 36."""
    times = {row: priced(row).step_time_s for row in ("8-gpus", "8-gpus-compile")}
    cfg = ParallelConfig(dp=8, micro_batch_size=2, global_batch=16, zero_stage=3, fsdp="fsdp2", recompute="selective")
    fused = estimate(get_model("llama3-8b"), cfg, HW, Assumptions(stack="megatron-core")).step_time_s
    assert fused < times["8-gpus-compile"] < times["8-gpus"]
    # published speed-up of compile over eager 6667 / 5762 = 1.157; priced 1.22 (module docstring)
    assert times["8-gpus"] / times["8-gpus-compile"] == pytest.approx(1.22, abs=0.01)
