"""Compute time: a roofline with a shape-dependent matmul utilisation.

Roofline (Williams, Waterman, Patterson 2009): an operation doing `flops` on `nbytes` of memory
traffic takes

    time = max( flops / (peak[dtype] * u(m, n, k)),  nbytes / (memory_bandwidth * MEMORY_EFFICIENCY) )

Matmul utilisation (an assumption, documented so it can be argued with):

    u(m, n, k) = MATMUL_PEAK_FRACTION * f(m) * f(n) * f(k),    f(d) = d / (d + d_half)

- MATMUL_PEAK_FRACTION = 0.80: large bf16 GEMMs on A100 reach roughly 75-85 % of the dense
  tensor-core peak in cuBLAS (~230-260 of 312 TFLOP/s; NVIDIA "Matrix Multiplication
  Background" guide). With f below, a 4096^3 GEMM gets 0.80 x 0.954 = 76 % (238 TFLOP/s).
- f(d) saturates for large dims and penalises small ones: tiles of 128-256 rows/cols are partly
  empty (tile quantisation) and few tiles leave SMs idle (wave quantisation), and a small
  contracting dim k (e.g. the head dimension 64-128 of attention scores) gives each tile little
  work per load. d_half = MATMUL_HALF_DIM = 64 on A100 puts the half-efficiency point at d = 64:
  d = 128 -> 0.67, d = 1024 -> 0.94, d = 4096 -> 0.98 (other devices: `matmul_half_dim`, below).
- Calibration check: with these three constants (and the link efficiency 0.8 of
  `Assumptions`) every row of Megatron-LM 2021 Table 1 is predicted within 7 %
  (tests/test_cost_megatron.py). They were chosen from a coarse grid of round values
  (0.75-0.82 x 32/64/128), not fitted per row.
- The same fraction holds on H100: the best measured bf16 matmul reaches 794.5 of 989 TFLOP/s
  (80.3 %; A100 SXM 271 of 312, 87 %; "Maximum Achievable Matmul FLOPS" table, stas00/ml-engineering,
  compute/accelerator), so the plateau 0.80 serves both; what differs is d_half (below).
- FP8 (`Assumptions.fp8`): matmuls at the preset's fp8 peak (1979 TFLOP/s dense on H100) with
  MATMUL_PEAK_FRACTION_FP8 = 0.709 in place of 0.80: the best measured fp8 matmul on H100 SXM reaches
  1402.6 of 1979 TFLOP/s (70.9 %; H200 1453.4, 73.4 %; bf16 on H100 794.5 of 989, 80.3 %: stas00/
  ml-engineering, compute/accelerator README, MAMF tables, 2025-26 revision) and 1-byte operands;
  element-wise kernels stay 16-bit. Which matmuls run in FP8 (the linear layers', not the attention
  core or the output layer) and the casts they pay: `simulator.cost.scale_kernels.Kernel.time_s` and
  `fp8_cast_nbytes`.
- The half-efficiency dimension follows the machine balance (`matmul_half_dim`): what f(d) charges
  -- loading operand tiles, writing the 16-bit output tile, filling and draining each tile's
  pipeline -- costs memory traffic and latency, whose weight against the math grows with the
  device's FLOP per byte of HBM (the roofline's ridge point, Williams et al. 2009). MATMUL_HALF_DIM
  = 64 holds on the A100 80GB where it was calibrated (312 TFLOP/s / 2.039 TB/s = 153 FLOP/B); a
  device with balance B gets 64 x B / 153, never less than 64: H100 bf16 989 / 3.35 = 295 FLOP/B ->
  124; H100 fp8 1979 / 3.35 (the fp8 GEMM still writes a 16-bit output) -> 247. So FP8's gain over
  bf16 shrinks for the smaller GEMMs: 1.70x at 8192^3, 1.30x at 1024^3 on H100, as NVIDIA measures it
  ("1.75x speedup for large matmuls and at least a 1.25x speedup for most other cases compared to
  the BF16 baseline", NVIDIA technical blog "Boosting Matrix Multiplication Speed and Flexibility
  with NVIDIA cuBLAS 12.9", 2025, on Hopper).
- FlashAttention's fused attention core is timed as its matmuls by this roofline, x 0.5 for the
  causal mask and x 5/4 in the backward for the recomputed scores
  (`simulator.cost.scale_kernels.Kernel.time_s`; Dao et al. 2022, Dao 2023). Its (s, s, head dim)
  matmuls meet the memory bound of their s x s result, which the fused kernel keeps on chip: at head
  dim 128 and s = 4096 the core is priced at ~0.52 of peak on A100 (161 TFLOP/s; FlashAttention-2
  reaches 50-73 % in forward there, Dao 2023) and ~0.33 on H100 (323 TFLOP/s), FlashAttention-2's
  level there ("35 % utilization on the H100", Shah et al. 2024, FlashAttention-3). cuDNN's fused
  attention, which Transformer Engine prefers on Hopper (transformer_engine/pytorch/attention/
  dot_product_attention/utils.py: "Disabling FlashAttention to give FusedAttention preference on
  Hopper+"), reaches ~600 TFLOP/s in forward (Shah et al. 2024); pricing the core at that rate puts
  Llama 3 405B at 128k tokens (tests/test_cost_h100_runs.py) 33 % above Meta's Table 4 and the
  small Megatron-Core runs further above theirs, so the FlashAttention-2 level is kept.
- MEMORY_EFFICIENCY = 0.8: element-wise kernels (layer norm, GeLU, softmax, dropout, residual
  add) stream memory at about 80 % of the HBM datasheet bandwidth (STREAM-like copy kernels).
The same constants serve every shape, model and GPU; they are not fitted per configuration.
They are the software stack's (`simulator.cost.stack`, whose files hold them with their sources):
MATMUL_PEAK_FRACTION, MATMUL_PEAK_FRACTION_FP8 and MEMORY_EFFICIENCY below are the default stack's
(megatron-core); every function takes `stack` (a `Stack`, None: the default) to price another.
"""

from __future__ import annotations

from simulator.cost.hardware import DTYPE_NBYTES, Hardware
from simulator.cost.stack import Stack, default_stack
from simulator.errors import ParasimError

MATMUL_PEAK_FRACTION = default_stack().gemm_peak_fraction          # the default stack's (docstring)
MATMUL_PEAK_FRACTION_FP8 = default_stack().gemm_peak_fraction_fp8
MATMUL_HALF_DIM = 64.0
MEMORY_EFFICIENCY = default_stack().memory_efficiency
BALANCE_REF = 312e12 / 2.039e12   # FLOP per HBM byte of the A100 80GB, where MATMUL_HALF_DIM was calibrated


def matmul_half_dim(hw: Hardware | None = None, dtype: str = "bf16") -> float:
    """The dimension at which f(d) = 1/2 on this device and dtype: MATMUL_HALF_DIM scaled by the
    machine balance peak[dtype] / HBM bandwidth over the A100 80GB's, never below it (docstring)."""
    if hw is None or dtype not in hw.peak_flops:
        return MATMUL_HALF_DIM
    return MATMUL_HALF_DIM * max(1.0, hw.sustained(dtype) / hw.memory_bandwidth_Bps / BALANCE_REF)


def _dim_factor(d: float, half: float = MATMUL_HALF_DIM) -> float:
    return d / (d + half)


def matmul_flops(m: float, n: float, k: float, batch: float = 1) -> float:
    """2 m n k per (m, k) @ (k, n), times the batch count."""
    return 2.0 * m * n * k * batch


def matmul_utilisation(m: float, n: float, k: float, dtype: str = "bf16", hw: Hardware | None = None,
                       stack: Stack | None = None) -> float:
    """Achievable fraction of peak for an (m, k) @ (k, n) matmul before the memory bound, on `hw`
    (its machine balance sets the half-efficiency dimension, `matmul_half_dim`; None: the A100's),
    with `stack`'s GEMM plateau (None: the default stack's)."""
    for name, d in (("m", m), ("n", n), ("k", k)):
        if not d > 0:
            raise ParasimError(f"matmul dim {name} must be > 0, got {d}")
    st = stack or default_stack()
    plateau = st.gemm_peak_fraction_fp8 if dtype == "fp8" else st.gemm_peak_fraction
    half = matmul_half_dim(hw, dtype)
    return plateau * _dim_factor(m, half) * _dim_factor(n, half) * _dim_factor(k, half)


def matmul_efficiency(m: float, n: float, k: float, hw: Hardware, dtype: str = "bf16") -> float:
    """Achieved fraction of peak: min(compute-bound utilisation, memory-bound rate / peak).

    Arithmetic intensity I = 2mnk / (bytes (mk + kn + mn)); the memory bound gives
    I * bandwidth FLOP/s, so the efficiency is min(u(m,n,k), I * bw * MEMORY_EFFICIENCY / peak).
    """
    flops = matmul_flops(m, n, k)
    return flops / matmul_time_s(m, n, k, hw, dtype) / hw.peak(dtype)


def matmul_time_s(m: float, n: float, k: float, hw: Hardware, dtype: str = "bf16", batch: float = 1,
                  stack: Stack | None = None) -> float:
    """Roofline time of `batch` independent (m, k) @ (k, n) matmuls on `stack` (None: the default)."""
    if dtype not in DTYPE_NBYTES:
        raise ParasimError(f"unknown dtype {dtype!r}; known {sorted(DTYPE_NBYTES)}")
    if not batch > 0:
        raise ParasimError(f"matmul batch must be > 0, got {batch}")
    flops = matmul_flops(m, n, k, batch)
    nbytes = DTYPE_NBYTES[dtype] * (m * k + k * n + m * n) * batch
    t_compute = flops / (hw.sustained(dtype) * matmul_utilisation(m, n, k, dtype, hw, stack))
    return max(t_compute, memory_time_s(nbytes, hw, stack))


def memory_time_s(nbytes: float, hw: Hardware, stack: Stack | None = None) -> float:
    """A memory-bound (element-wise) kernel moving `nbytes`: nbytes / (bandwidth x the stack's
    memory efficiency; None: the default stack's)."""
    if nbytes < 0:
        raise ParasimError(f"nbytes must be >= 0, got {nbytes}")
    return nbytes / (hw.memory_bandwidth_Bps * (stack or default_stack()).memory_efficiency)
