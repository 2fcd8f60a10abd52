"""The kernel-level pieces behind the H100 validation (simulator.cost.compute, simulator.cost.scale_kernels)."""

from dataclasses import replace

import pytest

from simulator.cost import compute
from simulator.cost.hardware import get_hardware
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import MODERN, ParallelConfig
from simulator.cost.scale_kernels import (
    CROSS_ENTROPY_BWD_BYTES,
    CROSS_ENTROPY_FWD_BYTES,
    TE_UB_SMS,
    Kernel,
    MatMul,
    layer_kernels,
    padded_vocab,
)

H100, A100 = get_hardware("h100-sxm"), get_hardware("a100-80gb")


def test_half_dimension_follows_the_machine_balance():
    assert compute.matmul_half_dim(A100) == compute.MATMUL_HALF_DIM == 64          # where it was calibrated
    assert compute.matmul_half_dim(get_hardware("cpu")) == 64                      # never below it
    assert compute.matmul_half_dim(H100) == pytest.approx(64 * (989 / 3.35) / (312 / 2.039), rel=1e-9)
    assert compute.matmul_half_dim(H100, "fp8") == pytest.approx(1979 / 989 * compute.matmul_half_dim(H100), rel=1e-9)
    # the A100 roofline is unchanged: 0.80 f(4096)^3 with d_half = 64
    assert compute.matmul_efficiency(4096, 4096, 4096, A100) == pytest.approx(0.8 * (4096 / 4160) ** 3, rel=1e-12)


def test_fp8_gemm_gain_matches_nvidias_hopper_figures():
    """cuBLAS 12.9 on Hopper: FP8 over BF16 "1.75x speedup for large matmuls and at least a 1.25x
    speedup for most other cases" (NVIDIA technical blog, 2025)."""
    def gain(d):
        return compute.matmul_time_s(d, d, d, H100, "bf16") / compute.matmul_time_s(d, d, d, H100, "fp8")
    small, mid, large = (gain(d) for d in (1024, 4096, 8192))
    assert [round(g, 3) for g in (small, mid, large)] == [1.305, 1.626, 1.697]    # parasim's figures, recorded
    assert small >= 1.25 and large <= 1.75          # NVIDIA's two published figures bound them
    assert compute.MATMUL_PEAK_FRACTION_FP8 == pytest.approx(1402.6 / 1979, abs=1e-3)   # H100 SXM MAMF


def test_cross_entropy_traffic_is_megatrons_unfused_kernel():
    model, cfg = get_model("llama3-8b"), ParallelConfig(tp=2, dp=1, global_batch=1, sequence_parallel=True)
    k = layer_kernels(model, cfg, MODERN)
    elems = model.seq * padded_vocab(model, 2) / 2
    assert k.logits_fwd.ew_nbytes == pytest.approx(CROSS_ENTROPY_FWD_BYTES * elems, rel=1e-12)
    assert k.logits_b.ew_nbytes == pytest.approx(CROSS_ENTROPY_BWD_BYTES * elems, rel=1e-12)
    assert (CROSS_ENTROPY_FWD_BYTES, CROSS_ENTROPY_BWD_BYTES) == (6 + 4 + 8 + 8 + 4 + 8, 8 + 6)


def test_tp_comm_overlap_takes_sms_from_the_gemms_it_overlaps():
    """TE userbuffers: the pipeline (proj/fc2 forward) and bulk (qkv/fc1 dgrad and wgrad) overlaps run on
    16 SMs taken from their GEMM; the ring-exchange ones do not; no TP, no overlap, or no SM count: no cost."""
    model = get_model("llama3-70b")
    cfg = ParallelConfig(tp=4, dp=1, global_batch=1, sequence_parallel=True)
    plain = layer_kernels(model, cfg, replace(MODERN, overlap_tp_comm=False))
    ub = layer_kernels(model, cfg, MODERN)
    assert [mm.sms_reserved for mm in ub.mlp_w.matmuls] == [0, TE_UB_SMS]          # down (external), up (bulk)
    assert [MatMul(*mm).sms_reserved for mm in ub.attn_fwd.matmuls] == [0, 0, 0, TE_UB_SMS]  # qkv, core x2, proj
    down, up = (Kernel("x", (mm,)).time_s(H100) for mm in plain.mlp_w.matmuls)
    assert ub.mlp_w.time_s(H100) == pytest.approx(down + up * 132 / (132 - TE_UB_SMS), rel=1e-12)
    assert ub.mlp_w.time_s(get_hardware("teaching")) == plain.mlp_w.time_s(get_hardware("teaching"))
    one = layer_kernels(model, ParallelConfig(tp=1, dp=1, global_batch=1), MODERN)
    assert all(MatMul(*mm).sms_reserved == 0 for k in (one.attn_fwd, one.mlp_b, one.attn_w) for mm in k.matmuls)
