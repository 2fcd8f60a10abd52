"""Layer-wise (naive) model parallelism: contiguous layers per device, one batch, no micro-batches.

Device d runs its layers' forward after device d-1 and its backward after device d+1, so at any
moment only one device computes: with p devices each is idle (p-1)/p of the step. The lessons use
this idle time to motivate micro-batched pipelines (Huang et al. 2019, GPipe, Fig. 2b)."""

from __future__ import annotations

from dataclasses import replace

from .config import TrainConfig
from .replicated import Compiled, compile_replicated


def compile_layer_parallel(cfg: TrainConfig) -> Compiled:
    return compile_replicated(replace(cfg, strategy="layer", pp=cfg.pp or cfg.devices, schedule="gpipe"))
