"""The cost model against Megatron-Core's published BF16 weak scaling on H100 (GPT models, 2B to 462B).

Reference: Megatron-LM README, "Performance Benchmarking" (github.com/NVIDIA/Megatron-LM, images/
model_table.png, "New scaling figures on H100 GPUs", Megatron-Core r0.8.0, July 2024): vocabulary
131072, sequence 4096, GPT models (4h MLP), data-parallel size 48, with --overlap-grad-reduce,
--overlap-param-gather and --tp-comm-overlap; end-to-end throughput. Per-GPU TFLOP/s (MFU against
989 TFLOP/s: BF16):
    size    heads  hidden  layers  TP  PP  GPUs  batch  TFLOP/s  MFU
    1.7B      16    2048     24     1   1    48    192   408.8   41 %
    7.1B      32    4096     30     2   1    96    192   465.9   47 %
    16B       48    6144     32     4   1   192    192   489.1   49 %
    32B       56    7168     48     8   1   384    192   459.6   46 %
    70B       64    8192     84     8   2   768    384   419.7   42 %
    119B      80   10240     92     8   4  1536    768   420.5   43 %
    177B      96   12288     96     8   6  2304   1152   432.8   44 %
    314B     128   16384     96     8   8  3072   1536   474.4   48 %
    462B     144   18432    112     8  16  6144   3072   459.9   47 %
The table gives neither the micro-batch size nor interleaving: priced with micro-batches of one
sequence, the 1F1B schedule, the distributed optimizer, SP, FlashAttention and the three overlaps
(`MODERN`). Seven rows are within 15 % (0.92-1.13). The t8 p1 32B was priced at 0.85: its 48
data-parallel ranks sit on 48 nodes and reduce-scatter 16 GB of fp32 gradients over InfiniBand under
one micro-batch's backward (4 micro-batches per step), which was priced at the NVLink-measured link
efficiency 0.8; NCCL gets 46-48 of NDR's 50 GB/s per NIC (`simulator.cost.hardware.IB_LINK_EFFICIENCY`
= 0.94), which brings it to 0.92. Two are asserted at their recorded ratio: the two smallest models
are priced 1.29x and 1.27x the published figure. With h = 2048-4096 and one 4096-token sequence per micro-batch each kernel is short (a layer's forward is
~0.9 ms), and what such a run loses besides its kernels' work -- launch gaps of a few microseconds
per kernel (about a hundred kernels per layer and pass), NCCL's SMs taken from the overlapped
backward, the per-step optimizer and bookkeeping -- is not priced. The NeMo FP8 rows of the small
models show the same excess (tests/test_cost_h100_megatron_core.py).
Examined for the 1.7B (issue 25 item 6), each too small to close 29 %, so none is priced: launch
gaps (about 2,500 kernels per step counted as `scale_kernels.LAUNCHES` does, not a hundred per
layer: under 4 % even at 5 us each); wave and tile quantisation (its GEMMs fill 128 x 256 tiles on
132 SMs to 97 % or more); the fp32 gradient reduce-scatter (6.9 GB over 48 ranks on 8 NICs per
node, ~18 ms, under the last micro-batch's ~58 ms backward); zeroing the fp32 gradient buffer each
step (~3 ms). Of the mechanisms priced since, the fused RoPE kernel does not apply (these GPT models
have a position table).
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import MODERN, ParallelConfig

# (heads, hidden, layers, TP, PP, GPUs, global batch, published TFLOP/s per GPU): module docstring
TABLE = [(16, 2048, 24, 1, 1, 48, 192, 408.8), (32, 4096, 30, 2, 1, 96, 192, 465.9),
         (48, 6144, 32, 4, 1, 192, 192, 489.1), (56, 7168, 48, 8, 1, 384, 192, 459.6),
         (64, 8192, 84, 8, 2, 768, 384, 419.7), (80, 10240, 92, 8, 4, 1536, 768, 420.5),
         (96, 12288, 96, 8, 6, 2304, 1152, 432.8), (128, 16384, 96, 8, 8, 3072, 1536, 474.4),
         (144, 18432, 112, 8, 16, 6144, 3072, 459.9)]
IDS = ["1.7b", "7.1b", "16b", "32b", "70b", "119b", "177b", "314b", "462b"]
# priced / published where parasim stays more than 15 % off (module docstring): a change of the
# model that moves them must update this table, the module docstring and the README
RECORDED = {"1.7b": 1.29, "7.1b": 1.28}


def _priced(heads, hidden, layers, tp, pp, gpus, batch):
    model = ModelSpec(f"gpt-{hidden}", layers, hidden, heads, 4096, 131072)
    cfg = ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), global_batch=batch, sequence_parallel=tp > 1,
                         zero_stage=1)
    return estimate(model, cfg, "h100-sxm", MODERN)


@pytest.mark.parametrize("heads,hidden,layers,tp,pp,gpus,batch,tflops", TABLE, ids=IDS)
def test_megatron_core_bf16_weak_scaling_on_h100(heads, hidden, layers, tp, pp, gpus, batch, tflops):
    res = _priced(heads, hidden, layers, tp, pp, gpus, batch)
    assert not res.oom and res.tflops_per_gpu == pytest.approx(res.model_tflops_per_gpu, rel=1e-3)  # no recompute
    ratio = res.model_tflops_per_gpu / tflops
    key = IDS[TABLE.index((heads, hidden, layers, tp, pp, gpus, batch, tflops))]
    if key in RECORDED:
        assert ratio == pytest.approx(RECORDED[key], abs=0.01)      # the recorded disagreement
    else:
        assert ratio == pytest.approx(1.0, abs=0.15)
