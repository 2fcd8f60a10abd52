"""MoE training on H100 against NVIDIA's published Megatron-Bridge tables (issue 25 item 3).

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (repository at 067f987d,
2026-08-22), DGX-H100 rows, tokens per second per GPU (no FLOP convention involved; the tables' model
TFLOP/s count causal attention, Megatron-Bridge flop_utils.py, `simulator.cost.flops`), token-dropless
with forced load balancing (the tables' note), sequence 4096, FP8 current scaling, no recomputation:
    26.06 container  Qwen3-30B-A3B   16 GPUs  GBS 1024 MBS 1  TP1 PP1 EP16            8826
    26.06 container  Qwen3-235B-A22B 256 GPUs GBS 8192 MBS 1  TP2 PP8 VP4 EP32         1712
    25.11 container  Qwen3-30B-A3B   16 GPUs  GBS 512  MBS 2  TP1 PP2 VP24 EP8          5275
    25.11 container  Qwen3-235B-A22B 256 GPUs GBS 2048 MBS 1  TP2 PP8 VP4 EP32         1575
The layouts' other settings from Megatron-Bridge's recipes: expert-tensor-parallel size 1 (25.11:
scripts/performance/configs/qwen/qwen3_workload_base_configs.py at 31c6ae54; today's
src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py), recomputation off
(set_qwen3_common_configs), --overlap-moe-expert-parallel-comm on for 235B (both) and for the 25.11
30B, off for the 26.06 30B, which dispatches with flex (HybridEP backend); the others alltoall; 235B with
sequence parallelism, 94 layers split with the embedding and loss counted as layers (96 slots over
pp x vp = 32 chunks). The models from their Hugging Face configs (Qwen/Qwen3-30B-A3B,
Qwen/Qwen3-235B-A22B): head dim 128, 4 key/value heads, 128 experts top-8, vocabulary 151936, untied.
Priced with the closed form (the event clock agrees within 2 % with the overlap on,
tests/test_cost_moe_overlap.py) on parasim's h100-sxm, stack megatron-core.

Two of four rows are within 15 % (the 235B rows, 0.983 and 1.041, both with the all-to-all overlap
priced as Megatron-Core merges the micro-batches, `simulator.cost.moe_overlap`; without it they
would be 0.72 and 0.78). The other two, asserted at their recorded ratios:
- 30B on 16 GPUs, 26.06 (1.390, too fast): the run dispatches with flex / HybridEP, priced as
  DeepEP's once-per-node RDMA dispatch plus NVLink forwarding (`simulator.cost.moe`, whose RDMA
  leg runs within 5 % of DeepEP's published 90 / 61 GB/s, tests/test_cost_moe.py); priced as a plain
  all-to-all it was 0.638 (34 s of exposed all-to-all in a 46.6 s step; published step 29.7 s).
  Priced, the all-to-all leaves 8.6 s exposed beside 12.7 s of kernels; the published step has
  about 17 s more than the kernels. What the 8.4 s are is not found: HybridEP's permute and
  preprocessing kernels, the forced-balance router and host synchronisation of dropless MoE
  are not priced, and no source gives their time.
- 30B on 16 GPUs, 25.11 (2.654, too fast): NVIDIA's own figure for the same model and GPUs rose
  1.67x (5275 to 8826) between the two containers; parasim's layout keeps the expert group inside a
  node and finds 9.4 s per step against the published 24.8 s. The cause is not found (the table's
  VP 24 disagrees with the recipe's 12; with 12 parasim is 3.0x).
DeepSeek-V3 (25.09 table: 1024 GPUs, 1297 tokens/s/GPU) is not a row: its 3 dense layers and MTP
module are priced (--moe-layer-freq, --mtp-num-layers: tests/test_layer_kinds.py, tests/test_mtp.py),
but its pipeline layout is Megatron's --pipeline-model-parallel-layout, which parasim does not read.
A change of the model that moves a ratio must update RECORDED, this docstring and docs/validation.md.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import Assumptions, ParallelConfig

_QWEN3 = dict(seq=4096, vocab=151936, kv_heads=4, kv_channels=128, num_experts=128, moe_router_topk=8, gated_mlp=True,
              biases=False, position_embedding=False, tied_embeddings=False, flash_attention=True, dropout=False)
Q30 = ModelSpec("qwen3-30b-a3b", layers=48, hidden=2048, heads=32, moe_ffn_hidden=768, ffn_hidden=6144, **_QWEN3)
Q235 = ModelSpec("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, moe_ffn_hidden=1536, ffn_hidden=12288, **_QWEN3)
_235 = dict(tp=2, pp=8, dp=16, ep=32, etp=1, sequence_parallel=True, schedule="interleaved", virtual_stages=4,
            balance_embedding=True)
# (row, model, layout, --overlap-moe-expert-parallel-comm, dispatcher, published tokens/s/GPU)
TABLE = [("qwen3-30b-16gpu-26.06", Q30, dict(dp=16, ep=16, global_batch=1024), False, "flex", 8826),
         ("qwen3-235b-256gpu-26.06", Q235, dict(global_batch=8192, **_235), True, "alltoall", 1712),
         ("qwen3-30b-16gpu-25.11", Q30, dict(pp=2, dp=8, ep=8, etp=1, global_batch=512, micro_batch_size=2,
                                             schedule="interleaved", virtual_stages=24), True, "alltoall", 5275),
         ("qwen3-235b-256gpu-25.11", Q235, dict(global_batch=2048, **_235), True, "alltoall", 1575)]
# priced / published tokens per second per GPU (module docstring); OUTSIDE: the rows off by more than 15 %
RECORDED = {"qwen3-30b-16gpu-26.06": 1.390, "qwen3-235b-256gpu-26.06": 0.983, "qwen3-30b-16gpu-25.11": 2.654,
            "qwen3-235b-256gpu-25.11": 1.041}
OUTSIDE = ("qwen3-30b-16gpu-26.06", "qwen3-30b-16gpu-25.11")


def priced(row):
    _, model, kw, overlap, dispatcher, _tps = next(r for r in TABLE if r[0] == row)
    return estimate(model, ParallelConfig(**kw), "h100-sxm", Assumptions(
        stack="megatron-core", fp8=True, overlap_moe_comm=overlap, moe_token_dispatcher=dispatcher))


def test_the_models_have_their_published_sizes():
    """Qwen3-30B-A3B: 30.5B parameters, 3.3B activated; Qwen3-235B-A22B: 235B, 22B (the model cards)."""
    assert Q30.params() == pytest.approx(30.5e9, rel=0.005)
    assert Q235.params() == pytest.approx(235e9, rel=0.005)


@pytest.mark.parametrize("row,tps", [(r[0], r[-1]) for r in TABLE], ids=[r[0] for r in TABLE])
def test_megatron_bridge_moe_rows_on_h100(row, tps):
    res = priced(row)
    assert not res.memory.oom
    ratio = res.tokens_per_s / res.gpus / tps
    assert ratio == pytest.approx(RECORDED[row], abs=0.0005)
    if row not in OUTSIDE:
        assert ratio == pytest.approx(1.0, abs=0.15)


def test_the_overlap_is_what_brings_the_235b_rows_within_15_percent():
    for row in ("qwen3-235b-256gpu-26.06", "qwen3-235b-256gpu-25.11"):
        _, model, kw, _, _, tps = next(r for r in TABLE if r[0] == row)
        off = estimate(model, ParallelConfig(**kw), "h100-sxm", Assumptions(stack="megatron-core", fp8=True))
        assert off.tokens_per_s / off.gpus / tps < 0.8 < priced(row).tokens_per_s / priced(row).gpus / tps
