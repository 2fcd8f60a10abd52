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
  interleaved   bubble (F+B+W)/v ((p-1) + max(0, p-m)(v-1)): Narayanan et al. 2021 Sec. 2.2's
                (p-1)(F+B+W)/v for every m >= p that PyTorch runs (schedules_interleaved.rounds; p need
                not divide m: the bubble is kept), plus the unfilled chunks when m < p (measured on
                the executed schedule with this module's simulator, every m <= 24, p <= 8). In flight: counted
                on the executed schedule (device 0's peak of held chunks / v, stage-sized units): 4.0
                at p 4, v 2, m 4, where Megatron-LM's m-independent p (1 + (p-1)/(p v)) says 5.5
                (Korthikanti et al. 2022 Sec. 4.2.3; theoretical_memory_usage)
  ZB-H1         bubble (p-1) max(F, B, F+B-W) + max(0, p-m) min(F, W); in flight min(p, m). Qi et al.
                2023 (Table 2) give (p-1)(F+B-W) for F = B = W; the schedule as executed (one step, the
                optimizer synchronous) cannot start its last stage before (p-1) F nor end its first before
                (p-1) B, and with m < p it idles a W per missing micro-batch: equal to the executed bubble
                for every B >= F (the backward's input gradient costs at least the forward), tested on a
                random grid of p, m, F, B, W (tests/test_schedule_bubbles.py)
  ZB-H2         bubble: the executed schedule's (built from F, B, W by its greedy rule, `zb_h2`, and
                played by schedule_sim; memoised); in flight min(2p-1, m). Qi et al.'s (p-1)(F+B-2W)
                assumes the optimizer step bypassed (the next step's forwards fill this one's tail); in
                one step with a synchronous optimizer the bubble is at least (p-1) max(F, F+B-2W)
                (`bubble_floor`, what a search may bound it with)
  DualPipe      in flight p + 1 (DeepSeek-V3 technical report, Table 2); not in the closed-form
                cost model (bubble None): it runs for real and on the event clock only
  looped-bfs, interleaved-zb, zb-v, dualpipev (PyTorch's ScheduleLoopedBFS,
                ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV): bubble and in
                flight counted on the executed schedule (its own action order played with the stages'
                F, B, W split over its chunks, `executed_bubble`; memoised), as ZB-H2's. PyTorch
                publishes no closed form for them. zb-v and dualpipev place exactly two chunks per
                device, V-shaped (v = 2). Not searched by default (`searched`): the search's bound
                needs a closed form or a floor (`bubble_floor`), and an executed bubble per candidate
                costs a schedule simulation; `parasim search --schedules` takes them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from numbers import Integral
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..limits import MAX_SCHEDULE_SLOTS
from ..limits import check as check_bound
from .schedule_check import execute
from .schedule_sim import DEFAULT_TIMES, SimResult, simulate_schedule
from .schedules import Schedule, gpipe, one_f_one_b, zb_h1, zb_h2, zb_h2_makespan
from .schedules_dualpipe import check_dualpipe, dualpipe, dualpipev
from .schedules_interleaved import first_stage_peak, interleaved, interleaved_zero_bubble, looped_bfs, rounds, zb_v

# (p, m, F, B, W, v) -> idle time per device in one step
BubbleForm = Callable[[int, int, float, float, float, int], float]


def _executed(name: str) -> BubbleForm:
    """The bubble of `name` as executed (`executed_bubble`, defined below; called when priced)."""
    return lambda p, m, F, B, W, v: executed_bubble(name, p, m, F, B, W, v)


def interleaved_bubble(p: int, m: int, F: float, B: float, W: float, v: int) -> float:
    """Interleaved 1F1B's idle time per device (module docstring): (F+B+W)/v ((p-1) + max(0, p-m)(v-1))."""
    return (F + B + W) / v * (p - 1 + max(0, p - m) * (v - 1))


def no_floor(p: int, m: int, F: float, B: float, W: float, v: int) -> float:
    """The floor of an executed bubble nobody has derived a closed form for: 0 (a bubble is never
    negative), so a search's bound stays a bound."""
    return 0.0


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    generate: Callable[[int, int, int], Schedule]   # (p, m, v) -> per-stage action lists
    in_flight: Callable[[int, int, int], float]     # (p, m, v) -> micro-batches held by stage 0 at its peak
    bubble: BubbleForm | None                       # None: not priced by the closed form
    splits_bw: bool = False        # always runs B and W as separate actions (zero-bubble schedules)
    virtual_stages: bool = False   # takes v > 1 model chunks per device
    chunks: int | None = None      # the one v it takes (the V-shaped schedules: 2), None = any
    rounds: bool = False           # issues micro-batches in rounds: m a multiple of max(1, m // p)
    min_m: Callable[[int], int] = lambda p: 1  # fewest micro-batches at p stages
    by_times: Callable | None = None  # (p, m, t_f, t_b, t_w) -> Schedule: ordered by playing the times
    # (p, m, t_f, t_b, t_w) -> that schedule's makespan at those times, read off the play itself
    makespan_by_times: Callable | None = None
    # a lower bound on `bubble` for F, B at least and W at most the given (a search's bound); None: `bubble`
    # itself is one (nondecreasing in F, B and W)
    bubble_floor: Callable | None = None
    searched: bool = True          # in the search's default schedules (SEARCHED_SCHEDULES)
    placement: str = "loop"        # where its model chunks sit (`schedules.stage_placement`): loop or v
    # the closed form plays its executed order with each model chunk's own times (`executed_idle`)
    # instead of `bubble`'s equal stages
    per_chunk: bool = False

    @property
    def priced(self) -> bool:
        return self.bubble is not None

    def check(self, p: int, m: int, v: int = 1) -> None:
        """Refuse (p, m, v) this schedule cannot run, with one line naming the rule and the numbers."""
        check_schedule_size(p, m, v)
        if v != 1 and not self.virtual_stages:
            takes = ", ".join(n for n, spec in SCHEDULE_SPECS.items() if spec.virtual_stages)
            raise ParasimError(f"virtual stages ({v}) need a schedule with several chunks per device ({takes}), "
                               f"not {self.name}")
        if self.chunks is not None and v != self.chunks:
            raise ParasimError(f"{self.name} places exactly {self.chunks} model chunks per device (V-shaped): "
                               f"virtual stages must be {self.chunks}, got {v}")
        if self.name == "dualpipe" and p > 1:
            check_dualpipe(p, m)
        if m < self.min_m(p):
            raise ParasimError(f"{self.name} needs at least {self.min_m(p)} micro-batches at p = {p} stages, got {m}")
        if self.rounds and p > 1 and v > 1:
            rounds(p, m)

    def chunks_for(self, v: int) -> int:
        """The chunks per device this schedule runs when a view offers `v` to every schedule: v for
        the ones that take any v, their fixed count for the V-shaped ones, 1 for the rest."""
        return self.chunks or (v if self.virtual_stages else 1)


SCHEDULE_SPECS: dict[str, ScheduleSpec] = {s.name: s for s in (
    ScheduleSpec("gpipe", lambda p, m, v: gpipe(p, m), lambda p, m, v: float(m),
                 lambda p, m, F, B, W, v: (p - 1) * (F + B + W)),
    ScheduleSpec("1f1b", lambda p, m, v: one_f_one_b(p, m), lambda p, m, v: float(min(p, m)),
                 lambda p, m, F, B, W, v: (p - 1) * (F + B + W)),
    ScheduleSpec("interleaved", interleaved, lambda p, m, v: first_stage_peak(p, m, v), interleaved_bubble,
                 virtual_stages=True, rounds=True),
    ScheduleSpec("zb-h1", lambda p, m, v: zb_h1(p, m), lambda p, m, v: float(min(p, m)),
                 lambda p, m, F, B, W, v: (p - 1) * max(F, B, F + B - W) + max(0, p - m) * min(F, W), splits_bw=True,
                 bubble_floor=lambda p, m, F, B, W, v: (p - 1) * max(F, B, F + B - W), per_chunk=True),
    ScheduleSpec("zb-h2", lambda p, m, v: zb_h2(p, m), lambda p, m, v: float(min(2 * p - 1, m)),
                 _executed("zb-h2"), splits_bw=True, by_times=zb_h2, makespan_by_times=zb_h2_makespan,
                 bubble_floor=lambda p, m, F, B, W, v: (p - 1) * max(F, F + B - 2 * W), per_chunk=True),
    # DualPipe runs some backwards whole (BW) and the rest split (B, then W), so it is not marked splits_bw
    ScheduleSpec("dualpipe", lambda p, m, v: dualpipe(p, m), lambda p, m, v: float(p + 1), None),
    ScheduleSpec("looped-bfs", looped_bfs, lambda p, m, v: executed_in_flight("looped-bfs", p, m, v),
                 _executed("looped-bfs"), bubble_floor=no_floor, virtual_stages=True, searched=False,
                 per_chunk=True),
    ScheduleSpec("interleaved-zb", interleaved_zero_bubble, lambda p, m, v: first_stage_peak(p, m, v, zero_bubble=True),
                 _executed("interleaved-zb"), bubble_floor=no_floor, splits_bw=True, virtual_stages=True, rounds=True,
                 searched=False, per_chunk=True),
    ScheduleSpec("zb-v", lambda p, m, v: zb_v(p, m), lambda p, m, v: executed_in_flight("zb-v", p, m, v),
                 _executed("zb-v"), bubble_floor=no_floor, splits_bw=True, virtual_stages=True, chunks=2,
                 searched=False, placement="v", per_chunk=True),
    # DualPipeV runs some backwards whole (BW) and the rest split, like DualPipe
    ScheduleSpec("dualpipev", lambda p, m, v: dualpipev(p, m), lambda p, m, v: executed_in_flight("dualpipev", p, m, v),
                 _executed("dualpipev"), bubble_floor=no_floor, virtual_stages=True, chunks=2, min_m=lambda p: 2 * p,
                 searched=False, placement="v", per_chunk=True),
)}

SCHEDULES = tuple(SCHEDULE_SPECS)                                        # every schedule
PRICED_SCHEDULES = tuple(n for n, s in SCHEDULE_SPECS.items() if s.priced)  # the closed-form cost model's
SEARCHED_SCHEDULES = tuple(n for n in PRICED_SCHEDULES if SCHEDULE_SPECS[n].searched)  # the search's default
ZERO_BUBBLE = tuple(n for n, s in SCHEDULE_SPECS.items() if s.splits_bw)


def schedule_spec(name: str, priced: bool = False) -> ScheduleSpec:
    """The entry of `name`; `priced=True` also refuses schedules the closed form does not price."""
    if name not in SCHEDULES:
        raise ParasimError(f"unknown schedule {name!r}; choose one of {', '.join(PRICED_SCHEDULES if priced else SCHEDULES)}")
    if priced and name not in PRICED_SCHEDULES:
        raise ParasimError(f"the closed form prices the schedules {', '.join(PRICED_SCHEDULES)}; {name!r} has no "
                           f"closed-form bubble (the scale program compiles it: build_scale_program)")
    return SCHEDULE_SPECS[name]


@functools.lru_cache(maxsize=16)
def make_schedule(name: str, p: int, m: int, v: int = 1) -> Schedule:
    """Build a named schedule (one of SCHEDULES) with v chunks per device, its rules checked first.
    Schedules are immutable, so a step's program and its memory estimate share one (cached)."""
    spec = schedule_spec(name)
    if v != 1 and not spec.virtual_stages:
        raise ParasimError(f"schedule {name!r} has one chunk per stage, got v={v}")
    check_schedule_size(p, m, v)
    if p > 1 or v > 1:
        spec.check(p, m, v)
    return spec.generate(p, m, v)


def check_schedule_size(p: int, m: int, v: int = 1) -> None:
    """Refuse, before generating it, a schedule of more actions than limits.MAX_SCHEDULE_SLOTS."""
    for name, x in (("stages p", p), ("micro-batches m", m), ("chunks v", v)):
        if isinstance(x, bool) or not isinstance(x, Integral) or x < 1:
            raise ParasimError(f"a schedule's {name} must be a whole number >= 1, got {x!r}")
    check_bound(f"a schedule's stages x micro-batches x chunks ({p} x {m} x {v})", int(p) * int(m) * int(v),
                MAX_SCHEDULE_SLOTS, rule="each is an action of the schedule")


def time_schedule(name: str, p: int, m: int, v: int = 1, t_f: float = DEFAULT_TIMES["t_f"],
                  t_b: float = DEFAULT_TIMES["t_b"], t_w: float = DEFAULT_TIMES["t_w"],
                  t_comm: float = DEFAULT_TIMES["t_comm"]) -> SimResult:
    """Build `name` with `spec.chunks_for(v)` chunks per device (a view offering one v to every
    schedule) and time it with unit times per device-sized stage: an action of a schedule with c
    chunks per device takes t/c (its chunk holds 1/c of the device's layers; DualPipe's two chunks
    are whole stages of two copies). Greedy schedules (ZB-H2) are ordered by the same times."""
    spec = schedule_spec(name)
    c = spec.chunks_for(v)
    sched = spec.by_times(p, m, t_f, t_b, t_w) if spec.by_times else make_schedule(name, p, m, c)
    k = 1 if sched.bidirectional else sched.v
    return simulate_schedule(sched, t_f / k, t_b / k, t_w / k, t_comm)


@functools.lru_cache(maxsize=256)
def executed_in_flight(name: str, p: int, m: int, v: int) -> float:
    """Stage-sized units of activations device 0 holds at its peak: schedule_sim's count on the
    schedule's own action list (F adds a chunk, BW or W frees it) divided by the chunks per device.
    Independent of the action times: it is the order of device 0's list."""
    sched = SCHEDULE_SPECS[name].generate(p, m, v)
    return simulate_schedule(sched).peak_in_flight[0] / (1 if sched.bidirectional else sched.v)


@functools.lru_cache(maxsize=1024)
def executed_idle(name: str, p: int, m: int, v: int, chunk_times: tuple) -> tuple[float, ...]:
    """Per device, the idle time of one step of `name` (`chunks_for(v)` chunks per device) whose
    model chunk j takes chunk_times[j] = (F, B, W) per micro-batch, with free communication: the
    executed order's makespan minus the device's work (`schedule_check.execute`). How the closed
    form prices a schedule with `per_chunk` (unequal chunks: the embedding on the first, the LM head
    on the last, which a V-shaped placement puts on one device)."""
    sched = make_schedule(name, p, m, SCHEDULE_SPECS[name].chunks_for(v))
    F, B, W = (np.array(x, dtype=float) for x in zip(*chunk_times))
    _, ends = execute(sched, {"F": F, "B": B, "W": W, "BW": B + W}, 0.0)
    makespan = float(ends.max())
    return tuple(max(0.0, makespan - m * math.fsum(F[j] + B[j] + W[j] for j in row)) for row in sched.stage_map)


@functools.lru_cache(maxsize=4096)
def executed_bubble(name: str, p: int, m: int, t_f: float, t_b: float, t_w: float, v: int = 1) -> float:
    """The idle time per device of one step of schedule `name` (`chunks_for(v)` chunks per device)
    with equal stages of these device-sized times and free communication: `time_schedule`'s makespan
    minus the work m (F+B+W). A schedule ordered by playing the times (ZB-H2) gives its makespan
    from that play (`ScheduleSpec.makespan_by_times`), the same number without building the actions."""
    spec = schedule_spec(name)
    if spec.makespan_by_times and spec.chunks_for(v) == 1:
        makespan = spec.makespan_by_times(p, m, t_f, t_b, t_w)
    else:
        makespan = time_schedule(name, p, m, v, t_f, t_b, t_w, 0.0).makespan
    return max(0.0, makespan - m * (t_f + t_b + t_w))


# The flush pipelines of one chunk per device that run each backward whole: GPipe and 1F1B
FLUSH_SCHEDULES = tuple(n for n, s in SCHEDULE_SPECS.items() if s.priced and not s.splits_bw and not s.virtual_stages)


def flush_formulas(name: str, p: int, m: int, t_f: float = 1.0, t_b: float = 1.0) -> dict:
    """The closed forms of a flush pipeline (`FLUSH_SCHEDULES`: GPipe, 1F1B) with equal stages and
    free communication (t_w = 0), from its registry entry, without building the schedule (any p, m):

      bubble_time      = the entry's bubble, (p - 1)(t_f + t_b) per device: p - 1 forward slots to
                         fill, p - 1 backward slots to drain (Huang et al. 2019; Narayanan et al. 2021, Sec. 2.2)
      bubble_fraction  = bubble / (bubble + m (t_f + t_b)) = (p - 1)/(m + p - 1): the bubble's share
                         of the whole step, what `simulate_schedule` and `Trace.bubble_fraction` measure
      bubble_ratio     = bubble / (m (t_f + t_b)) = (p - 1)/m: the Ultra-Scale Playbook's (Hugging
                         Face 2025) and Narayanan et al.'s r_bubble
      peak_in_flight   = per stage d, the entry's in-flight count of the pipeline of stages d..p-1
                         (a flush pipeline's stage d runs as stage 0 of a (p - d)-stage one): m for
                         GPipe, min(p - d, m) for 1F1B (its p - d - 1 warm-up forwards plus one)

    `simulate_schedule(make_schedule(name, p, m), t_f, t_b, t_w=0)` gives the same numbers
    (tests/test_schedules.py); the lessons' hidden cases use these where simulating cannot finish."""
    if name not in FLUSH_SCHEDULES:
        raise ParasimError(f"closed forms exist for the flush pipelines {', '.join(FLUSH_SCHEDULES)}, not {name!r}")
    for label, x in (("p", p), ("m", m)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ParasimError(f"{label} must be an integer >= 1, got {x!r}")
    spec = SCHEDULE_SPECS[name]
    bubble, work = spec.bubble(p, m, t_f, t_b, 0.0, 1), m * (t_f + t_b)
    return {"bubble_time": bubble, "bubble_fraction": bubble / (bubble + work), "bubble_ratio": bubble / work,
            "peak_in_flight": tuple(int(spec.in_flight(p - d, m, 1)) for d in range(p))}
