"""A large trace drawn as runs: one bar per run of consecutive events of one micro-batch on a lane.

A scale step holds about a million events (`simulator.cost.scale_sim`); a browser draws a few
thousand. `aggregate_runs` merges, on each device's lane, consecutive events of the same
micro-batch, step and schedule action (a stage's forward of micro-batch j, its backward with the
recomputation, the TP collectives of a micro-batch, ...) into one event that spans the run (first
start to last end), sums its bytes and FLOPs, takes the run's last phase (backward when
recomputing), and says in its name how many ops it holds and their busy time; idle gaps inside a
run are then not drawn. If that still leaves more than `max_events` bars, only the start of the
step is drawn (the first `max_events` bars in time). It reads the trace's columns
(`trace_columns`), so the million events are never built as objects; a plain `Trace` is first
laid out as columns (`to_columns`).
"""

from __future__ import annotations

import numpy as np

from .trace import Trace, TraceEvent
from .trace_columns import LANE_NAMES, ColumnTrace, EventColumns, lane_order
from .units import fmt_time

_BACKWARD = ("B", "BW", "W", "R")   # schedule actions of a backward ("R": the recomputation inside it)


def action(lane: str, name: str, phase: str) -> str:
    """The schedule action an event belongs to, from a compute event's label ("F3 s0 L2 ...":
    forward; "B3", "BW3", "W3", "R3": backward; otherwise its phase); comm events: ""."""
    if lane != "compute":
        return ""
    head = name.split(" ", 1)[0].rstrip("0123456789")
    return "F" if head == "F" else "B" if head in _BACKWARD else phase


def to_columns(trace: Trace) -> EventColumns:
    """The events of `trace` as columns, one meta per distinct (name, phase, kind, group)."""
    metas: dict[tuple, int] = {}
    rows = [(e.device, LANE_NAMES.index(e.lane), metas.setdefault((e.name, e.phase, e.kind, e.group), len(metas)),
             e.start_s, e.duration_s, e.nbytes, e.flops, -1 if e.microbatch is None else e.microbatch,
             -1 if e.flow is None else e.flow) for e in trace.events]
    cols = list(zip(*rows)) if rows else [()] * 9
    ints = [np.array(cols[k], dtype=np.int64) for k in (0, 1, 2)]
    return EventColumns(*ints, np.array(cols[3], dtype=float), np.array(cols[4], dtype=float),
                        np.array(cols[5], dtype=np.int64), np.array(cols[6], dtype=float),
                        np.array(cols[7], dtype=np.int64), np.array(cols[8], dtype=np.int64), tuple(metas))


def aggregate_runs(trace: Trace, max_events: int) -> tuple[Trace, str]:
    """`trace` unchanged when it has at most `max_events` events; otherwise its runs (module
    docstring) as a new Trace, and a note saying what was merged and what is not drawn."""
    c = trace.columns if isinstance(trace, ColumnTrace) else to_columns(trace)
    step = trace.step if isinstance(trace, ColumnTrace) else (trace.events[0].step if trace.events else 0)
    if len(c) <= max_events:
        return trace, ""
    if not isinstance(trace, ColumnTrace) and len({e.step for e in trace.events}) > 1:
        raise ValueError("aggregate_runs draws one step: split a multi-step trace by step first")
    order, _ = trace.lane_order() if isinstance(trace, ColumnTrace) else lane_order(c, trace.n_devices)
    act = _action_codes(c)[c.meta[order], c.lane[order], (c.microbatch[order] < 0).astype(np.int64)]
    key = np.stack([c.device[order], c.lane[order], c.microbatch[order], act])
    head = np.ones(len(order), dtype=bool)
    head[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    heads = np.flatnonzero(head)
    tails = np.append(heads[1:], len(order))                  # one past each run's last row
    starts = c.start_s[order[heads]]
    note = (f"{len(c):,} events drawn as {len(heads):,}: each bar is a run of consecutive ops of one "
            "micro-batch on one lane (hover for how many and their busy time); gaps inside a run are not drawn")
    shown = np.arange(len(heads))
    if len(heads) > max_events:     # still too many: the start of the step, up to max_events bars
        by_start = np.argsort(starts, kind="stable")
        cut = starts[by_start[max_events - 1]]
        shown = by_start[starts[by_start] <= cut]
        note += (f"; only the first {fmt_time(float(cut))} of the {fmt_time(trace.makespan_s)} step is drawn "
                 f"({len(shown):,} of {len(heads):,} bars)")
    events = _run_events(c, order, heads, tails, shown, step)
    return Trace(trace.n_devices, events, name=trace.name, pipelined=trace.pipelined), note


def _action_codes(c: EventColumns) -> np.ndarray:
    """Per (meta, lane, micro-batch is None): the code of `action` of the event's name and phase."""
    codes: dict[str, int] = {}
    table = np.zeros((len(c.metas), len(LANE_NAMES), 2), dtype=np.int64)
    for m, (fmt, phase, _, _) in enumerate(c.metas):
        for none in (0, 1):
            name = fmt.format(j=-1 if none else 0) if "{" in fmt else fmt
            for ln, lane in enumerate(LANE_NAMES):
                table[m, ln, none] = codes.setdefault(action(lane, name, phase), len(codes))
    return table


def _run_events(c: EventColumns, order: np.ndarray, heads: np.ndarray, tails: np.ndarray, shown: np.ndarray,
                step: int) -> list[TraceEvent]:
    """The one event of each shown run; run k is rows order[heads[k]:tails[k]] (time order on a lane)."""
    lo, hi = heads[shown], tails[shown]
    rows = order[np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])]
    at = np.concatenate([[0], np.cumsum(hi - lo)[:-1]])      # each run's first position in rows
    run = np.repeat(np.arange(len(shown)), hi - lo)
    firsts, lasts = rows[at], rows[at + (hi - lo) - 1]
    busy = np.add.reduceat(c.duration_s[rows], at)
    ends = np.maximum.reduceat(c.start_s[rows] + c.duration_s[rows], at)
    nbytes = np.add.reduceat(c.nbytes[rows], at)
    flops = np.add.reduceat(c.flops[rows], at)
    # each run's distinct kinds in the order they first appear ("" is no kind)
    names = sorted({m[2] for m in c.metas})
    kind = np.array([names.index(m[2]) for m in c.metas], dtype=np.int64)[c.meta[rows]]
    pairs, first = np.unique(run * len(names) + kind, return_index=True)
    pick = np.argsort(first, kind="stable")
    kinds_of: list[list[str]] = [[] for _ in shown]
    for pr in pairs[pick].tolist():
        if names[pr % len(names)]:
            kinds_of[pr // len(names)].append(names[pr % len(names)])
    events = []
    for k, (r0, r1) in enumerate(zip(firsts.tolist(), lasts.tolist())):
        fmt, _, _, _ = c.metas[c.meta[r0]]
        mb, count, kinds = int(c.microbatch[r0]), int(hi[k] - lo[k]), kinds_of[k]
        phase = c.metas[c.meta[r1]][1]
        name = fmt.format(j=mb) if "{" in fmt else fmt
        if count > 1:
            name = (f"{phase} x{count} ops ({', '.join(kinds[:3])}{', ...' if len(kinds) > 3 else ''}), "
                    f"busy {fmt_time(float(busy[k]))}")
        start = float(c.start_s[r0])
        events.append(TraceEvent(int(c.device[r0]), LANE_NAMES[int(c.lane[r0])], name, start, float(ends[k]) - start,
                                 phase, kinds[0] if len(kinds) == 1 else "mixed", int(nbytes[k]), float(flops[k]),
                                 None if mb < 0 else mb, step))
    return events
