"""Pictures of pipeline schedules timed by `simulator.parallel.schedule_sim.simulate_schedule`.

schedule_chart: one row per pipeline device, F (blue) / B or BW (orange) / W (green) bars with
micro-batch labels (`F3`, `B3.1` for chunk 1), idle time as grey background; the title gives the
bubble fraction and the peak number of micro-batches in flight.
schedule_compare: several schedules stacked on one shared time axis, so lengths compare directly.
schedule_trace: the same timed schedule as a Trace (compute lane only), for Chrome/CSV export.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn (schedule_trace needs none of it)
    from matplotlib.figure import Figure

from ..trace import Trace, TraceEvent
from .style import ACTION_COLORS, PHASE_COLORS, message_figure, new_figure, style_axes

ROW_H = 0.8
MAX_LABELS = 600


def _draw_schedule(ax, result, xmax: float, labels: bool = True) -> None:
    sched = result.schedule
    p = sched.p
    groups = defaultdict(list)
    for d, row in enumerate(result.timeline):
        ax.broken_barh([(0.0, result.makespan)], (d - ROW_H / 2, ROW_H), facecolors=PHASE_COLORS["idle"],
                       edgecolor="none", zorder=1)
        for a, s, e in row:
            groups[(d, a.kind, a.chunk % 2)].append((s, e - s))
    for (d, kind, odd), bars in groups.items():
        ax.broken_barh(bars, (d - ROW_H / 2, ROW_H), facecolors=ACTION_COLORS[kind], edgecolor="white",
                       linewidth=0.6, alpha=0.62 if odd else 1.0, zorder=2, gid=f"actions-{kind}")
    n_actions = sum(len(r) for r in result.timeline)
    if labels and n_actions <= MAX_LABELS:
        min_w = xmax / 90.0
        for d, row in enumerate(result.timeline):
            for a, s, e in row:
                if e - s >= min_w:
                    ax.text((s + e) / 2, d, repr(a), ha="center", va="center", color="white",
                            fontsize=7 if e - s >= 2 * min_w else 6, fontweight="bold", zorder=3, clip_on=True)
    ax.set_yticks(range(p), [f"stage {d}" for d in range(p)])
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_xlim(0, xmax * 1.01)
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    style_axes(ax)
    v = f", v={sched.v}" if sched.v > 1 else ""
    ax.set_title(f"{sched.name} (p={p}, m={sched.m}{v}) · time {result.makespan:.4g} · "
                 f"bubble {result.bubble_fraction:.1%} · peak in flight {max(result.peak_in_flight)}",
                 fontsize=10, loc="left")


def _legend(fig, results) -> None:
    from matplotlib.patches import Patch

    kinds = []
    for r in results:
        for row in r.schedule.actions:
            for a in row:
                if a.kind not in kinds:
                    kinds.append(a.kind)
    names = {"F": "F forward", "B": "B input grad", "W": "W weight grad", "BW": "B full backward"}
    order = [k for k in ("F", "BW", "B", "W") if k in kinds]
    handles = [Patch(color=ACTION_COLORS[k], label=names[k]) for k in order]
    handles.append(Patch(color=PHASE_COLORS["idle"], label="idle (bubble)"))
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), frameon=False, fontsize=8)


def schedule_chart(result, *, width: float = 12.0, labels: bool = True) -> Figure:
    """One timed schedule (a schedule_sim.SimResult)."""
    return schedule_compare([result], width=width, labels=labels)


def schedule_compare(results: Sequence, *, width: float = 12.0, labels: bool = True,
                     shared_x: bool = True) -> Figure:
    """Several SimResults stacked, on one time axis when `shared_x` (lengths compare directly)."""
    results = list(results)
    if not results:
        return message_figure("no schedule to draw")
    heights = [max(r.schedule.p, 1) * 0.42 + 0.7 for r in results]
    fig = new_figure(width, min(sum(heights) + 0.6, 30.0))
    axes = fig.subplots(len(results), 1, sharex=shared_x, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    xmax = max(r.makespan for r in results)
    for ax, r in zip(axes, results):
        _draw_schedule(ax, r, xmax if shared_x else r.makespan, labels)
    axes[-1].set_xlabel("time (the unit of the F, B, W times)")
    _legend(fig, results)
    return fig


_ACTION_PHASE = {"F": "forward", "B": "backward", "BW": "backward", "W": "wgrad"}


def schedule_trace(result, time_unit_s: float = 1e-3) -> Trace:
    """A timed schedule as a Trace: one compute event per action; `time_unit_s` seconds per unit
    of the schedule's times (default: the F, B, W times read as milliseconds)."""
    events = [TraceEvent(d, "compute", repr(a), s * time_unit_s, (e - s) * time_unit_s, _ACTION_PHASE[a.kind],
                         a.kind, microbatch=a.microbatch)
              for d, row in enumerate(result.timeline) for a, s, e in row]
    sched = result.schedule
    return Trace(sched.p, events, name=f"{sched.name} p={sched.p} m={sched.m} v={sched.v}",
                 pipelined=True)
