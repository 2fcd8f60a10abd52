"""Data parallelism: every device holds the whole model and a 1/N slice of the batch; gradients
are AllReduced (summed, or averaged with gradients_mean) before the identical optimizer steps.

Communication optimisations (simulator/parallel/grad_sync.py): bucketing with overlap
(`bucket_mb`), gradient accumulation (`accumulate` micro-steps per AllReduce) and gradients on the
wire in float16 (`grad_dtype`). Ring AllReduce moves 2(N-1)/N x S bytes per device per step
(Patarasuk & Yuan 2009), S = parameter bytes on the wire. With a ZeRO stage (strategies zero1-3,
or dp with --zero) the model states are sharded over the data-parallel group instead (zero.py)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ParasimError
from .config import TrainConfig
from .replicated import Compiled, compile_replicated


def compile_data_parallel(cfg: TrainConfig) -> Compiled:
    return compile_replicated(replace(cfg, strategy="dp", dp=cfg.dp or cfg.devices, pp=1))


def compile_zero(cfg: TrainConfig) -> Compiled:
    """ZeRO stage cfg.zero_stage over cfg.dp data-parallel ranks (stage 0 is plain data parallelism): the
    one ZeRO compiler (`compile_replicated` with zero.py's stages) on a one-stage mesh."""
    cfg = cfg.resolved()
    if cfg.zero_stage == 0:
        return compile_data_parallel(cfg)
    if cfg.pp != 1 or cfg.tp != 1 or cfg.virtual_stages != 1:
        raise ParasimError(f"ZeRO shards over data parallelism only: needs pp=1, tp=1, one virtual stage; "
                           f"got pp={cfg.pp}, tp={cfg.tp}, virtual stages={cfg.virtual_stages} (strategy hybrid "
                           f"runs ZeRO-1 with pipelines and ZeRO 1-3 with tensor parallelism)")
    return compile_replicated(cfg)
