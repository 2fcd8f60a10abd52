"""Pipeline parallelism: layers split into p stages (p x v model chunks when interleaved), the batch
into m micro-batches, run by a schedule from simulator/parallel/schedules.py: GPipe (Huang et al.
2019), 1F1B (PipeDream-Flush, Narayanan et al. 2021), interleaved 1F1B (Narayanan et al. 2021
Sec. 2.2) or ZB-H1/ZB-H2 (Qi et al. 2023, backward split into B and W). Activations travel forward
and their gradients backward as point-to-point Send/Recv between neighbouring stages. With dp > 1
each stage AllReduces its gradients over the data-parallel group (2-D: pp x dp)."""

from __future__ import annotations

from dataclasses import replace

from .config import TrainConfig
from .replicated import Compiled, compile_replicated


def compile_pipeline_parallel(cfg: TrainConfig) -> Compiled:
    return compile_replicated(replace(cfg, strategy="pp"))
