"""Memory per device: model states (ZeRO), activations (Korthikanti et al.), in-flight micro-batches.

Model states (Rajbhandari et al. 2020, Fig. 1 and Sec. 5), Psi parameters, N_d data-parallel
ranks, K optimizer bytes per parameter:
  mixed precision: 2 (fp16/bf16 params) + 2 (grads) + K = 12 (fp32 master, momentum, variance)
  fp32 variant:    4 (params) + 4 (grads) + K = 8 (momentum, variance)
  stage 0: (p + g + K) Psi;  1: (p + g) Psi + K Psi/N_d;  2: p Psi + (g + K) Psi/N_d;
  stage 3: (p + g + K) Psi / N_d.
  Psi = 7.5e9, N_d = 64: 120, 31.4, 16.6, 1.9 GB.

Activations of one transformer layer, 16-bit (Korthikanti et al. 2022, Sec. 4, eqs. 1-6):
  none, t = 1:        s b h (34 + 5 a s / h)
  tensor parallel:    s b h (10 + 24/t + 5 a s / (h t))
  tensor + sequence:  s b h / t (34 + 5 a s / h)
  selective recompute drops the 5 a s/h term (34 sbh/t with SP, sbh (10 + 24/t) without);
  full recompute keeps the layer input, 2 s b h (/t with SP).
Output layer: logits in fp32, 4 s b V / t (Korthikanti Sec. 4.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import schedule_spec

PRECISION_BYTES = {"mixed": (2, 2, 12), "fp32": (4, 4, 8)}   # (params, grads, optimizer K)
RECOMPUTE = ("none", "selective", "full")


def _positive(**kw) -> None:
    for name, v in kw.items():
        if not v > 0:
            raise ParasimError(f"{name} must be > 0, got {v}")


def model_state_bytes_per_device(params: float, dp: int = 1, zero_stage: int = 0,
                                 precision: str = "mixed") -> float:
    """ZeRO model-state bytes on one device (module docstring)."""
    _positive(params=params, dp=dp)
    if precision not in PRECISION_BYTES:
        raise ParasimError(f"unknown precision {precision!r}; known {sorted(PRECISION_BYTES)}")
    if zero_stage not in (0, 1, 2, 3):
        raise ParasimError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage}")
    p, g, k = PRECISION_BYTES[precision]
    return {0: (p + g + k) * params,
            1: (p + g) * params + k * params / dp,
            2: p * params + (g + k) * params / dp,
            3: (p + g + k) * params / dp}[zero_stage]


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes one transformer layer keeps for its backward (Korthikanti et al. 2022, module docstring)."""
    _positive(s=s, b=b, h=h, a=a, t=t)
    if recompute not in RECOMPUTE:
        raise ParasimError(f"unknown recompute {recompute!r}; known {RECOMPUTE}")
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    attn = 0.0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)


def logits_bytes(s: int, b: int, vocab: int, t: int = 1) -> float:
    """fp32 logits kept for the cross-entropy backward: 4 s b V / t (Korthikanti Sec. 4.3)."""
    _positive(s=s, b=b, vocab=vocab, t=t)
    return 4 * s * b * vocab / t


def in_flight_microbatches(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Micro-batches whose activations stage 0 holds at its peak, in whole-stage units (for
    interleaving, v chunks of L/(p v) layers): the schedule's entry in
    `simulator.parallel.schedule_registry` (GPipe m; 1F1B and ZB-H1 min(p, m); ZB-H2 min(2p-1, m),
    Qi et al. 2023; interleaved p (1 + (p-1)/(p m)), see the registry's TODO on Korthikanti Sec. 4.2.3).
    """
    _positive(p=p, m=m, v=v)
    return schedule_spec(schedule, priced=True).in_flight(p, m, v)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded device; `oom` when the total exceeds `capacity_bytes`."""

    model_state_bytes: float
    activation_bytes: float
    logits_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.model_state_bytes + self.activation_bytes + self.logits_bytes

    @property
    def oom(self) -> bool:
        return self.total_bytes > self.capacity_bytes

    def __repr__(self) -> str:
        return (f"Memory({self.total_bytes / 1e9:.3g} GB = states {self.model_state_bytes / 1e9:.3g} + "
                f"activations {self.activation_bytes / 1e9:.3g} + logits {self.logits_bytes / 1e9:.3g}"
                f"{' OOM' if self.oom else ''} of {self.capacity_bytes / 1e9:.3g} GB)")


def megatron_bytes_per_param(dp: int = 1, distributed_optimizer: bool = False) -> float:
    """Megatron-LM's estimate: 18 bytes/param, or 6 + 12/N_d with the distributed optimizer
    (Megatron-LM docs; fp32 gradients 4 + bf16 params 2 + fp32 master/m/v 12)."""
    _positive(dp=dp)
    return 6 + 12 / dp if distributed_optimizer else 18.0
