"""Brute-force search over Megatron-style parallel configurations with the analytic model.

Enumerates t (powers of two dividing the heads, at most `max_tp`), p (dividing the layers),
d = gpus / (t p), micro-batch size b (powers of two with B divisible by b d), schedule and
recompute, keeps those that fit in memory and returns them fastest first. Each evaluation is
`simulator.cost.analytic.estimate` (well under a millisecond), so a few thousand candidates
cost about a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.analytic import AnalyticResult, estimate
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.errors import ParasimError


@dataclass(frozen=True)
class Candidate:
    config: ParallelConfig
    result: AnalyticResult

    def __repr__(self) -> str:
        r = self.result
        return (f"{self.config!r}: {r.step_time_s:.4g} s, {r.tflops_per_gpu:.4g} TFLOP/s/GPU, "
                f"MFU {r.mfu:.1%}, {r.memory_per_gpu_bytes / 1e9:.3g} GB")


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


def search_configs(model: ModelSpec | str, hardware: Hardware | str, gpus: int, global_batch: int, *,
                   max_tp: int | None = None, schedules=("1f1b",), recomputes=("none", "selective", "full"),
                   micro_batch_sizes=None, sequence_parallel: bool = True, zero_stages=(0,),
                   assumptions: Assumptions = Assumptions(), top: int = 10) -> list[Candidate]:
    """The `top` fastest configurations that fit in device memory (fastest first)."""
    model, hw = get_model(model), get_hardware(hardware)
    if gpus < 1 or global_batch < 1:
        raise ParasimError(f"gpus and global batch must be >= 1, got {gpus} and {global_batch}")
    max_tp = max_tp or hw.devices_per_node
    found = []
    for t in _powers_of_two(min(max_tp, gpus)):
        if model.heads % t or gpus % t:
            continue
        for p in (p for p in range(1, gpus // t + 1) if (gpus // t) % p == 0 and model.layers % p == 0):
            d = gpus // (t * p)
            for b in micro_batch_sizes or _powers_of_two(global_batch):
                if global_batch % (b * d):
                    continue
                for sched in schedules:
                    for rc in recomputes:
                        for z in zero_stages:
                            try:
                                cfg = ParallelConfig(tp=t, pp=p, dp=d, micro_batch_size=b,
                                                     global_batch=global_batch, schedule=sched,
                                                     recompute=rc, zero_stage=z,
                                                     sequence_parallel=sequence_parallel and t > 1)
                            except ParasimError:
                                continue
                            res = estimate(model, cfg, hw, assumptions)
                            if not res.oom:
                                found.append(Candidate(cfg, res))
    found.sort(key=lambda c: c.result.step_time_s)
    return found[:top]
