"""Strategy name -> compiler. Each compiler turns a TrainConfig into a Compiled program."""

from __future__ import annotations

from typing import Callable

from .config import TrainConfig
from .context_parallel import compile_context_parallel
from .data_parallel import compile_data_parallel, compile_zero
from .expert_parallel import compile_expert_parallel, compile_experts
from .experts import MoEGPTConfig
from .hybrid import compile_hybrid
from .layer_parallel import compile_layer_parallel
from .pipeline import compile_pipeline_parallel
from .replicated import Compiled
from .sequence_parallel import compile_sequence_parallel
from .single import compile_single
from .tensor_parallel import compile_tp

COMPILERS: dict[str, Callable[[TrainConfig], Compiled]] = {
    "single": compile_single,
    "dp": lambda cfg: compile_zero(cfg) if cfg.zero_stage else compile_data_parallel(cfg),  # --zero S routes to ZeRO
    "layer": compile_layer_parallel,
    "pp": compile_pipeline_parallel,
    "zero1": compile_zero,
    "zero2": compile_zero,
    "zero3": compile_zero,
    "ep": compile_expert_parallel,
    "tp": lambda cfg: _moe_aware(compile_tp, cfg),
    "sp": compile_sequence_parallel,
    "cp": lambda cfg: _moe_aware(compile_context_parallel, cfg),
    "hybrid": compile_hybrid,
}


def _moe_aware(compiler, cfg: TrainConfig) -> Compiled:
    """A mixture-of-experts model split over tensor or context ranks needs the MoE-aware lanes."""
    return compile_experts(cfg) if isinstance(cfg.model, MoEGPTConfig) else compiler(cfg)


def compile_strategy(cfg: TrainConfig) -> Compiled:
    return COMPILERS[cfg.strategy](cfg)   # TrainConfig refuses a strategy outside STRATEGIES
