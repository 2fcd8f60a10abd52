"""Data parallelism: every device holds the whole model and a 1/N slice of the batch; gradients
are AllReduced (summed, or averaged with gradients_mean) before the identical optimizer steps.

Communication optimisations (simulator/parallel/grad_sync.py): bucketing with overlap
(`bucket_mb`), gradient accumulation (`accumulate` micro-steps per AllReduce) and gradients on the
wire in float16 (`grad_dtype`). Ring AllReduce moves 2(N-1)/N x S bytes per device per step
(Patarasuk & Yuan 2009), S = parameter bytes on the wire."""

from __future__ import annotations

from dataclasses import replace

from .config import TrainConfig
from .replicated import Compiled, compile_replicated


def compile_data_parallel(cfg: TrainConfig) -> Compiled:
    return compile_replicated(replace(cfg, strategy="dp", dp=cfg.dp or cfg.devices, pp=1))
