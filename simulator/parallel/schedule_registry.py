"""The pipeline schedules: one `ScheduleSpec` each, the one place that lists them.

Each entry holds what every consumer needs to know about a schedule: its action generator
(`simulator.parallel.schedules`), its constraints, the micro-batches whose activations stage 0
holds at its peak, its bubble in closed form, and whether it splits the backward into B (input
gradients) and W (weight gradients). The runtime compilers (`make_schedule`), the configurations
(`TrainConfig`, `ParallelConfig`), the cost model (closed form, memory, scale programs), the search,
the CLI and the app read this table. Adding a schedule = one generator in schedules.py, one entry
here, and its tests.

Closed forms (per device; F, B, W = one micro-batch's forward, input-gradient and weight-gradient
time of one stage, B + W the whole backward):
  GPipe, 1F1B   bubble (p-1)(F+B+W); in flight m (GPipe), min(p, m) (1F1B)
                (Huang et al. 2019; Narayanan et al. 2021 Sec. 2.2)
  interleaved   bubble (p-1)(F+B+W)/v; m a multiple of p (Narayanan et al. 2021 Sec. 2.2);
                in flight p (1 + (p-1)/(p v)) stage-sized units (Korthikanti et al. 2022 Sec. 4.2.3,
                whose "m" is the number of model chunks v; Megatron-LM theoretical_memory_usage)
  ZB-H1         bubble (p-1) max(0, F+B-W); in flight min(p, m)
  ZB-H2         bubble (p-1) max(0, F+B-2W); in flight min(2p-1, m) (Qi et al. 2023, Table 2)
  DualPipe      in flight p + 1 (DeepSeek-V3 technical report, Table 2); not in the closed-form
                cost model (bubble None): it runs for real and on the event clock only
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..errors import ParasimError
from .schedules import Schedule, check_dualpipe, dualpipe, gpipe, interleaved, one_f_one_b, zb_h1, zb_h2

# (p, F, B, W, v) -> idle time per device in one step
BubbleForm = Callable[[int, float, float, float, int], float]


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    generate: Callable[[int, int, int], Schedule]   # (p, m, v) -> per-stage action lists
    in_flight: Callable[[int, int, int], float]     # (p, m, v) -> micro-batches held by stage 0 at its peak
    bubble: BubbleForm | None                       # None: not priced by the closed form
    splits_bw: bool = False        # always runs B and W as separate actions (zero-bubble schedules)
    virtual_stages: bool = False   # takes v > 1 model chunks per device
    m_multiple_of_p: bool = False  # needs micro-batches a multiple of the stages

    @property
    def priced(self) -> bool:
        return self.bubble is not None

    def check(self, p: int, m: int, v: int = 1) -> None:
        """Refuse (p, m, v) this schedule cannot run, with one line naming the rule and the numbers."""
        if v != 1 and not self.virtual_stages:
            raise ParasimError(f"virtual stages ({v}) need the interleaved schedule, not {self.name}")
        if self.name == "dualpipe" and p > 1:
            check_dualpipe(p, m)
        if self.m_multiple_of_p and p > 1 and m % p:
            raise ParasimError(f"{self.name} schedule needs micro-batches ({m}) to be a multiple of stages ({p}) "
                               f"(Narayanan et al. 2021 Sec. 2.2)")


SCHEDULE_SPECS: dict[str, ScheduleSpec] = {s.name: s for s in (
    ScheduleSpec("gpipe", lambda p, m, v: gpipe(p, m), lambda p, m, v: float(m),
                 lambda p, F, B, W, v: (p - 1) * (F + B + W)),
    ScheduleSpec("1f1b", lambda p, m, v: one_f_one_b(p, m), lambda p, m, v: float(min(p, m)),
                 lambda p, F, B, W, v: (p - 1) * (F + B + W)),
    ScheduleSpec("interleaved", interleaved, lambda p, m, v: p * (1 + (p - 1) / (p * v)),
                 lambda p, F, B, W, v: (p - 1) * (F + B + W) / v, virtual_stages=True, m_multiple_of_p=True),
    ScheduleSpec("zb-h1", lambda p, m, v: zb_h1(p, m), lambda p, m, v: float(min(p, m)),
                 lambda p, F, B, W, v: (p - 1) * max(0.0, F + B - W), splits_bw=True),
    ScheduleSpec("zb-h2", lambda p, m, v: zb_h2(p, m), lambda p, m, v: float(min(2 * p - 1, m)),
                 lambda p, F, B, W, v: (p - 1) * max(0.0, F + B - 2 * W), splits_bw=True),
    # DualPipe runs some backwards whole (BW) and the rest split (B, then W), so it is not marked splits_bw
    ScheduleSpec("dualpipe", lambda p, m, v: dualpipe(p, m), lambda p, m, v: float(p + 1), None),
)}

SCHEDULES = tuple(SCHEDULE_SPECS)                                        # every schedule
PRICED_SCHEDULES = tuple(n for n, s in SCHEDULE_SPECS.items() if s.priced)  # the closed-form cost model's
ZERO_BUBBLE = tuple(n for n, s in SCHEDULE_SPECS.items() if s.splits_bw)


def schedule_spec(name: str, priced: bool = False) -> ScheduleSpec:
    """The entry of `name`; `priced=True` also refuses schedules the closed form does not price."""
    known = PRICED_SCHEDULES if priced else SCHEDULES
    if name not in known:
        raise ParasimError(f"unknown schedule {name!r}; choose one of {', '.join(known)}")
    return SCHEDULE_SPECS[name]


@functools.lru_cache(maxsize=16)
def make_schedule(name: str, p: int, m: int, v: int = 1) -> Schedule:
    """Build a named schedule: "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe".
    Schedules are immutable, so a step's program and its memory estimate share one (cached)."""
    spec = schedule_spec(name)
    if v != 1 and not spec.virtual_stages:
        raise ParasimError(f"schedule {name!r} has one chunk per stage, got v={v}")
    return spec.generate(p, m, v)
