"""Memory formulas per device: model states, activations per layer, in-flight micro-batches.

Model states: `simulator.model_states` (precision recipes x ZeRO stage; ZeRO Fig. 1; Megatron-LM's
18 bytes per parameter, 6 + 12/N_d with the distributed optimizer).

Activations of one transformer layer, 16-bit, as Megatron-LM computes them
(`megatron/training/theoretical_memory_usage.py`, from Korthikanti et al. 2022 Table 2, with the
MLP written for any f: 2sbh input + 2sbf + 2sbf (GeLU in, out) + sbh mask = 3sbh + 4sbf):
  tensor + sequence parallel, attention scores not stored:  s b h / t (18 + 4 f / h)
  tensor parallel only (Megatron's `compute_activation_memory_without_sp`, which keeps
  Korthikanti's f = 4h constant for every model):           s b h (10 + 24 / t)
  (34 s b h / t at f = 4h: Korthikanti eqs. 4-5). Megatron's
  estimator does not model the rest; parasim adds, from Korthikanti et al. 2022 Sec. 4-5:
  - attention scores 5 a s^2 b / t (softmax output, dropout mask and output) when neither
    selective recomputation nor FlashAttention (Dao et al. 2022: no s^2 tensor is kept) removes them;
  - full recomputation keeps only each layer's input, 2 s b h (/ t with sequence parallelism).
Dropout (`dropout=False`, Megatron --attention-dropout 0 --hidden-dropout 0, as Llama trains): the
two 1-byte masks of the attention-output and MLP-output dropouts (s b h each, Korthikanti Sec. 4.1;
part of the 18, and of the replicated 10 without SP) and the a s^2 b attention-probability mask
(part of the 5 a s^2 b) are not kept: 16 + 4 f / h, 8 + 24 / t and 4 a s^2 b. Megatron's estimator
counts the masks whatever the dropout rates.
Megatron counts neither GQA (K, V of kv < h columns) nor the gated MLP's extra 2sbf: we keep its
per-layer constant so the numbers agree with the tool practitioners run.
Output layer: fp32 logits, 4 s b V / t (Korthikanti Sec. 4.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from simulator.errors import ParasimError
from simulator.model_states import RECIPES, model_state_bytes
from simulator.parallel.degrees import RECOMPUTE as RECOMPUTE  # re-exported: the CLI lists them
from simulator.parallel.degrees import check_recompute
from simulator.parallel.schedule_registry import schedule_spec

PRECISION_BYTES = dict(RECIPES)     # recipe -> (params, grads, optimizer) bytes per parameter


def _positive(**kw) -> None:
    for name, v in kw.items():
        if not v > 0:
            raise ParasimError(f"{name} must be > 0, got {v}")


def model_state_bytes_per_device(params: float, dp: int = 1, zero_stage: int = 0,
                                 precision: str = "mixed") -> float:
    """ZeRO model-state bytes on one device (`simulator.model_states.model_state_bytes`)."""
    _positive(params=params, dp=dp)
    return model_state_bytes(params, int(dp), zero_stage, precision)


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none",
                               ffn: int | None = None, flash_attention: bool = False, dropout: bool = True) -> float:
    """Bytes one transformer layer keeps for its backward (module docstring: Megatron-LM's
    theoretical_memory_usage per-layer terms, Korthikanti et al. 2022 Table 2; f = `ffn`, 4h if None)."""
    _positive(s=s, b=b, h=h, a=a, t=t)
    check_recompute(recompute)
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    f_h = 4.0 if ffn is None else ffn / h
    masks = 2 if dropout else 0
    scores = 0.0 if recompute == "selective" or flash_attention else (4 + (masks > 0)) * a * s / h
    if sequence_parallel:
        return sbh / t * (16 + masks + 4 * f_h + scores)
    return sbh * (8 + masks + 24 / t + scores / t)


def logits_bytes(s: int, b: int, vocab: int, t: int = 1) -> float:
    """fp32 logits kept for the cross-entropy backward: 4 s b V / t (Korthikanti Sec. 4.3)."""
    _positive(s=s, b=b, vocab=vocab, t=t)
    return 4 * s * b * vocab / t


@lru_cache(maxsize=4096)   # a pure function of four numbers; the search asks it for every configuration
def in_flight_microbatches(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Micro-batches whose activations stage 0 holds at its peak, in whole-stage units (for
    interleaving, v chunks of L/(p v) layers): the schedule's entry in
    `simulator.parallel.schedule_registry` (GPipe m; 1F1B and ZB-H1 min(p, m); ZB-H2 min(2p-1, m),
    Qi et al. 2023; interleaved with v chunks p (1 + (p-1)/(p v)),
    Korthikanti et al. 2022 Sec. 4.2.3 and Megatron-LM theoretical_memory_usage's interleaved penalty).
    """
    _positive(p=p, m=m, v=v)
    return schedule_spec(schedule, priced=True).in_flight(p, m, v)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak bytes on the most loaded device, per component; `oom` when the total exceeds
    `capacity_bytes`. model_state = parameters + gradients + optimizer states (when those three are
    given; older callers give only the sum); activations = transformer layers + embedding."""

    model_state_bytes: float
    activation_bytes: float
    logits_bytes: float
    capacity_bytes: float
    parameter_bytes: float = 0.0
    gradient_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    buffer_bytes: float = 0.0          # communication buffers (ZeRO-3 gathered layer)
    allowance_bytes: float = 0.0       # Megatron-LM's 5 % for temporaries (no-SP estimate)
    stage: int = 0                     # pipeline stage of the peak

    @property
    def total_bytes(self) -> float:
        return (self.model_state_bytes + self.activation_bytes + self.logits_bytes + self.buffer_bytes
                + self.allowance_bytes)

    @property
    def oom(self) -> bool:
        return self.total_bytes > self.capacity_bytes

    def as_dict(self) -> dict:
        """Bytes per component; capacity and headroom None when no device was given."""
        cap = None if math.isinf(self.capacity_bytes) else self.capacity_bytes
        return {"model_state_bytes": self.model_state_bytes, "parameter_bytes": self.parameter_bytes,
                "gradient_bytes": self.gradient_bytes, "optimizer_bytes": self.optimizer_bytes,
                "activation_bytes": self.activation_bytes, "logits_bytes": self.logits_bytes,
                "buffer_bytes": self.buffer_bytes, "allowance_bytes": self.allowance_bytes,
                "total_bytes": self.total_bytes, "capacity_bytes": cap,
                "headroom_bytes": None if cap is None else cap - self.total_bytes, "stage": self.stage}

    def by_category(self) -> dict:
        """The bytes as the bars of `viz.memory_breakdown` stack them: param, grad, opt, act
        (activations and logits) and other (buffers and temporaries); they add up to total_bytes."""
        return {"param": self.parameter_bytes, "grad": self.gradient_bytes, "opt": self.optimizer_bytes,
                "act": self.activation_bytes + self.logits_bytes, "other": self.buffer_bytes + self.allowance_bytes}

    def __repr__(self) -> str:
        extra = "".join(f" + {n} {v / 1e9:.3g}" for n, v in (("buffers", self.buffer_bytes),
                                                               ("temporaries", self.allowance_bytes)) if v)
        return (f"Memory({self.total_bytes / 1e9:.3g} GB = states {self.model_state_bytes / 1e9:.3g} + "
                f"activations {self.activation_bytes / 1e9:.3g} + logits {self.logits_bytes / 1e9:.3g}{extra}"
                f"{' OOM' if self.oom else ''} of {self.capacity_bytes / 1e9:.3g} GB)")


def megatron_bytes_per_param(dp: int = 1, distributed_optimizer: bool = False) -> float:
    """Megatron-LM's estimate: 18 bytes/param, or 6 + 12/N_d with the distributed optimizer
    (`simulator.model_states`, recipe "megatron", ZeRO stage 1 for the distributed optimizer)."""
    _positive(dp=dp)
    return model_state_bytes(1.0, int(dp), 1 if distributed_optimizer else 0, "megatron")
