"""ZeRO-3 against the published runs of Narayanan et al. 2021 (SC21, "Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM"), Table 2: GPT-3 175B (96 layers, h 12288, s 2048,
V 51200), DeepSpeed ZeRO-3 without model parallelism on DGX A100 nodes (8 x 200 Gb/s HDR per node),
global batch 1536, one micro-batch per GPU, activation recomputation:

    GPUs   micro-batch   TFLOP/s per GPU   step time (FLOPs of Megatron's eq. 3 / GPUs / TFLOP/s)
     384        4             144              81.6 s
     768        2              88              66.7 s
    1536        1              44              66.7 s

The closest honest bound, not a 15 % match: parasim prices every row at or above the published
throughput and by at most 2.5x (1.23, 1.66, 2.45 without overlap). The residual is a collective
path parasim does not model. The published step time stops falling from 768 to 1536 GPUs while the
compute halves (26.6 -> 13.5 s priced): about 53 s per step is a fixed cost independent of d.
ZeRO-3 moves per GPU and step two 16-bit parameter all-gathers (forward; backward with the
recomputation) and one gradient reduce-scatter, 3 x 2 x 175e9 = 1.05 TB: 53 s is ~20 GB/s, one
HDR NIC's 25 GB/s at NCCL's 0.8, i.e. a flat ring over each GPU's own NIC. parasim prices a
collective spanning nodes hierarchically (NCCL's rings use the node's 8 NICs in parallel and NVLink
inside the node, `simulator.cost.comm`), ~5x faster, so its exposed communication is ~14 s and the
gap grows with d exactly as the fixed cost's share does. Overlap makes the bound looser, not
tighter (gathers hidden under compute), so the published runs were not overlapped either.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.parallel_config import Assumptions, ParallelConfig

# (GPUs, micro-batch, published TFLOP/s per GPU), Narayanan et al. 2021 Table 2, ZeRO-3 rows, 175B
TABLE2_ZERO3 = [(384, 4, 144), (768, 2, 88), (1536, 1, 44)]
RECORDED_RATIO = {384: 1.23, 768: 1.66, 1536: 2.45}   # parasim / published, as the docstring records
B, S, L, H, V = 1536, 2048, 96, 12288, 51200


def _published_step_s(gpus: int, tflops: float) -> float:
    """Narayanan et al. 2021 eq. 3 (with recomputation): 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs."""
    flops = 96 * B * S * L * H * H * (1 + S / (6 * H) + V / (16 * L * H))
    return flops / (gpus * tflops * 1e12)


def _priced(gpus, b, assumptions=Assumptions()):
    cfg = ParallelConfig(dp=gpus, micro_batch_size=b, global_batch=B, zero_stage=3, recompute="full")
    return estimate("gpt3-175b", cfg, "a100-80gb", assumptions)


@pytest.mark.parametrize("gpus,b,tflops", TABLE2_ZERO3, ids=["384", "768", "1536"])
def test_zero3_is_an_upper_bound_within_2_5x_of_table2(gpus, b, tflops):
    res = _priced(gpus, b)
    ratio = res.tflops_per_gpu / tflops
    assert ratio == pytest.approx(RECORDED_RATIO[gpus], abs=0.01)
    assert res.step_time_s < _published_step_s(gpus, tflops)


def test_the_residual_is_a_fixed_per_step_cost_of_nic_bound_collectives():
    published = [_published_step_s(g, tf) for g, _b, tf in TABLE2_ZERO3]
    assert published[1] == pytest.approx(published[2], rel=0.01)      # 768 -> 1536: no faster
    priced = [_priced(g, b) for g, b, _tf in TABLE2_ZERO3]
    fixed = published[2] - priced[2].compute_time_s                    # ~53 s that d does not shrink
    per_gpu_bytes = 3 * 2 * 174.6e9                                     # 2 gathers + 1 reduce-scatter, 16-bit
    assert 15e9 < per_gpu_bytes / fixed < 25e9                          # one HDR NIC (25 GB/s) at ~0.8
    # parasim's hierarchical collectives move the same bytes ~5x faster
    assert 3 < fixed / priced[2].exposed_comm_s < 5
    ratios = [p.tflops_per_gpu / tf for p, (_g, _b, tf) in zip(priced, TABLE2_ZERO3)]
    assert ratios == sorted(ratios)                                     # the gap grows with d
    overlapped = _priced(1536, 1, Assumptions(overlap_param_gather=True, overlap_grad_reduce=True))
    assert overlapped.tflops_per_gpu > priced[2].tflops_per_gpu         # overlap only widens it
