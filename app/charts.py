"""Interactive charts (Altair / Vega-Lite, which Streamlit ships): built from library objects, no
Streamlit calls here, so pages and lessons can reuse them. matplotlib stays for PNG downloads.

- timeline_chart(trace)        Gantt of a Trace: hover an event for its details, drag to pan and
                               scroll to zoom the time axis, click a bar (or pick in the menu) to
                               highlight one micro-batch's path through the stages, step boundaries
                               as rules; idle time drawn as what the step accounting calls it.
- aggregate_trace(trace)       a large trace drawn as runs of one micro-batch per lane (and a note).
- memory_components_spec()     bytes per memory component per GPU against the capacity (a spec).
- loss_spec()                  loss per step of a run beside one device's (a spec).

The collective player's charts live in player_charts.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.trace import STEP_PART_LABELS, Trace, step_windows, uncovered
from simulator.trace_runs import aggregate_runs
from simulator.units import fmt_bytes, fmt_time
from simulator.viz import GAP_COLORS, PHASE_COLORS
from simulator.viz.style import ACTION_COLORS

if TYPE_CHECKING:  # altair and pandas are imported by the functions that use them (a spec needs neither)
    import altair as alt
    import pandas as pd

MAX_EVENTS = 6000  # beyond this, the timeline shows the first steps only (the browser stays fluid)
LANE_NAMES = {"compute": "compute", "comm": "comm"}
FONT, PRESENT_FONT = 13, 17  # px: every chart's text; in presentation mode (ui.chart_font)


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
    """(events, gaps, steps, unit, note): the rows the timeline draws (lists of dicts).
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
    return rows, gap_rows, step_rows, unit, note


def _tip(shorthand: str) -> dict:
    field, kind = shorthand.rsplit(":", 1)
    return {"field": field, "type": {"N": "nominal", "O": "ordinal", "Q": "quantitative"}[kind]}


def timeline_chart(trace: Trace, *, stage_of: dict[int, int] | None = None, title: str = "",
                   height_per_row: int = 26, max_events: int = MAX_EVENTS) -> dict:
    """The interactive timeline of `trace` (see the module docstring) as a Vega-Lite spec (a dict,
    fonts from `spec_style`, which ui.interactive sets for the page), built directly rather than
    through Altair: a page rerun builds it in milliseconds. Its `description` (and subtitle) says when only the first steps are drawn."""
    ev, gaps, steps, unit, note = timeline_frame(trace, stage_of, max_events)
    order = [_row(d, lane) for d in range(trace.n_devices) for lane in ("compute", "comm")]
    present = {r["category"] for r in ev}
    cats = [c for c in PHASE_COLORS if c in present and c != "idle"] + list(GAP_COLORS)
    color = {"field": "category", "type": "nominal",
             "scale": {"domain": cats, "range": [PHASE_COLORS.get(c) or GAP_COLORS[c] for c in cats]},
             "legend": {"title": None, "orient": "top", "columns": 3}}  # fits 1024 px
    y = {"field": "row", "type": "nominal", "sort": order, "title": None, "axis": {"labelLimit": 220}}
    x = {"field": "t0", "type": "quantitative", "title": f"simulated time ({unit})"}
    mbs = sorted({r["micro-batch"] for r in ev} - {-1})
    params = [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]
    if mbs:  # none: nothing to pick
        params.append({"name": "mb", "select": {"type": "point", "fields": ["micro-batch"], "on": "click",
                                                "clear": "dblclick"},
                       "bind": {"input": "select", "options": [None, *mbs], "labels": ["all", *map(str, mbs)],
                                "name": "highlight micro-batch "}})
    tips = ["device:O", "lane:N", "op:N", "category:N", "kind:N", "micro-batch:O", "stage:N", "step:O",
            "bytes:N", "FLOPs:N", "start:N", "duration:N"]
    if any(r["attempt"] > 0 for r in ev):
        tips.append("attempt:O")
    band = {"type": "bar", "height": {"band": 0.8}}
    bars = {"data": {"values": ev}, "mark": {**band, "stroke": "white", "strokeWidth": 0.3},
            "params": params,
            "encoding": {"x": x, "x2": {"field": "t1"}, "y": y, "color": color, "tooltip": [_tip(t) for t in tips],
                         "opacity": ({"condition": {"param": "mb", "value": 1.0}, "value": 0.18} if mbs
                                     else {"value": 1.0})}}
    layers = []
    if len(gaps):
        layers.append({"data": {"values": gaps}, "mark": band,
                       "encoding": {"x": x, "x2": {"field": "t1"}, "y": y, "color": color,
                                    "tooltip": [{**_tip("category:N"), "title": "what"},
                                                *map(_tip, ("device:O", "start:N", "duration:N"))]}})
    layers.append(bars)
    if len(steps) > 1:
        data = {"values": steps}
        layers.append({"data": data, "mark": {"type": "rule", "color": "#333333", "strokeDash": [4, 3],
                                              "strokeWidth": 1.5},
                       "encoding": {"x": {"field": "t", "type": "quantitative"},
                                    "tooltip": [{**_tip("label:N"), "title": "boundary"}]}})
        layers.append({"data": data, "mark": {"type": "text", "align": "left", "dx": 3, "dy": -4,
                                              "color": "#333333"},
                       "encoding": {"x": {"field": "t", "type": "quantitative"}, "y": {"value": 0},
                                    "text": {"field": "label", "type": "nominal"}}})
    heading = {"text": title or trace.name or "timeline", "anchor": "start"}
    if note:
        heading["subtitle"] = note
    return {"height": max(160, len(order) * height_per_row), "width": "container", "title": heading,
            "description": note or "timeline", "layer": layers, **spec_style()}


def spec_style(font: int = FONT) -> dict:
    """The fonts and layout of every chart (`styled` applies them to an Altair chart; ui.interactive
    to a spec written as a dict): axes, legend (labels never cut) and title at `font` px, text marks
    1 px smaller, the axes and legend inside the page's width."""
    return {"autosize": {"type": "fit-x", "contains": "padding"},
            "config": {"axis": {"labelFontSize": font, "titleFontSize": font},
                       "legend": {"labelFontSize": font, "titleFontSize": font, "labelLimit": 0},
                       "title": {"fontSize": font + 2, "subtitleFontSize": font}, "text": {"fontSize": font - 1},
                       "view": {"strokeWidth": 0}}}


def stage_map(cfg) -> dict[int, int] | None:
    """Device -> pipeline stage of a resolved TrainConfig on the (pp, dp, tp) mesh, tensor fastest
    (None without a pipeline): the `stage` the timeline's tooltip shows."""
    if cfg.pp <= 1:
        return None
    per_stage = cfg.devices // cfg.pp
    return {d: d // per_stage for d in range(cfg.devices)}


def styled(chart, font: int = FONT):
    """Font sizes for every text of a chart (larger in presentation mode)."""
    import altair as alt

    style = spec_style(font)  # axes and legend inside the width
    cfg = style["config"]  # text marks keep their own sizes (the player's cells are sized to them)
    return (chart.configure_axis(**cfg["axis"]).configure_legend(**cfg["legend"]).configure_title(**cfg["title"])
            .configure_view(**cfg["view"]).properties(autosize=alt.AutoSizeParams(**style["autosize"])))


def step_parts_table(trace: Trace) -> pd.DataFrame:
    """The five parts of the step (Trace.step_breakdown), as a table for the page."""
    import pandas as pd

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
        **spec_style(),
    }


def loss_spec(series: dict[str, list[float]]) -> dict:
    """Loss per step, one line per entry of `series` (name -> losses, step 1 first): the first solid,
    the others dashed and drawn over it with points, so two curves that coincide (a parallel run and
    its one-device reference) stay visible as two. A Vega-Lite spec (dict) for `st.vega_lite_chart`:
    no Altair, so building it costs each session next to nothing (docs/app-performance.md)."""
    names = list(series)
    rows = [{"step": i + 1, "run": name, "loss": v, "value": f"{v:.6g}"}
            for name, values in series.items() for i, v in enumerate(values)]
    return {
        "data": {"values": rows}, "height": 300, "width": "container",
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": {"field": "step", "type": "quantitative", "title": "step", "axis": {"tickMinStep": 1, "format": "d"}},
            "y": {"field": "loss", "type": "quantitative", "title": "loss", "scale": {"zero": False}},
            "color": {"field": "run", "type": "nominal", "sort": names, "legend": {"orient": "top", "title": None}},
            "strokeDash": {"field": "run", "type": "nominal", "sort": names, "legend": None,
                           "scale": {"domain": names, "range": [[1, 0]] + [[6, 4]] * (len(names) - 1)}},
            "order": {"field": "run", "type": "nominal", "sort": names},
            "tooltip": [{"field": "run", "type": "nominal"}, {"field": "step", "type": "quantitative"},
                        {"field": "value", "type": "nominal", "title": "loss"}]},
        **spec_style(),
    }


def bytes_bars(values, *, x_title: str = "rank", y_title: str = "bytes sent") -> alt.Chart:
    """One bar per entry of `values` (bytes), the axis in a readable unit (never 20,000,000)."""
    import altair as alt
    import pandas as pd

    unit, scale = _bytes_unit(max(values, default=0))
    df = pd.DataFrame({"x": range(len(values)), "y": [v / scale for v in values], "size": [fmt_bytes(v) for v in values]})
    return alt.Chart(df).mark_bar(color=PHASE_COLORS["comm"]).encode(
        x=alt.X("x:O", title=x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("y:Q", title=f"{y_title} ({unit})"),
        tooltip=[alt.Tooltip("x:O", title=x_title), alt.Tooltip("size:N", title=y_title)]).properties(height=260)


def sweep_lines(x_labels, series: dict, *, x_title: str, title: str = "") -> alt.Chart:
    """Time against an ordinal x (world sizes, message sizes as text), one line per algorithm, log time
    axis in a readable unit, hover for the exact time."""
    import altair as alt
    import pandas as pd

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


# ---- pipeline schedules --------------------------------------------------------------------------
ACTION_NAMES = {"F": "F forward", "B": "B input gradient", "BW": "B full backward", "W": "W weight gradient"}


def schedule_compare_spec(results) -> dict:
    """Several timed schedules (SimResults) stacked on one time axis, one row per schedule and stage:
    the Vega-Lite spec (a dict, built without Altair, so a slider move redraws in milliseconds).
    The lighter bars are the odd chunks of an interleaved stage; grey behind is idle (the bubble)."""
    rows, idle, order = [], [], []
    for r in results:
        s = r.schedule
        for d, line in enumerate(r.timeline):
            row = f"{s.name} · stage {d}"
            order.append(row)
            idle.append({"row": row, "t0": 0.0, "t1": r.makespan})
            rows += [{"row": row, "t0": t0, "t1": t1, "what": ACTION_NAMES[a.kind], "action": repr(a),
                      "schedule": s.name, "stage": d, "odd": a.chunk % 2, "start": f"{t0:.4g}", "end": f"{t1:.4g}"}
                     for a, t0, t1 in line]
    kinds = [k for k in ACTION_NAMES if any(x["what"] == ACTION_NAMES[k] for x in rows)]
    y = {"field": "row", "type": "nominal", "sort": order, "title": None,
         "axis": {"labelLimit": 260}}
    x = {"field": "t0", "type": "quantitative", "title": "time (ms: the unit of the F, B, W times)"}
    return {
        "height": max(160, 16 * len(order)), "width": "container",
        "layer": [
            {"data": {"values": idle}, "mark": {"type": "bar", "color": PHASE_COLORS["idle"], "height": {"band": 0.85}},
             "encoding": {"x": x, "x2": {"field": "t1"}, "y": y}},
            {"data": {"values": rows}, "mark": {"type": "bar", "stroke": "white", "strokeWidth": 0.4,
                                                 "height": {"band": 0.85}},
             "encoding": {"x": x, "x2": {"field": "t1"}, "y": y,
                          "color": {"field": "what", "type": "nominal", "title": None,
                                    "scale": {"domain": [ACTION_NAMES[k] for k in kinds],
                                              "range": [ACTION_COLORS[k] for k in kinds]},
                                    "legend": {"orient": "top", "columns": 2}},  # fits 1024 px
                          "opacity": {"condition": {"test": "datum.odd == 1", "value": 0.62}, "value": 1.0},
                          "tooltip": [{"field": "schedule"}, {"field": "stage"}, {"field": "action"},
                                      {"field": "what"}, {"field": "start"}, {"field": "end"}]}},
        ],
        **spec_style(),
    }
