"""Shared look of every parasim figure: one colour per phase, one per device, units on axes.

Figures are built with `matplotlib.figure.Figure` directly (no pyplot, no global figure
registry, no GUI backend), so they are safe in a web server and never call `plt.show`.
`png_bytes(fig)` renders one with the Agg canvas for a download button.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib is imported by the functions that draw (the colours need none of it)
    from matplotlib.figure import Figure

# Phase colours, the same everywhere in parasim. Every two categories a timeline can show (these and
# GAP_COLORS) stay apart for normal vision and under simulated protanopia, deuteranopia and
# tritanopia (Machado et al. 2009): tests/test_palette.py measures it (CIELAB distance >= 10).
PHASE_COLORS = {
    "forward": "#4C78A8",    # blue
    "backward": "#F58518",   # orange
    "wgrad": "#8CD17D",      # light green
    "optimizer": "#B279A2",  # purple
    "comm": "#E45756",       # red
    "other": "#79706E",      # warm grey
    "lost": "#6B3F3A",       # dark red-brown: work of a failed attempt, thrown away (faults)
    "failure": "#1A1A1A",    # black: the instruction where a device failed
    "recovery": "#17BECF",   # cyan: restart and restore
    "idle": "#EDEDED",       # light grey background: every gap left showing is idle time
}
# The interactive timeline draws the compute lane's gaps as what the step accounting calls them
GAP_COLORS = {"exposed communication": "#F2A7A6",  # light red: communication nothing hides
              "pipeline bubble": "#D9D9D9",        # grey
              "other idle": "#FFF2AE"}             # pale yellow: waiting outside a pipeline
PHASE_LETTERS = {"forward": "F", "backward": "B", "wgrad": "W", "optimizer": "O", "comm": "", "other": "",
                 "lost": "", "failure": "✕", "recovery": "R"}
FAULT_PHASES = ("lost", "failure", "recovery")
REPLAY_HATCH = "////"  # events of a replayed step (attempt > 0) are hatched

# Pipeline actions use the phase colours: BW (fused backward) is a backward.
ACTION_COLORS = {"F": PHASE_COLORS["forward"], "B": PHASE_COLORS["backward"],
                 "BW": PHASE_COLORS["backward"], "W": PHASE_COLORS["wgrad"]}

# Memory categories, bottom to top of a stack.
MEMORY_CATEGORIES = ("param", "grad", "opt", "states", "act", "other")
MEMORY_COLORS = {"param": "#4C78A8", "grad": "#F58518", "opt": "#B279A2", "states": "#7B6BB0",
                 "act": "#54A24B", "other": "#BAB0AC"}
MEMORY_LABELS = {"param": "parameters", "grad": "gradients", "opt": "optimizer state",
                 "states": "model states (params + grads + optimizer)", "act": "activations", "other": "other"}

_DEVICE_PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#EECA3B", "#B279A2",
                   "#FF9DA6", "#9D755D", "#BAB0AC", "#1F3A93", "#A0522D", "#2E8B57", "#8B008B",
                   "#008B8B", "#B8860B")
OOM_COLOR = "#D62728"


def device_color(rank: int) -> str:
    """A stable colour per device rank (cycles after 16)."""
    return _DEVICE_PALETTE[rank % len(_DEVICE_PALETTE)]


def chunk_color(chunk: int, n_chunks: int) -> str:
    """Chunk colours follow the device palette: chunk c 'belongs' to rank c in ring algorithms."""
    return device_color(chunk)


def memory_category(key: str) -> str:
    """Map a runtime's memory key (params, gradients, optimizer, activations, ...) to a category."""
    k = key.lower()
    for cat, prefixes in (("param", ("param", "weight")), ("grad", ("grad",)),
                          ("opt", ("opt", "adam", "moment")), ("states", ("model_state", "states")),
                          ("act", ("act", "stash", "input", "logits"))):
        if k.startswith(prefixes):
            return cat
    return "other"


def time_unit(span_s: float) -> tuple[str, float]:
    """(unit name, scale) so that span_s * scale reads between 1 and 1000."""
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if span_s * scale >= 1.0:
            return unit, scale
    return "ns", 1e9


def byte_unit(nbytes: float) -> tuple[str, float]:
    for unit, scale in (("TB", 1e-12), ("GB", 1e-9), ("MB", 1e-6), ("kB", 1e-3)):
        if nbytes * scale >= 1.0:
            return unit, scale
    return "B", 1.0


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def style_axes(ax) -> None:
    """Light frame: no top/right spines, faint vertical grid behind the data."""
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=9)


def message_figure(text: str, width: float = 6.0, height: float = 1.5) -> Figure:
    """A figure that says why there is nothing to draw."""
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11, color="#555555", transform=ax.transAxes)
    return fig


def png_bytes(fig: Figure, dpi: int = 150) -> bytes:
    """PNG rendering of `fig` (for downloads); uses the Agg canvas, no display needed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
