"""Figures of cost-model answers: memory per GPU against capacity, and sweeps (time vs size).

memory_breakdown: one stacked bar per GPU (or per configuration), parameters / gradients /
optimizer state / activations / other, with the device capacity as a dashed line; a bar above
the line is outlined in red and marked OOM.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from matplotlib.figure import Figure

from ..units import fmt_time
from .style import (
    MEMORY_CATEGORIES,
    MEMORY_COLORS,
    MEMORY_LABELS,
    OOM_COLOR,
    byte_unit,
    device_color,
    memory_category,
    message_figure,
    new_figure,
    style_axes,
    time_unit,
)


def memory_breakdown(bars: Sequence[Mapping[str, float]] | Mapping[str, Mapping[str, float]],
                     capacity_bytes: float | None = None, *, title: str = "memory per GPU",
                     width: float | None = None) -> Figure:
    """Stacked bars of bytes by category. `bars` is a list (labelled GPU 0, 1, ...) or a dict
    label -> {category: bytes}; keys are mapped to param/grad/opt/act/other."""
    items = list(bars.items()) if isinstance(bars, Mapping) else [(f"GPU {i}", b) for i, b in enumerate(bars)]
    totals = []
    stacks = []
    for _, b in items:
        agg = defaultdict(float)
        for k, v in b.items():
            agg[memory_category(k)] += float(v)
        stacks.append(agg)
        totals.append(sum(agg.values()))
    top = max(totals + [capacity_bytes or 0.0, 1.0])
    unit, scale = byte_unit(top)
    fig = new_figure(width or min(3.0 + 0.7 * len(items), 14.0), 4.2)
    ax = fig.add_subplot()
    style_axes(ax)
    xs = range(len(items))
    bottom = [0.0] * len(items)
    used = [c for c in MEMORY_CATEGORIES if any(s[c] for s in stacks)]
    for c in used:
        vals = [s[c] * scale for s in stacks]
        ax.bar(xs, vals, bottom=bottom, color=MEMORY_COLORS[c], width=0.7, label=MEMORY_LABELS[c],
               edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals)]
    n_oom = 0
    for i, total in enumerate(totals):
        over = capacity_bytes is not None and total > capacity_bytes
        n_oom += over
        if over:
            ax.bar(i, total * scale, width=0.7, facecolor="none", edgecolor=OOM_COLOR, linewidth=2.2, gid="oom")
        ax.text(i, total * scale + top * scale * 0.015, ("OOM " if over else "") + f"{total * scale:.3g}",
                ha="center", va="bottom", fontsize=8, color=OOM_COLOR if over else "#333333",
                fontweight="bold" if over else "normal")
    if capacity_bytes is not None:
        ax.axhline(capacity_bytes * scale, color=OOM_COLOR, linestyle="--", linewidth=1.2,
                   label=f"capacity {capacity_bytes * scale:.3g} {unit}")
    ax.set_xticks(list(xs), [lbl for lbl, _ in items], fontsize=8, rotation=0 if len(items) <= 10 else 45)
    ax.set_ylabel(f"memory ({unit})")
    ax.set_ylim(0, top * scale * 1.15)
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    suffix = f" · {n_oom} over capacity" if n_oom else ""
    fig.suptitle(title + suffix, fontsize=11, fontweight="bold")
    return fig


def sweep_chart(x: Sequence[float], series: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str,
                title: str = "", logx: bool = False, logy: bool = False, y_is_time: bool = False,
                width: float = 7.0) -> Figure:
    """Lines of y against x, one per series (e.g. collective time against world size per
    algorithm). With y_is_time the y values (seconds) are shown in a readable unit."""
    fig = new_figure(width, 4.0)
    ax = fig.add_subplot()
    style_axes(ax)
    ymax = max((max(v) for v in series.values() if len(v)), default=1.0)
    unit, scale = time_unit(ymax) if y_is_time else ("", 1.0)
    for i, (name, ys) in enumerate(series.items()):
        ax.plot(list(x), [y * scale for y in ys], marker="o", markersize=4, linewidth=1.8,
                color=device_color(i), label=name)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{ylabel} ({unit})" if unit else ylabel)
    ax.grid(color="#DDDDDD", linewidth=0.6)
    if len(series) > 1:
        ax.legend(frameon=False, fontsize=8)
    if title:
        ax.set_title(title, fontsize=11, fontweight="bold")
    return fig


def goodput_chart(curve: Sequence, *, young_s: float | None = None, daly_s: float | None = None,
                  chosen_s: float | None = None, title: str = "goodput vs checkpoint interval",
                  width: float = 8.0) -> Figure:
    """Goodput (useful / wall time) against the checkpoint interval tau, from a list of
    `simulator.cost.goodput.Goodput` points, with what is lost per useful second: checkpoints
    C/tau, lost work (tau + C)/(2M), restarts R/M (Young 1974). Vertical lines mark Young's
    sqrt(2CM) and Daly's optimum, and `chosen_s` (e.g. the interval the user picked)."""
    pts = sorted(curve, key=lambda g: g.interval_s)
    if not pts:
        return message_figure("no goodput points to draw")
    span = max(p.interval_s for p in pts)
    unit, scale = ("h", 1 / 3600) if span >= 3 * 3600 else (("min", 1 / 60) if span >= 180 else ("s", 1.0))
    xs = [p.interval_s * scale for p in pts]
    fig = new_figure(width, 4.2)
    ax = fig.add_subplot()
    style_axes(ax)
    ax.plot(xs, [p.goodput * 100 for p in pts], color="#4C78A8", linewidth=2.6, label="goodput", gid="goodput")
    for attr, label, color in (("checkpoint_overhead", "checkpoint writes C/τ", "#B279A2"),
                               ("lost_work", "lost work (τ+C)/2M", "#E45756"),
                               ("restart", "restarts R/M", "#9D755D")):
        ax.plot(xs, [getattr(p, attr) * 100 for p in pts], color=color, linewidth=1.3, linestyle="--", label=label)
    best = max(pts, key=lambda p: p.goodput)
    marks = [(young_s, "Young √(2CM)", "#54A24B", ":"), (daly_s, "Daly", "#2E8B57", "-."),
             (chosen_s, "chosen", "#333333", "-")]
    for x, label, color, style in marks:
        if x is not None:
            ax.axvline(x * scale, color=color, linestyle=style, linewidth=1.4, label=f"{label} {fmt_time(x)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
    ax.set_ylim(0, 100)
    ax.set_xlabel(f"checkpoint interval τ ({unit} of useful work)")
    ax.set_ylabel("% (goodput; losses per useful second)")
    ax.grid(color="#DDDDDD", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    # the optimum's interval is printed once, by the marks' legend, when they are given (the curve's best
    # sample lies a grid step away from it: two different numbers for one quantity)
    at = "" if young_s is not None or daly_s is not None else f" at τ = {fmt_time(best.interval_s)}"
    fig.suptitle(f"{title} · best {best.goodput:.1%}{at}", fontsize=11, fontweight="bold")
    return fig
