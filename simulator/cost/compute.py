"""Compute time: a roofline with a shape-dependent matmul utilisation.

Roofline (Williams, Waterman, Patterson 2009): an operation doing `flops` on `nbytes` of memory
traffic takes

    time = max( flops / (peak[dtype] * u(m, n, k)),  nbytes / (memory_bandwidth * MEMORY_EFFICIENCY) )

Matmul utilisation (an assumption, documented so it can be argued with):

    u(m, n, k) = MATMUL_PEAK_FRACTION * f(m) * f(n) * f(k),    f(d) = d / (d + MATMUL_HALF_DIM)

- MATMUL_PEAK_FRACTION = 0.80: large bf16 GEMMs on A100 reach roughly 75-85 % of the dense
  tensor-core peak in cuBLAS (~230-260 of 312 TFLOP/s; NVIDIA "Matrix Multiplication
  Background" guide). With f below, a 4096^3 GEMM gets 0.80 x 0.954 = 76 % (238 TFLOP/s).
- f(d) saturates for large dims and penalises small ones: tiles of 128-256 rows/cols are partly
  empty (tile quantisation) and few tiles leave SMs idle (wave quantisation), and a small
  contracting dim k (e.g. the head dimension 64-128 of attention scores) gives each tile little
  work per load. MATMUL_HALF_DIM = 64 puts the half-efficiency point at d = 64: d = 128 -> 0.67,
  d = 1024 -> 0.94, d = 4096 -> 0.98.
- Calibration check: with these three constants (and the link efficiency 0.8 of
  `Assumptions`) every row of Megatron-LM 2021 Table 1 is predicted within 7 %
  (tests/test_cost_megatron.py). They were chosen from a coarse grid of round values
  (0.75-0.82 x 32/64/128), not fitted per row.
- The same fraction holds on H100: the best measured bf16 matmul reaches 794.5 of 989 TFLOP/s
  (80.3 %; A100 SXM 271 of 312, 87 %; "Maximum Achievable Matmul FLOPS" table, stas00/ml-engineering,
  compute/accelerator), so 0.80 x f(m) f(n) f(k) serves both without a per-GPU constant.
- FP8 (`Assumptions.fp8`): matmuls at the preset's fp8 peak (1979 TFLOP/s dense on H100) with
  MATMUL_PEAK_FRACTION_FP8 = 0.73 in place of 0.80 (the best measured fp8 matmul on H200, the
  H100's compute, reaches 1453.4 of 1979 TFLOP/s, 73.4 %, against bf16's 80.3 %: stas00/
  ml-engineering, MAMF tables) and 1-byte operands; element-wise kernels stay 16-bit. Which matmuls
  run in FP8 (the linear layers', not the attention core or the output layer) and the casts they pay:
  `simulator.cost.scale_kernels.Kernel.time_s` and `fp8_cast_nbytes`.
- FlashAttention's fused attention core is timed as its matmuls by this roofline (no s^2 HBM
  traffic), x 0.5 for the causal mask and x 5/4 in the backward for the recomputed scores
  (`simulator.cost.paper_kernels.Kernel.time_s`; Dao et al. 2022, Dao 2023).
- MEMORY_EFFICIENCY = 0.8: element-wise kernels (layer norm, GeLU, softmax, dropout, residual
  add) stream memory at about 80 % of the HBM datasheet bandwidth (STREAM-like copy kernels).
The same constants serve every shape, model and GPU; they are not fitted per configuration.
"""

from __future__ import annotations

from simulator.cost.hardware import DTYPE_NBYTES, Hardware
from simulator.errors import ParasimError

MATMUL_PEAK_FRACTION = 0.80
MATMUL_PEAK_FRACTION_FP8 = 0.73
MATMUL_HALF_DIM = 64.0
MEMORY_EFFICIENCY = 0.8


def _dim_factor(d: float) -> float:
    return d / (d + MATMUL_HALF_DIM)


def matmul_flops(m: float, n: float, k: float, batch: float = 1) -> float:
    """2 m n k per (m, k) @ (k, n), times the batch count."""
    return 2.0 * m * n * k * batch


def matmul_utilisation(m: float, n: float, k: float, dtype: str = "bf16") -> float:
    """Achievable fraction of peak for an (m, k) @ (k, n) matmul before the memory bound."""
    for name, d in (("m", m), ("n", n), ("k", k)):
        if not d > 0:
            raise ParasimError(f"matmul dim {name} must be > 0, got {d}")
    plateau = MATMUL_PEAK_FRACTION_FP8 if dtype == "fp8" else MATMUL_PEAK_FRACTION
    return plateau * _dim_factor(m) * _dim_factor(n) * _dim_factor(k)


def matmul_efficiency(m: float, n: float, k: float, hw: Hardware, dtype: str = "bf16") -> float:
    """Achieved fraction of peak: min(compute-bound utilisation, memory-bound rate / peak).

    Arithmetic intensity I = 2mnk / (bytes (mk + kn + mn)); the memory bound gives
    I * bandwidth FLOP/s, so the efficiency is min(u(m,n,k), I * bw * MEMORY_EFFICIENCY / peak).
    """
    flops = matmul_flops(m, n, k)
    return flops / matmul_time_s(m, n, k, hw, dtype) / hw.peak(dtype)


def matmul_time_s(m: float, n: float, k: float, hw: Hardware, dtype: str = "bf16", batch: float = 1) -> float:
    """Roofline time of `batch` independent (m, k) @ (k, n) matmuls."""
    if dtype not in DTYPE_NBYTES:
        raise ParasimError(f"unknown dtype {dtype!r}; known {sorted(DTYPE_NBYTES)}")
    if not batch > 0:
        raise ParasimError(f"matmul batch must be > 0, got {batch}")
    flops = matmul_flops(m, n, k, batch)
    nbytes = DTYPE_NBYTES[dtype] * (m * k + k * n + m * n) * batch
    t_compute = flops / (hw.peak(dtype) * matmul_utilisation(m, n, k, dtype))
    return max(t_compute, memory_time_s(nbytes, hw))


def memory_time_s(nbytes: float, hw: Hardware) -> float:
    """A memory-bound (element-wise) kernel moving `nbytes`: nbytes / (bandwidth x efficiency)."""
    if nbytes < 0:
        raise ParasimError(f"nbytes must be >= 0, got {nbytes}")
    return nbytes / (hw.memory_bandwidth_Bps * MEMORY_EFFICIENCY)
