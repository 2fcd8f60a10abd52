"""What a figure shows, as plain numbers and texts (read back from a drawn matplotlib Figure).

One home for reading a figure's data: the lessons' figure files (lessons/make_figures.py stores
it next to each PNG and `--check` compares it) and the grader (a lesson item where the student
draws a plot of their own run returns the Figure; the sandbox sends this data, never pixels).
Every line's points, every bar's and block's rectangle (x, y, width, height), every title,
label, legend entry and text; numbers to 10 significant digits, NaN as None.
"""

from __future__ import annotations

import math

from matplotlib.patches import Rectangle


def _num(v) -> float | None:
    v = float(v)
    return None if math.isnan(v) else float(f"{v:.10g}")


def _nums(values) -> list:
    out = []
    for v in values:
        try:
            out.append(_num(v))
        except (TypeError, ValueError):
            out.append(str(v))
    return out


def _collection_rects(ax) -> list:
    """The boxes of the axes' collections (`broken_barh` lanes of a timeline, `fill_between`
    areas): each path's extent (x, y, width, height) in data coordinates."""
    out = []
    for coll in ax.collections:
        for path in coll.get_paths():
            box = path.get_extents()
            out.append(_nums((box.x0, box.y0, box.width, box.height)))
    return out


def figure_data(fig, collections: bool = False) -> dict:
    """What a figure shows, as numbers and texts (see the module docstring). `collections`: the
    rectangles also hold the boxes of collections (a timeline's bars are `broken_barh` collections,
    not patches): what the grader reads of a student's plot (the lessons' stored figure files
    predate it and leave them out)."""
    axes = []
    for ax in fig.axes:
        legend = ax.get_legend()
        extra = _collection_rects(ax) if collections else []
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "lines": [{"label": ln.get_label(), "x": _nums(ln.get_xdata()), "y": _nums(ln.get_ydata())}
                               for ln in ax.get_lines()],
                     "rects": [_nums((p.get_x(), p.get_y(), p.get_width(), p.get_height())) for p in ax.patches
                               if isinstance(p, Rectangle)] + extra,
                     "texts": [t.get_text() for t in ax.texts],
                     "legend": [t.get_text() for t in legend.get_texts()] if legend else []})
    suptitle = getattr(fig, "_suptitle", None)
    return {"suptitle": suptitle.get_text() if suptitle else "", "axes": axes}


def same(a, b, rtol: float = 1e-6) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rtol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, (int, float)):
        return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12)
    return a == b
