"""Context parallelism as the Context page draws it: Vega-Lite specs written as dicts.

- ring_spec(seq_len, cp)  `simulator.viz.ring_chart` for the browser (the PNG stays its download):
                          above, the sequence's 2 cp chunks coloured by the device holding them
                          (device i holds chunks i and 2cp-1-i, the load-balanced causal split);
                          below, ring steps (columns) x devices (rows), each cell coloured by the
                          device whose K/V block is scored, paler for fewer unmasked (query, key)
                          pairs, labelled with the block and its pairs (`parallel.cp_split.ring_steps`;
                          beyond 4 devices only "d3" and the number, the rest in the hover).

The browser draws it: the spec of 8 devices builds in milliseconds where the PNG took about a
second to render (bench/bench_app_sliders.py), so the page follows its sliders.
"""

from __future__ import annotations

from charts import spec_style

from simulator.parallel.cp_split import chunk_positions, ring_steps
from simulator.viz.style import device_color

ROW_PX = 34   # one device's row of ring steps: two lines of labels
COMPACT_ABOVE = 4   # more devices than this: cells say only "d3" and the pairs (a 1024 px window's cells)


def ring_spec(seq_len: int, cp: int) -> dict:
    """The chunks and the ring steps of `seq_len` tokens over `cp` devices (module docstring): one
    view, the sequence's row of chunks (each half a step wide) above the devices' rows of steps."""
    pos = chunk_positions(seq_len, cp, "ring")
    size = seq_len // (2 * cp)
    seq_row = f"{seq_len} tokens"
    compact = cp > COMPACT_ABOVE   # narrow cells: the short labels, the rest in the hover
    rows = [f"device {d} ({'+'.join(f'c{p // size}' for p in pos[d][::size])})" for d in range(cp)]
    chunks = [{"x": c / 2 + 0.02, "x2": c / 2 + 0.48, "cx": c / 2 + 0.25, "y": seq_row, "color": device_color(d),
               "opacity": 1.0, "label": f"c{c}" if compact else f"c{c} d{d}", "what": f"chunk {c}, tokens {p}..{p + size - 1}, on device {d}"}
              for d, ps in enumerate(pos) for p in ps[::size] for c in [p // size]]
    steps = ring_steps(seq_len, cp)
    full = max(r["pairs"] for r in steps) or 1
    cells = [{"x": r["step"] + 0.04, "x2": r["step"] + 0.96, "cx": r["step"] + 0.5, "y": rows[r["device"]],
              "color": device_color(r["kv_of"]), "opacity": 0.25 + 0.75 * r["pairs"] / full,
              "label": f"d{r['kv_of']}" if compact else f"K/V of d{r['kv_of']} ({r['keys']})",
              "pairs": f"{r['pairs']}" if compact else f"{r['pairs']} pairs",
              "what": f"step {r['step']}: device {r['device']} scores its queries against the K/V block of device "
                      f"{r['kv_of']} ({r['keys']}): {r['pairs']} unmasked (query, key) pairs"} for r in steps]
    x = {"field": "x", "type": "quantitative", "title": None, "scale": {"domain": [0, cp], "nice": False},
         "axis": {"values": [s + 0.5 for s in range(cp)], "labelExpr": "'step ' + floor(datum.value)", "orient": "top",
                  "grid": False, "domain": False, "ticks": False}}
    y = {"field": "y", "type": "ordinal", "sort": [seq_row, *rows], "title": None, "scale": {"paddingInner": 0.1},
         "axis": {"domain": False, "ticks": False, "labelLimit": 260}}
    text = lambda field, dy: {"mark": {"type": "text", "dy": dy},  # noqa: E731
                              "encoding": {"x": {"field": "cx", "type": "quantitative"},
                                           "y": {"field": "y", "type": "ordinal", "sort": [seq_row, *rows]},
                                           "text": {"field": field}}}
    rect = {"mark": {"type": "rect"},
            "encoding": {"x": x, "x2": {"field": "x2"}, "y": y,
                         "color": {"field": "color", "type": "nominal", "scale": None},
                         "opacity": {"field": "opacity", "type": "quantitative", "scale": None},
                         "tooltip": [{"field": "what", "type": "nominal", "title": "what"}]}}
    return {
        "title": {"text": f"{seq_len} tokens in {2 * cp} chunks: device i holds chunks i and {2 * cp - 1}-i",
                  "subtitle": "ring steps: each device scores its queries against the block it holds, then passes it on"},
        "width": "container", "height": ROW_PX * (cp + 1),
        "layer": [{"data": {"values": chunks + cells}, **rect},
                  {"data": {"values": chunks}, **text("label", 0)},
                  {"data": {"values": cells}, **text("label", -7)},
                  {"data": {"values": cells}, **text("pairs", 7)}],
        **spec_style(),
    }
