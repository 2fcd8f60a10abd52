"""A collective's plan as the Collectives page draws it: a Vega-Lite spec written as a dict.

- steps_spec(plan)  the steps x ranks grid of `simulator.viz.collective_steps` (the PNG download and
                    the CLI's figure): cell (s, r) is what rank r receives at step s, one sub-cell
                    per incoming transfer coloured by chunk (`viz.chunk_color`), labelled as the
                    figure labels it (`viz.plans.incoming_label`: `c2←1` copied, `+c2←1` reduced
                    into the slot; one label per cell, `3c←1` for three chunks); a reduction has a dark frame (the figure hatches it). Hover a
                    sub-cell for its transfer in words. Labels are drawn while the grid has 8 ranks
                    or fewer; wider grids keep them in the hover.

The browser draws it: building the spec of 16 ranks' ring all-reduce (480 transfers) takes
milliseconds where the matplotlib PNG took seconds (bench/bench_app_sliders.py), so the page
follows its sliders.
"""

from __future__ import annotations

from charts import spec_style

from simulator.collectives.plan import Plan
from simulator.units import fmt_bytes
from simulator.viz.plans import EMPTY_CELL, incoming_label
from simulator.viz.style import chunk_color

LABELLED_RANKS = 8     # a grid this wide or narrower labels its cells (the figure's "rank r" ticks too)
MAX_STEPS = 64         # as the figure: the first 64 steps
ROW_PX = 26            # height of one step's row


def steps_spec(plan: Plan, max_steps: int = MAX_STEPS) -> dict:
    """The steps x ranks grid of `plan` (module docstring); the first `max_steps` steps."""
    steps, n = plan.steps[:max_steps], plan.n
    all_to_all = plan.kind == "all_to_all"
    cells, moves, sent, labels = [], [], [], []
    rows = [f"{s + 1}" + (f" {st.label}" if st.label else "") for s, st in enumerate(steps)]
    for s, step in enumerate(steps):
        sent.append({"x": n + 0.1, "y": rows[s], "text": fmt_bytes(step.nbytes)})
        for r in range(n):
            cells.append({"x": r + 0.04, "x2": r + 0.96, "y": rows[s]})
            ts = [t for t in step.transfers if t.dst == r]
            w = 0.92 / max(len(ts), 1)
            if ts:  # one label for the cell, as the figure's narrow cells: '3c←1', '+15c←15r'
                labels.append({"cx": r + 0.5, "y": rows[s], "label": incoming_label(ts, all_to_all)})
            for k, t in enumerate(ts):
                x = r + 0.04 + k * w
                moves.append({"x": x, "x2": x + w, "y": rows[s],
                              "chunk": f"chunk {t.dst_chunk}", "color": chunk_color(t.dst_chunk, plan.n_chunks),
                              "reduce": t.reduce, "step": s + 1,
                              "what": f"step {s + 1}: rank {r} {'adds' if t.reduce else 'copies'} chunk "
                                      f"{t.src_chunk} of rank {t.src} into its slot {t.dst_chunk} ({fmt_bytes(t.nbytes)})"})
    more = f" (first {max_steps} of {len(plan.steps)} steps)" if len(plan.steps) > max_steps else ""
    big = max(plan.bytes_sent_per_rank(), default=0)
    x = {"field": "x", "type": "quantitative", "scale": {"domain": [0, n + 0.9], "nice": False}, "title": None,
         "axis": {"values": [r + 0.5 for r in range(n)], "orient": "top", "grid": False, "domain": False, "ticks": False,
                  "labelExpr": ("'rank ' + " if n <= LABELLED_RANKS else "") + "floor(datum.value)"}}
    y = {"field": "y", "type": "ordinal", "title": "step", "sort": rows, "scale": {"paddingInner": 0.12},
         "axis": {"domain": False, "ticks": False, "labelLimit": 260}}
    layers = [
        {"data": {"values": cells}, "mark": {"type": "rect", "color": EMPTY_CELL},
         "encoding": {"x": x, "x2": {"field": "x2"}, "y": y}},
        {"data": {"values": moves},
         "mark": {"type": "rect", "strokeWidth": 1},
         "encoding": {"x": {"field": "x", "type": "quantitative"}, "x2": {"field": "x2"},
                      "y": {"field": "y", "type": "ordinal", "sort": rows},
                      "color": {"field": "color", "type": "nominal", "scale": None},
                      "stroke": {"condition": {"test": "datum.reduce", "value": "#222222"}, "value": "white"},
                      "strokeWidth": {"condition": {"test": "datum.reduce", "value": 2.5}, "value": 1},
                      "tooltip": [{"field": "what", "type": "nominal", "title": "transfer"},
                                  {"field": "chunk", "type": "nominal"}]}},
        {"data": {"values": sent}, "mark": {"type": "text", "align": "left", "color": "#555555"},
         "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "ordinal", "sort": rows},
                      "text": {"field": "text"}}},
    ]
    if n <= LABELLED_RANKS:
        layers.append({"data": {"values": labels}, "mark": {"type": "text", "color": "black"},
                       "encoding": {"x": {"field": "cx", "type": "quantitative"},
                                    "y": {"field": "y", "type": "ordinal", "sort": rows}, "text": {"field": "label"}}})
    return {
        "title": {"text": f"{plan.algo} {plan.kind} on {n} ranks · {fmt_bytes(plan.nbytes)} · {len(plan.steps)} steps · "
                          f"max {fmt_bytes(big)} sent per rank{more}",
                  "subtitle": "dark frame: reduced into the slot · white: copied · right: bytes sent per step"},
        "width": "container", "height": max(ROW_PX * len(steps), 60), "layer": layers,
        **spec_style(),
    }
