"""Pictures of plans and placements: a collective's steps, a tensor's layout over a mesh.

collective_steps: a grid of steps (rows, top to bottom) x group ranks (columns). The cell (s, r)
shows what rank r receives at step s: one coloured sub-cell per incoming transfer, coloured by
chunk, labelled `c2←1` (chunk 2 from rank 1, overwritten) or `+c2←1` (reduced into the slot); a
cell too narrow for one label per transfer says `+15c←15r` (15 chunks from 15 ranks).

layout_grid: the tensor drawn to scale as its grid of blocks, one per distinct shard: a block one
rank holds has that rank's colour; a block several ranks hold (replicas and partial-sum addends
alike) is grey, labelled with its ranks and the number of copies, with one chip per holding rank
in its colour; a legend maps colours to ranks.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import product
from math import prod
from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..collectives.plan import Plan
from ..layout import Layout
from ..units import fmt_bytes
from .style import chunk_color, device_color, message_figure, new_figure

EMPTY_CELL = "#F3F3F3"


SHOWN_PX = 850    # the step grid is read at about this width (the app's main column in a 1280 px window)
LABEL_PX = 10     # and its labels must be at least this tall there


def incoming_label(ts, all_to_all: bool) -> str:
    """One cell's label: 'c2←1' chunk 2 from rank 1 ('+' reduced into the slot); in an all-to-all,
    whose chunk ids only say (source, destination), '←1'; several transfers: '3c←1' (3 chunks from
    rank 1) or '15c←15r' (15 chunks from 15 ranks)."""
    plus = "+" if any(t.reduce for t in ts) else ""
    if len(ts) == 1:
        return f"←{ts[0].src}" if all_to_all else f"{plus}c{ts[0].dst_chunk}←{ts[0].src}"
    srcs = {t.src for t in ts}
    return f"{plus}{len(ts)}c←{ts[0].src}" if len(srcs) == 1 else f"{plus}{len(ts)}c←{len(srcs)}r"


def collective_steps(plan: Plan, *, width: float | None = None, max_steps: int = 64) -> Figure:
    """Steps x ranks grid of who receives which chunk from whom (first `max_steps` steps). Texts
    grow with the figure so that shown SHOWN_PX wide they are LABEL_PX or more (16 ranks: 13.6 pt
    in a 16-inch figure); a cell too narrow for one label per transfer gets one label for all."""
    if not plan.steps:
        return message_figure(f"{plan.kind} on {plan.n} rank(s) needs no communication")
    steps = plan.steps[:max_steps]
    n = plan.n
    width = width or min(2.2 + 1.1 * n, 16.0)
    pt = max(8.0, LABEL_PX * 72 * width / SHOWN_PX)  # points of a label that reads LABEL_PX when shown
    cell_px = SHOWN_PX / (n + 0.9) * 0.92
    fig = new_figure(width, min(1.4 + max(0.42, 3.2 * pt / 72) * len(steps), 20.0))  # room for two lines
    ax = fig.add_subplot()
    all_to_all = plan.kind == "all_to_all"

    def fits(text: str, px: float) -> bool:  # DejaVu Sans: ~0.75 em a character (arrows wider), and the box's pad
        return max(map(len, text.split("\n"))) * 0.75 * LABEL_PX + 4 <= px

    # one label per cell too wide for it: every cell label breaks before its arrow (alike in the figure)
    cells = [[t for t in step.transfers if t.dst == r] for step in steps for r in range(n)]
    broken = any(not fits(incoming_label(ts, all_to_all), cell_px) for ts in cells if ts)

    def wrap(text: str) -> str:
        return text.replace("←", "\n←") if broken else text

    for s, step in enumerate(steps):
        incoming = defaultdict(list)
        for t in step.transfers:
            incoming[t.dst].append(t)
        for r in range(n):
            ax.add_patch(Rectangle((r + 0.04, s + 0.06), 0.92, 0.88, facecolor=EMPTY_CELL, edgecolor="none"))
            ts = incoming.get(r, [])
            w = 0.92 / max(len(ts), 1)
            each = [wrap(incoming_label([t], all_to_all)) for t in ts]
            one_each = all(fits(x, cell_px / max(len(ts), 1)) for x in each)
            for k, t in enumerate(ts):
                x = r + 0.04 + k * w
                cell = Rectangle((x, s + 0.06), w, 0.88, facecolor=chunk_color(t.dst_chunk, plan.n_chunks),
                                 edgecolor="white", linewidth=0.8, hatch="///" if t.reduce else None,
                                 gid="transfer")
                ax.add_patch(cell)
                if one_each:
                    ax.text(x + w / 2, s + 0.5, each[k], ha="center", va="center", fontsize=pt, color="black",
                            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8), gid="label")
            if ts and not one_each:
                ax.text(r + 0.5, s + 0.5, wrap(incoming_label(ts, all_to_all)), ha="center", va="center", fontsize=pt,
                        color="black", bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85),
                        gid="label")
        ax.text(n + 0.1, s + 0.5, fmt_bytes(step.nbytes), va="center", fontsize=pt * 0.9, color="#555555")
    ax.text(n + 0.1, -0.15, "sent,\nall ranks", va="bottom", fontsize=pt * 0.9, color="#555555")   # the column above
    ax.set_xlim(0, n + 0.9)
    ax.set_ylim(len(steps), 0)
    ax.set_xticks([r + 0.5 for r in range(n)], [f"rank {r}" if n <= 8 else str(r) for r in range(n)], fontsize=pt)
    ax.xaxis.tick_top()
    if n > 8:
        ax.set_xlabel("rank", fontsize=pt)
        ax.xaxis.set_label_position("top")
    ax.set_yticks([s + 0.5 for s in range(len(steps))],
                  [f"{s + 1}" + (f" {st.label}" if st.label else "") for s, st in enumerate(steps)], fontsize=pt)
    ax.set_ylabel("step", fontsize=pt)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    more = f" (first {max_steps} of {len(plan.steps)} steps)" if len(plan.steps) > max_steps else ""
    sent = plan.bytes_sent_per_rank()
    fig.suptitle(f"{plan.algo} {plan.kind} on {n} ranks · {fmt_bytes(plan.nbytes)} · {len(plan.steps)} steps · "
                 f"max {fmt_bytes(max(sent))} sent per rank{more}", fontsize=max(11.0, pt * 1.2), fontweight="bold")
    handles = [Patch(facecolor="white", edgecolor="#666666", hatch="///", label="+ reduce into slot"),
               Patch(facecolor="white", edgecolor="#666666", label="copy into slot")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False, fontsize=pt)
    return fig


def layout_grid(layout: Layout, shape: Sequence[int], *, name: str = "X", width: float = 7.0) -> Figure:
    """The tensor of `shape` as blocks (to scale): one block per distinct shard, coloured by the rank
    holding it, or grey with its copies listed (a chip per holding rank) when replicated; a legend
    maps colours to ranks.

    1-D tensors are one row; for 3-D and higher the leading dimensions are folded into rows."""
    shape = tuple(int(s) for s in shape)
    local = layout.local_shape(shape)  # raises ParasimError when a cut does not divide
    splits = layout.splits
    if layout.ndim == 0:
        return message_figure(f"{name} is a scalar: every device holds it")
    if layout.ndim == 1:
        row_splits, col_splits, H, W = (1,), splits, 1, shape[0]
    else:
        row_splits, col_splits = splits[:-1], splits[-1:]
        H, W = prod(shape[:-1]), shape[-1]
    n_rows, n_cols = prod(row_splits), prod(col_splits)
    aspect = min(max(H / W, 0.25), 2.5)
    fig = new_figure(width, min(max(width * aspect * 0.75 + 1.8, 3.2), 11.0))
    ax = fig.add_subplot()
    bh, bw = 1.0 / n_rows, 1.0 / n_cols
    font = max(8, 13 - len(splits) - n_cols // 4)
    ranks: set[int] = set()
    for block in product(*(range(c) for c in splits)):
        rows_idx = block[:-1] if layout.ndim > 1 else ()
        row = _mixed_radix(rows_idx, row_splits) if layout.ndim > 1 else 0
        col = block[-1]
        holders = layout.devices_holding(block)
        ranks.update(holders)
        x0, y0 = col * bw, row * bh
        one = len(holders) == 1  # a shard on one rank: its colour; a replicated shard: one block, its copies listed
        ax.add_patch(Rectangle((x0, y0), bw, bh, facecolor=device_color(holders[0]) if one else "#EEEEEE",
                               edgecolor="white", linewidth=2.5, alpha=0.9 if one else 1.0, gid="block"))
        text = (f"rank {holders[0]}" if one else
                f"ranks {', '.join(map(str, holders))}" if len(holders) <= 4 else
                f"ranks {holders[0]}..{holders[-1]}") + ("" if one else f"\n{len(holders)} copies")
        ax.text(x0 + bw / 2, y0 + bh * (0.5 if one else 0.35), text, ha="center", va="center", fontsize=font,
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85), gid="holders")
        if not one:  # one chip per copy, in the colour of the rank that holds it
            shown = holders[:8]
            cw = min(bw * 0.8 / len(shown), bh * 0.3)
            cx = x0 + bw / 2 - cw * len(shown) / 2
            for k, r in enumerate(shown):
                ax.add_patch(Rectangle((cx + k * cw, y0 + bh * 0.62), cw * 0.9, min(cw * 0.9, bh * 0.3),
                                       facecolor=device_color(r), edgecolor="white", linewidth=0.5, gid="copy"))
    order = sorted(ranks)
    if len(order) <= 32:  # colour -> rank legend under the drawing
        ax.legend(handles=[Patch(facecolor=device_color(r), label=f"rank {r}") for r in order],
                  loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(8, len(order)), frameon=False,
                  fontsize=9, handlelength=1.2, columnspacing=1.0)
    ax.set_xlim(0, 1)
    ax.set_ylim(1, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    dim_names = [f"dim {i} ({s})" for i, s in enumerate(shape)]
    ax.set_xlabel(f"{dim_names[-1]} · {_cut(col_splits[0])}")
    if layout.ndim > 1:
        ax.set_ylabel(f"{' × '.join(dim_names[:-1])} · {_cut(n_rows)}")
    parts = [f"mesh {layout.mesh!r}", f"block {local}"]
    copies = [a for a in layout.replicated_axes if layout.mesh.axis_size(a) > 1]  # a size-1 axis makes no copy
    if copies:
        parts.append(f"replicated over {', '.join(copies)}: each grey block is one shard, its copies listed")
    if layout.partial:
        parts.append(f"partial sums over {', '.join(layout.partial)} (addends)")
    ax.set_title(" · ".join(parts), fontsize=9, color="#444444")
    fig.suptitle(f"{_cut_notation(layout, name)}  shape {shape}", fontsize=12, fontweight="bold")
    return fig


def _cut_notation(layout: Layout, name: str) -> str:
    """The layout's textbook notation without mesh axes of size 1 (they cut nothing): a strategy
    (2, 1) reads X[I_d0, J], not X[I_d0, J_d1]."""
    size = layout.mesh.axis_size
    kept = [tuple(a for a in axes if size(a) > 1) or None for axes in layout.dims]
    return Layout(layout.mesh, kept, tuple(a for a in layout.partial if size(a) > 1)).notation(name)


def _cut(parts: int) -> str:
    """'not cut', 'cut in 2', ...: the axis label of a dimension cut into `parts` blocks."""
    return "not cut" if parts == 1 else f"cut in {parts}"


def _mixed_radix(idx: Sequence[int], radices: Sequence[int]) -> int:
    v = 0
    for i, r in zip(idx, radices):
        v = v * r + i
    return v
