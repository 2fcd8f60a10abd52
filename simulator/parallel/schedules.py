"""Pipeline schedules as data: per-stage (per-device) ordered lists of actions.

A schedule is a pure function of (p, m, v): nothing runs. Each device executes its list in order
and waits for its dependencies (see `schedule_check.validate` and `schedule_sim.simulate_schedule`).

Actions: `F` forward, `BW` full backward (input and weight gradient together), and for the
zero-bubble schedules `B` (input gradient only, on the critical path) and `W` (weight gradient
only, deferrable). With interleaving (v > 1) device d holds v chunks. Which model stage chunk c of
device d is lives in the schedule (`Schedule.stage_map`, consumed by the checker, the clock and the
runtime): "loop" placement is `c * p + d` (Megatron-LM's interleaving, Narayanan et al. 2021,
Sec. 2.2), "v" placement zig-zags, chunk c being `c * p + d` for even c and `c * p + p - 1 - d` for
odd c, so that device d holds stages d and 2p-1-d when v = 2 (PyTorch's `style="v"` stage-to-rank
mapping, used by ZB-V and DualPipeV; Qi et al. 2024, Pipeline Parallelism with Controllable Memory).

Facts the generators reproduce (Huang et al. 2019; Narayanan et al. 2021, Sec. 2.2; Qi et al. 2023;
DeepSeek-V3 technical report, Sec. 3.2.1):
  GPipe and 1F1B: bubble (p-1)(t_f+t_b), fraction of the step (p-1)/(m+p-1); 1F1B holds at most
  p micro-batches in flight, GPipe m.  Interleaved: bubble (p-1)/(v m) of ideal compute.
  Zero bubble (Qi et al. 2023): ZB-H1 (p-1)(T_F+T_B-T_W) with p M_B, ZB-H2 (p-1)(T_F+T_B-2T_W)
  with (2p-1) M_B.

Text form (schedule_check.parse_schedule / format_schedule), one line per device: "F0 F1 B0 B1",
chunks as "F0.1", optional phase bars "F0 | F1 B0 | B1" (warmup | steady | cooldown); a line
"placement: v" (or "placement: 0 7, 1 6, ...", the model stages of each device's chunks) sets the
stage placement.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

from simulator.errors import ParasimError

KINDS = ("F", "B", "W", "BW")
PHASES = ("warmup", "steady", "cooldown")
PLACEMENTS = ("loop", "v")


@functools.lru_cache(maxsize=1024)
def stage_placement(style: str, p: int, v: int) -> tuple:
    """Per device, the model stage of each of its v chunks: "loop" c*p + d (Megatron-LM), "v"
    zig-zag (PyTorch's `generate_stage_to_rank_mapping(style="v")`): see the module docstring.
    Memoised: a search asks it for every candidate it prices (the result is an immutable tuple)."""
    if style not in PLACEMENTS:
        raise ParasimError(f"stage placement {style!r} is not one of {', '.join(PLACEMENTS)}")
    flip = style == "v"
    return tuple(tuple(c * p + (p - 1 - d if flip and c % 2 else d) for c in range(v)) for d in range(p))


@dataclass(frozen=True, slots=True)
class Action:
    """One unit of pipeline work on one device: `F3` (micro-batch 3, chunk 0), `B3.1` (chunk 1)."""

    kind: str        # "F" | "B" | "W" | "BW"
    microbatch: int  # 0 .. m-1
    chunk: int = 0   # virtual stage on this device, 0 .. v-1
    phase: str = "steady"  # "warmup" | "steady" | "cooldown"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ParasimError(f"action kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.microbatch < 0 or self.chunk < 0:
            raise ParasimError(f"action {self.kind} has micro-batch {self.microbatch} and chunk "
                               f"{self.chunk}; both must be >= 0")
        if self.phase not in PHASES:
            raise ParasimError(f"action phase {self.phase!r} is not one of {', '.join(PHASES)}")

    def __repr__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


@dataclass(frozen=True)
class Schedule:
    """Per-device action lists. `actions[d]` is what device d runs, in order.

    p devices (= pipeline ranks), m micro-batches, v virtual stages (chunks) per device, so
    p*v model stages; model stage of (device d, chunk c) is stage_map[d][c] (default: the loop
    placement c*p + d; see `stage_placement`).
    """

    name: str
    p: int
    m: int
    v: int
    actions: tuple  # tuple (length p) of tuples of Action
    bidirectional: bool = False  # DualPipe: chunk c is a direction; see model_stage
    stage_map: tuple = ()  # per device, the model stage of each chunk; () = the loop placement

    def __post_init__(self):
        check_sizes(self.p, self.m, self.v)
        acts = tuple(tuple(row) for row in self.actions)
        object.__setattr__(self, "actions", acts)
        if self.bidirectional:  # DualPipe: chunk 0 of device d is stage d of one copy, chunk 1 p-1-d of the other
            object.__setattr__(self, "stage_map", tuple((d, self.p - 1 - d) for d in range(self.p)))
        elif not self.stage_map:
            object.__setattr__(self, "stage_map", stage_placement("loop", self.p, self.v))
        smap = tuple(tuple(int(k) for k in row) for row in self.stage_map)
        object.__setattr__(self, "stage_map", smap)
        flat = sorted(k for row in smap for k in row)
        bad = len(smap) != self.p or any(len(row) != self.v for row in smap) or flat != list(range(self.p * self.v))
        if bad and not self.bidirectional:
            raise ParasimError(f"schedule {self.name!r}: the stage placement {smap} must give each of the "
                               f"p={self.p} devices v={self.v} chunks, the model stages 0..{self.p * self.v - 1} once each")
        if len(acts) != self.p:
            raise ParasimError(f"schedule {self.name!r} has {len(acts)} action lists for p={self.p} stages")
        for d, row in enumerate(acts):
            for a in row:
                if not isinstance(a, Action):
                    raise ParasimError(f"stage {d} holds {a!r}, which is not an Action")
                if a.microbatch >= self.m or a.chunk >= self.v:
                    raise ParasimError(f"stage {d} runs {a!r} but the schedule has m={self.m} "
                                       f"micro-batches and v={self.v} chunks per stage")

    @property
    def n_stages(self) -> int:
        """Model stages p*v (p for a bidirectional schedule: two copies of p stages)."""
        return self.p if self.bidirectional else self.p * self.v

    def model_stage(self, device: int, chunk: int) -> int:
        """stage_map[device][chunk]. Bidirectional (DualPipe): chunk 0 of device d is stage d of
        the copy fed from device 0, chunk 1 stage p-1-d of the copy fed from device p-1."""
        return self.stage_map[device][chunk]

    @property
    def stage_devices(self) -> tuple:
        """Model stage -> the device that runs it (bidirectional: the device of the first copy)."""
        if self.bidirectional:
            return tuple(range(self.p))
        out = [0] * self.n_stages
        for d, row in enumerate(self.stage_map):
            for k in row:
                out[k] = d
        return tuple(out)

    def chunk_of(self, k: int) -> int:
        """The chunk index of model stage k on its device."""
        return 0 if self.bidirectional else self.stage_map[self.stage_devices[k]].index(k)

    @property
    def placement(self) -> str:
        """"loop", "v" or "custom": the name of the stage placement."""
        return next((s for s in PLACEMENTS if stage_placement(s, self.p, self.v) == self.stage_map), "custom")

    def __repr__(self) -> str:
        return f"Schedule({self.name}, p={self.p}, m={self.m}, v={self.v})"

    @property
    def placement_line(self) -> str:
        """The text form's "placement: ..." line ("" for the loop placement and for DualPipe)."""
        if self.placement == "loop" or self.bidirectional:
            return ""
        how = self.placement if self.placement != "custom" else ", ".join(" ".join(map(str, r)) for r in self.stage_map)
        return f"placement: {how}"

    def __str__(self) -> str:  # the text form of schedule_check.format_schedule
        head = [self.placement_line] if self.placement_line else []
        return "\n".join(head + [" ".join(map(repr, row)) for row in self.actions])


def check_sizes(p: int, m: int, v: int) -> None:
    if p < 1:
        raise ParasimError(f"pipeline needs p >= 1 stages, got p={p}")
    if m < 1:
        raise ParasimError(f"pipeline needs m >= 1 micro-batches, got m={m}")
    if v < 1:
        raise ParasimError(f"pipeline needs v >= 1 virtual stages per device, got v={v}")


class ActionMaker:
    """A cache of Actions: the same (kind, mb, chunk, phase) is one object across devices and
    schedules (Actions are immutable; a search builds thousands of schedules of the same sizes)."""

    _shared: dict = {}
    LIMIT = 1 << 18        # cached Actions kept at most (a cleared cache only costs new objects)

    def __init__(self):
        if len(ActionMaker._shared) > self.LIMIT:
            ActionMaker._shared.clear()
        self.cache = ActionMaker._shared

    def __call__(self, kind, mb, chunk, phase):
        key = (kind, mb, chunk, phase)
        a = self.cache.get(key)
        if a is None:
            a = self.cache[key] = Action(kind, mb, chunk, phase)
        return a


def gpipe(p: int, m: int) -> Schedule:
    """GPipe: every forward, then every full backward (BW), micro-batch order both ways.

    Bubble (p-1)(t_f+t_b), bubble fraction of the step (p-1)/(m+p-1), m micro-batches of
    activations in flight (Huang et al. 2019, GPipe).
    """
    check_sizes(p, m, 1)
    act = ActionMaker()
    row = tuple(act("F", i, 0, "warmup") for i in range(m)) + tuple(act("BW", i, 0, "cooldown") for i in range(m))
    return Schedule("gpipe", p, m, 1, (row,) * p)


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B (PipeDream-Flush): stage r runs min(p-r-1, m) warmup forwards, then F/BW pairs, then
    the remaining backwards. Same bubble as GPipe, (p-1)(t_f+t_b), but at most p micro-batches in
    flight instead of m (Narayanan et al. 2021, Sec. 2.2).
    """
    check_sizes(p, m, 1)
    act = ActionMaker()
    rows = []
    for r in range(p):
        warm = min(p - r - 1, m)
        row = [act("F", i, 0, "warmup") for i in range(warm)]
        for i in range(m - warm):
            row += [act("F", warm + i, 0, "steady"), act("BW", i, 0, "steady")]
        row += [act("BW", i, 0, "cooldown") for i in range(m - warm, m)]
        rows.append(tuple(row))
    return Schedule("1f1b", p, m, 1, tuple(rows))


def _zero_bubble(name, p, m, limits, t_f, t_b, t_w) -> Schedule:
    """Greedy list scheduler in the spirit of Qi et al. 2023's heuristic (Sec. 3): when a device is
    free it runs, in order of preference, the next B whose gradient has arrived, the next F if fewer than limits[d]
    micro-batches hold activations (W frees them), else the oldest pending W. The order is fixed
    by simulating the given times once (`greedy_order`); the result is a plain action list."""
    order, _starts, _makespan = greedy_order(name, p, m, limits, t_f, t_b, t_w)
    return Schedule(name, p, m, 1, tuple(infer_phases(row) for row in order))


def greedy_order(name, p, m, limits, t_f, t_b, t_w) -> tuple[list, list, float]:
    """`_zero_bubble`'s play of the times: (per device its (kind, micro-batch) list, per device the
    start time of each, the makespan). Each action starts when its device is free and its inputs
    exist, so these are the times `schedule_check.execute` gives the order (no communication time):
    `executed_bubble` reads ZB-H2's makespan from here without building and re-timing the schedule
    (tests/test_schedules.py compares the two start by start)."""
    if min(t_f, t_b, t_w) <= 0:
        raise ParasimError(f"zero-bubble scheduling needs positive times, got t_f={t_f}, t_b={t_b}, t_w={t_w}")
    f_end = [[None] * m for _ in range(p)]  # f_end[d][i]: end time of F_i on stage d
    b_end = [[None] * m for _ in range(p)]
    nf, nb, nw = [0] * p, [0] * p, [0] * p
    order = [[] for _ in range(p)]
    starts = [[] for _ in range(p)]
    busy_until = [0.0] * p
    token = [0] * p  # only a device's latest event counts; older ones are stale
    # idle device -> time it looks again. What an idle device waits for (an F from d - 1, a B from
    # d + 1) can only arrive when a neighbour's action ends, and decisions taken at one instant are
    # independent (every action ends strictly later), so waking it then gives the order that waking
    # it at every completion anywhere gives, in O(actions) events.
    idle = {}
    INF = float("inf")
    events = [(0.0, d, 0) for d in range(p)]  # (time the device looks for work, device, token)
    while events:
        t, d, tok = heapq.heappop(events)
        if tok != token[d]:
            continue
        idle.pop(d, None)
        i = nb[d]
        b_ok = i < nf[d] and f_end[d][i] <= t and (d == p - 1 or (b_end[d + 1][i] is not None and b_end[d + 1][i] <= t))
        j = nf[d]
        f_ok = j < m and j - nw[d] < limits[d] and (d == 0 or (f_end[d - 1][j] is not None and f_end[d - 1][j] <= t))
        if b_ok:
            end = b_end[d][i] = t + t_b
            nb[d] += 1
            order[d].append(("B", i))
        elif f_ok:
            end = f_end[d][j] = t + t_f
            nf[d] += 1
            order[d].append(("F", j))
        elif nw[d] < nb[d]:
            end = t + t_w
            order[d].append(("W", nw[d]))
            nw[d] += 1
        else:
            if nw[d] < m:  # idle until a neighbour's action ends (what it waits for is theirs)
                idle[d] = min((busy_until[n] for n in (d - 1, d + 1) if 0 <= n < p and busy_until[n] > t),
                              default=INF)
                token[d] += 1
                if idle[d] < INF:
                    heapq.heappush(events, (idle[d], d, token[d]))
            continue
        starts[d].append(t)
        busy_until[d] = end
        token[d] += 1
        heapq.heappush(events, (end, d, token[d]))
        for w in (d - 1, d + 1):       # an idle neighbour looks again when this action ends
            if idle.get(w, -1.0) > end:
                idle[w] = end
                token[w] += 1
                heapq.heappush(events, (end, w, token[w]))
    if any(n < m for n in nw):  # cannot happen with limits >= 1; kept as a guard
        raise ParasimError(f"{name} scheduler stalled with p={p}, m={m}")
    return order, starts, max(busy_until)


def infer_phases(row):
    """Actions from an ordered list of (kind, micro-batch[, chunk]) tuples, with phases inferred:
    forwards before the first backward are warmup, actions after the last forward are cooldown,
    the rest steady."""
    act = ActionMaker()
    kinds = [k for k, _, *_ in row]
    first_b = next((i for i, k in enumerate(kinds) if k != "F"), len(kinds))
    last_f = max((i for i, k in enumerate(kinds) if k == "F"), default=-1)
    out = []
    for i, (kind, mb, *rest) in enumerate(row):
        phase = "warmup" if i < first_b else "cooldown" if i > last_f else "steady"
        out.append(act(kind, mb, rest[0] if rest else 0, phase))
    return tuple(out)


def zb_h1(p: int, m: int) -> Schedule:
    """ZB-H1 (Qi et al. 2023, Sec. 2.1): 1F1B with the backward split into B and W.

    Stage r runs 1F1B's min(p-r-1, m) warmup forwards, then F/B pairs; its W passes start r pairs
    late, so every stage holds p micro-batches in flight (1F1B's peak, p M_B), and the r delayed W
    passes fill the cooldown while the B passes race down the pipeline. Bubble per stage
    (p-1)(T_F+T_B-T_W) for m >= p, a third of 1F1B's (p-1)(T_F+T_B+T_W) when the three times
    are equal (Qi et al. 2023, Zero Bubble Pipeline Parallelism, Sec. 3).
    """
    check_sizes(p, m, 1)
    rows = []
    for r in range(p):
        warm = min(p - r - 1, m)
        row, nw = [("F", i) for i in range(warm)], 0
        for i in range(m - warm):
            row += [("F", warm + i), ("B", i)]
            if i >= r:  # W delayed by r pairs
                row.append(("W", nw))
                nw += 1
        for i in range(m - warm, m):
            row.append(("B", i))
            if nw < i + 1:
                row.append(("W", nw))
                nw += 1
        row += [("W", k) for k in range(nw, m)]
        rows.append(infer_phases(row))
    return Schedule("zb-h1", p, m, 1, tuple(rows))


def zb_h2_limits(p: int) -> list[int]:
    """ZB-H2's memory limit: every one of the p stages may hold 2p-1 micro-batches (Qi et al. 2023,
    Sec. 2.2), as `zb_h2` orders the schedule and `zb_h2_makespan` times it."""
    return [2 * p - 1] * p


def zb_h2(p: int, m: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0) -> Schedule:
    """ZB-H2 (Qi et al. 2023, Sec. 2.2): every stage may hold 2p-1 micro-batches ((2p-1) M_B), so
    extra warmup forwards fill the gap before the first B and W passes fill the tail. The order
    comes from the paper's greedy rule (B first, then F within the memory limit, else the oldest W)
    played once at the given times. Measured with this simulator (m >= 2p-1): step bubble per stage
    max((p-1)(T_F+T_B-2T_W), (p-1)T_F) and no idle inside any stage's busy span: zero bubble once
    the end-of-step synchronisation is removed (the paper's optimizer post-validation). With a
    synchronised step (p-1)T_F is a lower bound for every schedule (the last stage's first input
    arrives then), so Qi et al.'s (p-1)(T_F+T_B-2T_W) is reached only when T_B >= 2T_W.
    """
    check_sizes(p, m, 1)
    return _zero_bubble("zb-h2", p, m, zb_h2_limits(p), t_f, t_b, t_w)


def zb_h2_makespan(p: int, m: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0) -> float:
    """The makespan of `zb_h2(p, m, t_f, t_b, t_w)` timed at the times that ordered it (no
    communication time): the greedy's own play (`greedy_order`), what a search needs per candidate."""
    check_sizes(p, m, 1)
    return greedy_order("zb-h2", p, m, zb_h2_limits(p), t_f, t_b, t_w)[2]
