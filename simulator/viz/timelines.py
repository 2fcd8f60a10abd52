"""Figures of a Trace: the per-device timeline and memory over time.

timeline: one row per device, two lanes (compute above, communication below); bars coloured by
phase, micro-batch labels inside bars that are wide enough, idle time left as grey background.
Drawn with one `broken_barh` collection per (device, lane, colour), so thousands of events cost
a few dozen artists.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..trace import STEP_PART_LABELS, Trace, TraceEvent
from ..units import fmt_time
from .style import (
    FAULT_PHASES,
    MEMORY_CATEGORIES,
    MEMORY_COLORS,
    MEMORY_LABELS,
    PHASE_COLORS,
    PHASE_LETTERS,
    REPLAY_HATCH,
    byte_unit,
    memory_category,
    message_figure,
    new_figure,
    style_axes,
    time_unit,
)

LANE_Y = {"compute": (0.0, 0.58), "comm": (0.62, 0.30)}  # (offset, height) inside a device row
ROW_PITCH = 1.15  # distance between device rows
MAX_LABELS = 800  # beyond this many candidate labels the picture is too dense to read them

_KIND_SHORT = {"all_reduce": "AR", "reduce_scatter": "RS", "all_gather": "AG", "broadcast": "Bc",
               "reduce": "Rd", "all_to_all": "A2A", "barrier": "|", "send": "→", "recv": "←"}


def event_label(e: TraceEvent) -> str:
    """Short text drawn inside a bar: F3 / B3 / W3 for compute, AR / AG / →3 for communication."""
    mb = "" if e.microbatch is None else str(e.microbatch)
    if e.phase in FAULT_PHASES:
        return PHASE_LETTERS[e.phase]
    if e.lane == "compute":
        letter = PHASE_LETTERS.get(e.phase, "")
        return f"{letter}{mb}" if (letter or mb) else ""
    short = _KIND_SHORT.get(e.kind, e.kind[:3])
    return f"{short} mb{mb}" if mb else short


def _bar_color(e: TraceEvent) -> str:
    if e.phase in FAULT_PHASES:
        return PHASE_COLORS[e.phase]
    if e.lane == "comm":
        return PHASE_COLORS["comm"]
    return PHASE_COLORS.get(e.phase, PHASE_COLORS["other"])


def timeline(trace: Trace, *, title: str | None = None, labels: bool = True, width: float = 12.0,
             devices: Sequence[int] | None = None) -> Figure:
    """Gantt chart of `trace`: per device a compute lane and a comm lane on the simulated clock.

    Grey background = idle. The title gives the time per step, the pipeline bubble and the exposed
    communication (Trace.step_breakdown). After failures (simulator.faults):
    work of a failed attempt is dark red-brown ("lost"), the failed instruction black, recovery cyan, and
    the events of replayed steps (attempt > 0) are hatched."""
    devices = list(range(trace.n_devices)) if devices is None else list(devices)
    if not trace.events:
        return message_figure("empty trace: nothing ran")
    span = trace.makespan_s
    unit, scale = time_unit(span)
    height = min(1.2 + 0.55 * len(devices), 16.0)
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    style_axes(ax)
    row_of = {d: i for i, d in enumerate(devices)}
    _draw_bars(ax, trace, row_of, span * scale, scale)
    if labels:
        _draw_labels(ax, trace, row_of, span * scale, scale)
    _lane_ticks(ax, devices, row_of)
    ax.set_xlim(0, span * scale * 1.01)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    handles = _legend_handles(trace)
    ax.legend(handles=handles, loc="lower center",
              bbox_to_anchor=(0.5, 1.0), ncol=len(handles), frameon=False, fontsize=8)
    head = title if title is not None else (trace.name or "timeline")
    parts = trace.step_breakdown()
    steps = f"{trace.steps} steps, {fmt_time(trace.step_time_s)} each" if trace.steps > 1 else f"step {fmt_time(span)}"
    fig.suptitle(f"{head} · {steps} · bubble {parts['bubble']:.1%} · exposed comm {parts['exposed_comm']:.1%}",
                 fontsize=11, fontweight="bold")
    return fig


def _draw_bars(ax, trace: Trace, row_of: dict[int, int], width: float, scale: float) -> None:
    """An idle background on both lanes of every device, then the events by colour and hatch."""
    groups: dict[tuple[int, str, str, str | None], list[tuple[float, float]]] = defaultdict(list)
    for e in trace.events:
        if e.device in row_of:
            hatch = REPLAY_HATCH if e.attempt > 0 and e.phase not in FAULT_PHASES else None
            groups[(e.device, e.lane, _bar_color(e), hatch)].append((e.start_s * scale, e.duration_s * scale))
    for row in row_of.values():
        for lane, (off, h) in LANE_Y.items():
            ax.broken_barh([(0.0, width)], (row * ROW_PITCH + off, h),
                           facecolors=PHASE_COLORS["idle"], edgecolor="none", zorder=1)
    for (d, lane, color, hatch), bars in groups.items():
        off, h = LANE_Y[lane]
        ax.broken_barh(bars, (row_of[d] * ROW_PITCH + off, h), facecolors=color, edgecolor="white",
                       linewidth=0.4, zorder=2, hatch=hatch, gid="replayed" if hatch else None)


def _draw_labels(ax, trace: Trace, row_of: dict[int, int], width: float, scale: float) -> None:
    """Name the bars wide enough to hold a label (about 1/60 of the axis), unless there are too many."""
    min_w = width / 60.0
    cands = [e for e in trace.events if e.device in row_of and e.duration_s * scale >= min_w]
    if len(cands) > MAX_LABELS:
        return
    for e in cands:
        text = event_label(e)
        if not text:
            continue
        off, h = LANE_Y[e.lane]
        ax.text((e.start_s + e.duration_s / 2) * scale, row_of[e.device] * ROW_PITCH + off + h / 2,
                text, ha="center", va="center", fontsize=7 if e.lane == "compute" else 6,
                color="white", fontweight="bold", zorder=3, clip_on=True)


def _lane_ticks(ax, devices: list[int], row_of: dict[int, int]) -> None:
    ticks, names = [], []
    for d in devices:
        for lane, (off, h) in LANE_Y.items():
            ticks.append(row_of[d] * ROW_PITCH + off + h / 2)
            names.append(f"device {d}" if lane == "compute" else "comm")
    ax.set_yticks(ticks, names)
    for lbl, lane in zip(ax.get_yticklabels(), [ln for _ in devices for ln in LANE_Y]):
        if lane == "comm":
            lbl.set_fontsize(7)
            lbl.set_color("#777777")
    ax.set_ylim(len(devices) * ROW_PITCH, -0.1)


def _legend_handles(trace: Trace) -> list[Patch]:
    """One patch per colour the chart uses, in PHASE_COLORS order, then idle (and replayed)."""
    present = []
    for e in trace.events:
        key = e.phase if e.phase in FAULT_PHASES else (
            "comm" if e.lane == "comm" else (e.phase if e.phase in PHASE_COLORS else "other"))
        if key not in present:
            present.append(key)
    order = [p for p in PHASE_COLORS if p in present] + ["idle"]
    handles = [Patch(color=PHASE_COLORS[p], label=p) for p in order]
    if any(e.attempt > 0 for e in trace.events):
        handles.append(Patch(facecolor="#BBBBBB", edgecolor="white", hatch=REPLAY_HATCH, label="replayed"))
    return handles


def memory_over_time(trace: Trace, *, capacity_bytes: float | None = None,
                     devices: Sequence[int] | None = None, width: float = 12.0) -> Figure:
    """Bytes held per device over the simulated step, stacked by category
    (parameters, gradients, optimizer state, activations, other), one panel per device."""
    if not trace.memory:
        return message_figure("this trace has no memory samples (run the program on a runtime to measure them)")
    devices = sorted({s.device for s in trace.memory}) if devices is None else list(devices)
    peak = max(s.total_bytes for s in trace.memory)
    top = max(peak, capacity_bytes or 0)
    bunit, bscale = byte_unit(top)
    span = max(trace.makespan_s, max(s.time_s for s in trace.memory))
    tunit, tscale = time_unit(span or 1.0)
    fig = new_figure(width, min(1.0 + 1.3 * len(devices), 18.0))
    axes = fig.subplots(len(devices), 1, sharex=True, squeeze=False)[:, 0]
    for ax, d in zip(axes, devices):
        style_axes(ax)
        samples = sorted((s for s in trace.memory if s.device == d), key=lambda s: s.time_s)
        ts = [0.0] + [s.time_s * tscale for s in samples] + [span * tscale]
        layers = {c: [0.0] for c in MEMORY_CATEGORIES}
        for s in samples:
            agg = defaultdict(float)
            for k, v in s.bytes_by_category.items():
                agg[memory_category(k)] += v
            for c in MEMORY_CATEGORIES:
                layers[c].append(agg[c] * bscale)
        for c in MEMORY_CATEGORIES:
            layers[c].append(layers[c][-1])
        used = [c for c in MEMORY_CATEGORIES if any(layers[c])]
        ax.stackplot(ts, [layers[c] for c in used], step="post", colors=[MEMORY_COLORS[c] for c in used],
                     labels=[MEMORY_LABELS[c] for c in used], alpha=0.9)
        if capacity_bytes:
            ax.axhline(capacity_bytes * bscale, color="#D62728", linestyle="--", linewidth=1)
        ax.set_ylabel(f"device {d}\n({bunit})", fontsize=9)
        ax.set_ylim(0, top * bscale * 1.1)
        dev_peak = max((s.total_bytes for s in samples), default=0)
        ax.text(1.0, 1.0, f"peak {dev_peak * bscale:.3g} {bunit}", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8, color="#444444")
    axes[-1].set_xlabel(f"simulated time ({tunit})")
    present = {memory_category(k) for s in trace.memory for k in s.bytes_by_category}
    handles = [Patch(color=MEMORY_COLORS[c], label=MEMORY_LABELS[c]) for c in MEMORY_CATEGORIES if c in present]
    axes[0].legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles),
                   frameon=False, fontsize=8)
    fig.suptitle(f"{trace.name or 'memory'} · memory over the step", fontsize=11, fontweight="bold")
    return fig


def device_breakdown(trace: Trace, *, width: float = 7.0) -> Figure:
    """Per device, the five parts of the step (Trace.step_breakdown: compute, exposed communication,
    pipeline bubble, other idle, optimizer); the title gives the bubble fraction."""
    if not trace.events:
        return message_figure("empty trace: nothing ran")
    stats = trace.device_stats()
    fig = new_figure(width, min(1.2 + 0.38 * len(stats), 12.0))
    ax = fig.add_subplot()
    style_axes(ax)
    parts = (("compute", PHASE_COLORS["forward"]), ("exposed_comm", PHASE_COLORS["comm"]),
             ("bubble", "#C8C8C8"), ("other_idle", "#E6D9A8"), ("optimizer", PHASE_COLORS["optimizer"]))
    left = [0.0] * len(stats)
    ys = list(range(len(stats)))
    for key, color in parts:
        vals = [s[f"{key}_fraction"] for s in stats]
        ax.barh(ys, vals, left=left, color=color, label=STEP_PART_LABELS[key], height=0.7, edgecolor="white",
                linewidth=0.5)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(ys, [f"device {s['device']}" for s in stats])
    ax.set_ylim(len(stats) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:.0%}")
    ax.set_xlabel("share of the step")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False, fontsize=9)
    fig.suptitle(f"{trace.name or 'devices'} · bubble {trace.bubble_fraction():.1%}", fontsize=11,
                 fontweight="bold")
    return fig
