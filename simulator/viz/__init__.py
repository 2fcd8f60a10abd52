"""parasim figures (matplotlib): every function returns a `matplotlib.figure.Figure`.

Figures are built without pyplot (no GUI, no global state, never `plt.show`); save one with
`fig.savefig(path)` or get PNG bytes with `png_bytes(fig)`. One colour per phase everywhere:
forward blue, backward orange, weight gradient green, optimizer purple, communication red,
idle light grey (`PHASE_COLORS`); one colour per device rank (`device_color`).

- timeline(trace)            per device a compute lane and a comm lane; title gives the bubble
- device_breakdown(trace)     per device: compute, exposed comm, idle shares; title gives the bubble
- memory_over_time(trace)    bytes per device over the step, stacked by category
- collective_steps(plan)     steps x ranks: which chunk each rank receives from whom
- layout_grid(layout, shape) a tensor's blocks coloured by the devices holding them
- schedule_chart(result)     a timed pipeline schedule (F/B/W), bubble and peak in flight
- schedule_compare(results)  several schedules on one time axis
- schedule_trace(result)     a timed schedule as a Trace (Chrome JSON / CSV export)
- memory_breakdown(bars, capacity_bytes)  stacked memory per GPU against capacity, OOM marked
- sweep_chart(x, series, ...) lines of a quantity against a swept parameter
- goodput_chart(curve, ...)   goodput and its losses against the checkpoint interval
"""

from importlib import import_module

# name -> the module that defines it. Loaded on first use (PEP 562): the colours and
# schedule_trace need no matplotlib, so a page that only builds Vega-Lite specs never imports it.
_HOMES = {"goodput_chart": "cost_charts", "memory_breakdown": "cost_charts", "sweep_chart": "cost_charts",
          "ring_chart": "cp_charts", "collective_steps": "plans", "layout_grid": "plans",
          "schedule_chart": "schedule_charts", "schedule_compare": "schedule_charts",
          "schedule_trace": "schedule_charts", "GAP_COLORS": "style", "MEMORY_COLORS": "style",
          "PHASE_COLORS": "style", "device_color": "style", "png_bytes": "style",
          "device_breakdown": "timelines", "memory_over_time": "timelines", "timeline": "timelines"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_HOMES))


__all__ = list(_HOMES)
