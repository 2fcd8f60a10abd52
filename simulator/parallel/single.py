"""Single device: the reference strategy. The whole model on one device; with `accumulate` K it
runs K micro-steps, summing gradients, before one optimizer step (same numbers as one big batch)."""

from __future__ import annotations

from dataclasses import replace

from .config import TrainConfig
from .replicated import Compiled, compile_replicated


def compile_single(cfg: TrainConfig) -> Compiled:
    return compile_replicated(replace(cfg, strategy="single", devices=1, dp=1, pp=1))
