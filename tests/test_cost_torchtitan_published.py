"""PyTorch-native FSDP training of a small dense model on H100 against torchtitan's published table:
recorded, not yet explained (issue 25 items 2 and 6).

Reference: torchtitan benchmarks/llama3_h100_202412_torchtitan.md (github.com/pytorch/torchtitan,
December 2024): Llama 3.1 8B, FSDP (1D), local batch size 2, selective activation checkpointing,
sequence 8192 (torchtitan's llama3_8b default), eager (no torch.compile, no Float8); "Grand Teton"
hosts: 8 x H100 SXM with 96 GB HBM2e at 2.4 TB/s, 400 Gb/s per GPU, "the default 500W power limit".
Tokens per second per GPU (no FLOP convention involved) and peak memory:
    GPUs  global batch  TPS/GPU  memory GiB
       8        16       5,762     82.4       (Table 1)
     128       256       5,605     67.0       (Table 3)
Priced as they ran: the hardware as a file override (`h100-sxm:power_cap_W=500,memory_GB=96,
hbm_TBps=2.4`, docs/hardware.md), stack torchtitan (FSDP2's prefetch and gradient overlap,
`simulator.cost.stack`), ZeRO-3 over all GPUs, selective recomputation.

parasim is 1.55x and 1.60x faster than published and holds 15-17 % more memory. The stack's
per-kernel and per-step overheads are 0 in the shipped presets; eager PyTorch's unfused element-wise
kernels (RMSNorm, SwiGLU, RoPE each several kernels and HBM round trips) and the per-parameter
FSDP2 bookkeeping are not priced, so the gap is recorded here: a change of the model that moves it
must update RECORDED and this docstring.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig

HW = "h100-sxm:power_cap_W=500,memory_GB=96,hbm_TBps=2.4"   # Grand Teton's H100 (module docstring)
TABLE = [(8, 5762, 82.4), (128, 5605, 67.0)]               # GPUs, TPS/GPU, memory GiB
RECORDED = {8: (1.55, 1.15), 128: (1.60, 1.17)}             # priced / published: throughput, memory


@pytest.mark.parametrize("gpus,tps,gib", TABLE, ids=["8-gpus", "128-gpus"])
def test_torchtitan_llama3_8b_fsdp_on_h100_is_recorded(gpus, tps, gib):
    cfg = ParallelConfig(dp=gpus, micro_batch_size=2, global_batch=2 * gpus, zero_stage=3, recompute="selective")
    res = estimate(get_model("llama3-8b"), cfg, HW, Assumptions(stack="torchtitan"))
    speed, memory = RECORDED[gpus]
    assert res.tokens_per_s / gpus / tps == pytest.approx(speed, abs=0.01)
    assert res.memory.total_bytes / 2**30 / gib == pytest.approx(memory, abs=0.01)
