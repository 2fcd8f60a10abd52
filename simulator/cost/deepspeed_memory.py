"""DeepSpeed's ZeRO-2 and ZeRO-3 model-state estimators, for a parameter count or a model preset.

The formulas of `estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py)
and `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py), Psi parameters,
N = gpus_per_node x nodes GPUs, buffer factor f (default 1.5), bytes:

ZeRO-2   offload_optimizer=cpu:  GPU 2 Psi                 CPU Psi max(4 N, 16) f
         offload_optimizer=none: GPU 2 Psi + 18 Psi / N    CPU 4 Psi gpus_per_node f
         (18 = 16-bit gradients 2 + fp32 gradients 4 + fp32 parameters 4 + Adam m, v 8)
ZeRO-3   largest layer LL (the module with the most parameters of its own), buffer 4 LL on the GPU:
         offload param+optimizer:  GPU 4 LL                CPU Psi 18 f / nodes (zero_init),
                                                               Psi max(4 gpus_per_node, 18 / nodes) f (not)
         offload optimizer only:   GPU 4 LL + 2 Psi / N    CPU Psi 16 f / nodes (zero_init),
                                                               Psi max(4 gpus_per_node, 16 / nodes) f (not)
         no offload:               GPU 4 LL + 18 Psi / N   CPU 4 LL gpus_per_node f (zero_init),
                                                               4 Psi gpus_per_node f (not)
DeepSpeed prints these in GiB (2^30 bytes) and truncates bytes to integers, as here.
Psi counts shared parameters once (tied embeddings); LL is `memory_report.largest_layer_params`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.memory_report import largest_layer_params
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.errors import ParasimError


@dataclass(frozen=True)
class DeepSpeedEstimate:
    """One row of DeepSpeed's table: bytes per CPU and per GPU for a choice of offload options."""

    stage: int
    offload_param: bool
    offload_optimizer: bool
    zero_init: bool | None        # ZeRO-3 only
    cpu_bytes: int
    gpu_bytes: int

    def as_dict(self) -> dict:
        return {"stage": self.stage, "offload_param": self.offload_param, "offload_optimizer": self.offload_optimizer,
                "zero_init": self.zero_init, "cpu_bytes": self.cpu_bytes, "gpu_bytes": self.gpu_bytes}


def _check(total_params: float, gpus_per_node: int, nodes: int, factor: float) -> None:
    if not total_params > 0:
        raise ParasimError(f"total_params must be > 0, got {total_params}")
    if gpus_per_node < 1 or nodes < 1:
        raise ParasimError(f"gpus per node and nodes must be >= 1, got {gpus_per_node} and {nodes}")
    if not factor > 0:
        raise ParasimError(f"additional_buffer_factor must be > 0, got {factor}")


def zero2_model_states(total_params: float, gpus_per_node: int = 1, nodes: int = 1, offload_optimizer: bool = True,
                       buffer_factor: float = 1.5) -> tuple[int, int]:
    """(CPU, GPU) bytes of DeepSpeed's ZeRO-2 estimate (module docstring)."""
    _check(total_params, gpus_per_node, nodes, buffer_factor)
    n = gpus_per_node * nodes
    if offload_optimizer:
        return int(total_params * max(4 * n, 16) * buffer_factor), int(2 * total_params)
    return int(total_params * 4 * gpus_per_node * buffer_factor), int(2 * total_params + int(18 * total_params / n))


def zero3_model_states(total_params: float, largest_layer: float, gpus_per_node: int = 1, nodes: int = 1,
                       offload_optimizer: bool = True, offload_param: bool = True, zero_init: bool = True,
                       buffer_factor: float = 1.5) -> tuple[int, int]:
    """(CPU, GPU) bytes of DeepSpeed's ZeRO-3 estimate (module docstring)."""
    _check(total_params, gpus_per_node, nodes, buffer_factor)
    if offload_param and not offload_optimizer:
        raise ParasimError("DeepSpeed's estimate has no row offloading parameters but not the optimizer")
    n, per_node = gpus_per_node * nodes, 1 / nodes
    buffer = 4 * largest_layer
    if offload_optimizer:
        k = 18 if offload_param else 16
        gpu = buffer if offload_param else buffer + int(2 * total_params / n)
        cpu = total_params * (k * per_node if zero_init else max(4 * gpus_per_node, k * per_node)) * buffer_factor
    else:
        gpu = buffer + int(18 * total_params / n)
        cpu = (largest_layer if zero_init else total_params) * 4 * gpus_per_node * buffer_factor
    return int(cpu), int(gpu)


def deepspeed_estimates(model: ModelSpec | str | float, gpus_per_node: int = 1, nodes: int = 1,
                        buffer_factor: float = 1.5, largest_layer: float | None = None) -> list[DeepSpeedEstimate]:
    """Every row DeepSpeed's `..._all_cold` functions print, ZeRO-2 then ZeRO-3, for a model preset
    (Psi = `params()`, LL = its largest module) or a parameter count (then give `largest_layer`)."""
    if isinstance(model, (int, float)):
        psi = float(model)
        if largest_layer is None:
            raise ParasimError("give largest_layer (parameters of the largest module) with a bare parameter count")
        ll = float(largest_layer)
    else:
        spec = get_model(model)
        psi, ll = float(spec.params()), largest_layer_params(spec) if largest_layer is None else float(largest_layer)
    rows = [DeepSpeedEstimate(2, False, off, None, *zero2_model_states(psi, gpus_per_node, nodes, off, buffer_factor))
            for off in (True, False)]
    for off_opt, off_param in ((True, True), (True, False), (False, False)):
        for init in (True, False):
            cpu, gpu = zero3_model_states(psi, ll, gpus_per_node, nodes, off_opt, off_param, init, buffer_factor)
            rows.append(DeepSpeedEstimate(3, off_param, off_opt, init, cpu, gpu))
    return rows
