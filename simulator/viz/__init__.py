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

from .cost_charts import goodput_chart, memory_breakdown, sweep_chart
from .cp_charts import ring_chart
from .plans import collective_steps, layout_grid
from .schedule_charts import schedule_chart, schedule_compare, schedule_trace
from .style import GAP_COLORS, MEMORY_COLORS, PHASE_COLORS, device_color, png_bytes
from .timelines import device_breakdown, memory_over_time, timeline

__all__ = ["ring_chart", "timeline", "device_breakdown", "memory_over_time", "collective_steps", "layout_grid", "schedule_chart",
           "schedule_compare", "schedule_trace", "memory_breakdown", "sweep_chart", "goodput_chart", "png_bytes",
           "PHASE_COLORS", "GAP_COLORS", "MEMORY_COLORS", "device_color"]
