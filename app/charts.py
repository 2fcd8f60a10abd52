"""Interactive charts (Altair / Vega-Lite, which Streamlit ships): built from library objects, no
Streamlit calls here, so pages and lessons can reuse them. matplotlib stays for PNG downloads.

- timeline_chart(trace)        Gantt of a Trace: hover an event for its details, drag to pan and
                               scroll to zoom the time axis, click a bar (or pick in the menu) to
                               highlight one micro-batch's path through the stages, step boundaries
                               as rules; idle time drawn as what the step accounting calls it.
- aggregate_trace(trace)       a large trace drawn as runs of one micro-batch per lane (and a note).
- memory_components_spec()     bytes per memory component per GPU against the capacity (a spec).

The collective player's charts live in player_charts.py.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from simulator.trace import STEP_PART_LABELS, Trace, step_windows, uncovered
from simulator.trace_runs import aggregate_runs
from simulator.units import fmt_bytes, fmt_time
from simulator.viz import GAP_COLORS, PHASE_COLORS

MAX_EVENTS = 6000  # beyond this, the timeline shows the first steps only (the browser stays fluid)
LANE_NAMES = {"compute": "compute", "comm": "comm"}
FONT = 13


def _time_unit(span_s: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if span_s * scale >= 1.0:
            return unit, scale
    return "ns", 1e9


def _bytes_unit(top: float) -> tuple[str, float]:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if top >= scale:
            return unit, scale
    return "B", 1.0


def _row(device: int, lane: str) -> str:
    return f"device {device}" if lane == "compute" else f"device {device} comm"


def _category(e) -> str:
    if e.phase in ("lost", "failure", "recovery"):
        return e.phase
    return "comm" if e.lane == "comm" else (e.phase if e.phase in PHASE_COLORS else "other")


def timeline_frame(trace: Trace, stage_of: dict[int, int] | None = None, max_events: int = MAX_EVENTS):
    """(events, gaps, steps, unit, note): the rows the timeline draws, as pandas tables.
    gaps: per device the compute lane's exposed communication, pipeline bubble and other idle,
    classified exactly as Trace.step_breakdown counts them."""
    events = sorted(trace.events, key=lambda e: (e.start_s, e.device))
    note = ""
    if len(events) > max_events:
        last_step = events[max_events - 1].step
        events = [e for e in events if e.step < max(last_step, 1)] or events[:max_events]
        note = f"first {len({e.step for e in events})} of {trace.steps} steps shown ({len(trace.events):,} events)"
    span = max((e.end_s for e in events), default=0.0)
    unit, scale = _time_unit(span or 1.0)
    rows = [{"row": _row(e.device, e.lane), "device": e.device, "lane": e.lane, "op": e.name,
             "category": _category(e), "kind": e.kind or "-",
             "micro-batch": -1 if e.microbatch is None else e.microbatch,
             "stage": "-" if stage_of is None else stage_of.get(e.device, "-"), "step": e.step,
             "attempt": e.attempt, "bytes": fmt_bytes(e.nbytes) if e.nbytes else "-",
             "FLOPs": f"{e.flops:.3g}" if e.flops else "-", "start": fmt_time(e.start_s),
             "duration": fmt_time(e.duration_s), "t0": e.start_s * scale, "t1": e.end_s * scale}
            for e in events]
    pipelined = ({e.step for e in trace.events if e.kind in ("send", "recv")} if trace.pipelined is None
                 else ({e.step for e in trace.events} if trace.pipelined else set()))
    windows = step_windows(events)
    gaps = []
    for d in range(trace.n_devices):
        mine = [e for e in events if e.device == d]
        comp = sorted((e.start_s, e.end_s) for e in mine if e.lane == "compute")
        comm = sorted((e.start_s, e.end_s) for e in mine if e.lane == "comm")
        for a, b in uncovered(comp, 0.0, span):
            covered = sorted((max(a, s), min(b, t)) for s, t in comm if t > a and s < b)
            for s, t in covered:  # communication nothing hides
                gaps.append((d, "exposed communication", s, t))
            for s, t in uncovered(covered, a, b):
                for k, (w0, w1) in windows.items():
                    lo, hi = max(s, w0), min(t, w1)
                    if hi > lo:
                        gaps.append((d, "pipeline bubble" if k in pipelined else "other idle", lo, hi))
    gap_rows = [{"row": _row(d, "compute"), "device": d, "category": what, "t0": s * scale, "t1": t * scale,
                 "duration": fmt_time(t - s), "start": fmt_time(s)} for d, what, s, t in gaps if t - s > span * 1e-6]
    step_rows = [{"t": w0 * scale, "label": f"step {k + 1}"} for k, (w0, _) in sorted(windows.items())]
    return pd.DataFrame(rows), pd.DataFrame(gap_rows), pd.DataFrame(step_rows), unit, note


def timeline_chart(trace: Trace, *, stage_of: dict[int, int] | None = None, title: str = "",
                   height_per_row: int = 26, max_events: int = MAX_EVENTS) -> alt.LayerChart:
    """The interactive timeline of `trace` (see the module docstring). The chart's `note` (in its
    description) says when only the first steps are drawn."""
    ev, gaps, steps, unit, note = timeline_frame(trace, stage_of, max_events)
    order = [_row(d, lane) for d in range(trace.n_devices) for lane in ("compute", "comm")]
    present = list(dict.fromkeys(ev["category"])) if len(ev) else []
    cats = [c for c in PHASE_COLORS if c in present and c != "idle"] + list(GAP_COLORS)
    colors = [PHASE_COLORS.get(c) or GAP_COLORS[c] for c in cats]
    color = alt.Color("category:N", scale=alt.Scale(domain=cats, range=colors),
                      legend=alt.Legend(title=None, orient="top", columns=3))  # fits 1024 px
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=220))
    zoom = alt.selection_interval(bind="scales", encodings=["x"], name="zoom")
    mbs = sorted(m for m in set(ev["micro-batch"]) if m >= 0) if len(ev) else []
    pick = alt.selection_point(fields=["micro-batch"], on="click", clear="dblclick", name="mb",
                               bind=alt.binding_select(options=[None, *mbs], labels=["all", *map(str, mbs)],
                                                       name="highlight micro-batch ")) if mbs else None  # none: nothing to pick
    x = alt.X("t0:Q", title=f"simulated time ({unit})")
    tips = ["device:O", "lane:N", "op:N", "category:N", "kind:N", "micro-batch:O", "stage:N", "step:O",
            "bytes:N", "FLOPs:N", "start:N", "duration:N"]
    if len(ev) and (ev["attempt"] > 0).any():
        tips.append("attempt:O")
    bars = alt.Chart(ev).mark_bar(height={"band": 0.8}, stroke="white", strokeWidth=0.3).encode(
        x=x, x2="t1:Q", y=y, color=color, tooltip=tips,
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.18)) if mbs else alt.value(1.0))
    bars = bars.add_params(zoom, pick) if mbs else bars.add_params(zoom)
    layers = []
    if len(gaps):
        layers.append(alt.Chart(gaps).mark_bar(height={"band": 0.8}).encode(
            x="t0:Q", x2="t1:Q", y=y, color=color,
            tooltip=[alt.Tooltip("category:N", title="what"), "device:O", "start:N", "duration:N"]))
    layers.append(bars)
    if len(steps) > 1:
        rules = alt.Chart(steps).mark_rule(color="#333333", strokeDash=[4, 3], strokeWidth=1.5).encode(
            x="t:Q", tooltip=[alt.Tooltip("label:N", title="boundary")])
        labels = alt.Chart(steps).mark_text(align="left", dx=3, dy=-4, fontSize=FONT - 1, color="#333333").encode(
            x="t:Q", y=alt.value(0), text="label:N")
        layers += [rules, labels]
    rows = len(order)
    chart = alt.layer(*layers).properties(
        height=max(160, rows * height_per_row), width="container",
        title=alt.TitleParams(title or trace.name or "timeline", subtitle=note or alt.Undefined, anchor="start"),
        description=note or "timeline")
    return chart


def stage_map(cfg) -> dict[int, int] | None:
    """Device -> pipeline stage of a resolved TrainConfig on the (pp, dp, tp) mesh, tensor fastest
    (None without a pipeline): the `stage` the timeline's tooltip shows."""
    if cfg.pp <= 1:
        return None
    per_stage = cfg.devices // cfg.pp
    return {d: d // per_stage for d in range(cfg.devices)}


def styled(chart, font: int = FONT):
    """Font sizes for every text of a chart (larger in presentation mode)."""
    return (chart.configure_axis(labelFontSize=font, titleFontSize=font)
            .configure_legend(labelFontSize=font, titleFontSize=font)
            .configure_title(fontSize=font + 2, subtitleFontSize=font).configure_view(strokeWidth=0)
            .properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding")))  # axes and legend inside the width


def step_parts_table(trace: Trace) -> pd.DataFrame:
    """The five parts of the step (Trace.step_breakdown), as a table for the page."""
    parts = trace.step_breakdown()
    return pd.DataFrame({"part": [STEP_PART_LABELS[k] for k in parts], "share": list(parts.values()),
                         "time per device and step": [fmt_time(v * trace.step_time_s) for v in parts.values()]})


# ---- scale explorer ------------------------------------------------------------------------------
def aggregate_trace(trace: Trace, max_events: int = MAX_EVENTS) -> tuple[Trace, str]:
    """`trace` unchanged when it has at most `max_events` events; otherwise one bar per run of
    consecutive ops of one micro-batch on a lane, read from the trace's columns
    (`simulator.trace_runs.aggregate_runs`). Returns (trace, note) saying what is drawn."""
    return aggregate_runs(trace, max_events)


def memory_components_spec(parts: dict[str, float], capacity_bytes: float, title: str = "") -> dict:
    """One stacked bar of bytes per component (GB, 1e9 bytes) with the device capacity as a rule;
    hover a part for its bytes and share. A Vega-Lite spec (dict) for `st.vega_lite_chart`: built
    without Altair's schema validation, so a page rerun stays fast."""
    total = sum(parts.values()) or 1.0
    rows = [{"component": k, "GB": v / 1e9, "bytes": fmt_bytes(v), "share": f"{v / total:.1%}", "order": i,
             "device": "per GPU"} for i, (k, v) in enumerate(parts.items()) if v > 0]
    cap = {"GB": capacity_bytes / 1e9, "label": f"capacity {capacity_bytes / 1e9:.1f} GB"}
    return {
        "title": title or None, "height": 110, "width": "container",
        "autosize": {"type": "fit-x", "contains": "padding"},  # axis and legend inside the column
        "layer": [
            {"data": {"values": rows}, "mark": "bar",
             "encoding": {"x": {"aggregate": "sum", "field": "GB", "type": "quantitative",
                                "title": "GB per GPU (1e9 bytes)"},
                          "y": {"field": "device", "type": "nominal", "title": None},
                          "color": {"field": "component", "type": "nominal", "sort": list(parts),
                                    "legend": {"orient": "bottom", "direction": "vertical", "title": None}},
                          "order": {"field": "order", "type": "quantitative"},
                          "tooltip": [{"field": "component", "type": "nominal"}, {"field": "bytes", "type": "nominal"},
                                      {"field": "GB", "type": "quantitative", "format": ".2f"},
                                      {"field": "share", "type": "nominal"}]}},
            {"data": {"values": [cap]}, "mark": {"type": "rule", "color": "#E45756", "strokeWidth": 2,
                                                 "strokeDash": [5, 3]},
             "encoding": {"x": {"field": "GB", "type": "quantitative"},
                          "tooltip": [{"field": "label", "type": "nominal"}]}},
            {"data": {"values": [cap]}, "mark": {"type": "text", "align": "right", "dx": -4, "dy": -28,
                                                 "color": "#E45756"},
             "encoding": {"x": {"field": "GB", "type": "quantitative"}, "text": {"field": "label", "type": "nominal"}}},
        ],
        "config": {"axis": {"labelFontSize": FONT, "titleFontSize": FONT},
                   "legend": {"labelFontSize": FONT}, "view": {"strokeWidth": 0}},
    }


def bytes_bars(values, *, x_title: str = "rank", y_title: str = "bytes sent") -> alt.Chart:
    """One bar per entry of `values` (bytes), the axis in a readable unit (never 20,000,000)."""
    unit, scale = _bytes_unit(max(values, default=0))
    df = pd.DataFrame({"x": range(len(values)), "y": [v / scale for v in values], "size": [fmt_bytes(v) for v in values]})
    return alt.Chart(df).mark_bar(color=PHASE_COLORS["comm"]).encode(
        x=alt.X("x:O", title=x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("y:Q", title=f"{y_title} ({unit})"),
        tooltip=[alt.Tooltip("x:O", title=x_title), alt.Tooltip("size:N", title=y_title)]).properties(height=260)


def sweep_lines(x_labels, series: dict, *, x_title: str, title: str = "") -> alt.Chart:
    """Time against an ordinal x (world sizes, message sizes as text), one line per algorithm, log time
    axis in a readable unit, hover for the exact time."""
    top = max((max(v) for v in series.values() if len(v)), default=1.0)
    unit, scale = _time_unit(top)
    df = pd.DataFrame([{"x": str(xl), "algorithm": name, "t": t * scale, "time": fmt_time(t)}
                       for name, ts in series.items() for xl, t in zip(x_labels, ts)])
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("x:O", title=x_title, sort=[str(v) for v in x_labels], axis=alt.Axis(labelAngle=0)),
        y=alt.Y("t:Q", title=f"time ({unit}, log scale)", scale=alt.Scale(type="log")),
        color=alt.Color("algorithm:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["algorithm:N", alt.Tooltip("x:O", title=x_title), "time:N"]).properties(
        height=300, width="container", title=title)
