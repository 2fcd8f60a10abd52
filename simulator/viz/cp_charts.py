"""Context parallelism drawn: who holds which tokens, and the ring steps.

ring_chart: top, the sequence as 2 cp chunks coloured by the device that holds them (the
load-balanced causal split: device i holds chunks i and 2cp-1-i); below, a grid of ring steps
(columns) x devices (rows): the cell is coloured by the device whose K/V block is being scored
and labelled with the block's chunks and the unmasked (query, key) pairs of that step.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..parallel.cp_split import chunk_positions, ring_steps
from .style import device_color, new_figure


def ring_chart(seq_len: int, cp: int) -> Figure:
    """Token ownership and the cp x cp grid of ring steps (see the module docstring)."""
    pos = chunk_positions(seq_len, cp, "ring")
    fig = new_figure(min(2.5 + 1.6 * cp, 16.0), 1.6 + 0.6 * cp)
    top, grid = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, cp]})
    size = seq_len // (2 * cp)
    for d, ps in enumerate(pos):
        for p in ps[::size]:
            c = p // size
            top.add_patch(Rectangle((c, 0), 0.96, 1, facecolor=device_color(d), edgecolor="white"))
            top.text(c + 0.48, 0.5, f"c{c}\nd{d}", ha="center", va="center", fontsize=7, color="white")
    top.set_xlim(0, 2 * cp)
    top.set_ylim(0, 1)
    top.axis("off")
    top.set_title(f"{seq_len} tokens in {2 * cp} chunks: device i holds chunks i and {2 * cp - 1}-i", fontsize=9)
    full = max(r["pairs"] for r in ring_steps(seq_len, cp)) or 1
    for r in ring_steps(seq_len, cp):
        x, y = r["step"], r["device"]
        grid.add_patch(Rectangle((x + 0.04, y + 0.06), 0.92, 0.88, facecolor=device_color(r["kv_of"]),
                                 alpha=0.25 + 0.75 * r["pairs"] / full, edgecolor="none", gid="ring-step"))
        grid.text(x + 0.5, y + 0.5, f"K/V of d{r['kv_of']} ({r['keys']})\n{r['pairs']} pairs", ha="center",
                  va="center", fontsize=7)
    grid.set_xlim(0, cp)
    grid.set_ylim(cp, 0)
    grid.set_xticks([s + 0.5 for s in range(cp)], [f"step {s}" for s in range(cp)])
    grid.set_yticks([d + 0.5 for d in range(cp)], [f"device {d} ({'+'.join(f'c{p // size}' for p in pos[d][::size])})"
                                                   for d in range(cp)])
    grid.tick_params(length=0, labelsize=8)
    for side in grid.spines.values():
        side.set_visible(False)
    grid.set_title("ring steps: each device scores its queries against the block it holds, then passes it on",
                   fontsize=9)
    return fig
