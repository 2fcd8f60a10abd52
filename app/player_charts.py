"""The collective player's charts (Altair), readable up to 16 ranks for every collective:

- buffers_chart(replay, k)  each rank's buffer after step k: one cell per slot, labelled with whose
                            inputs it holds in at most two lines of 5 characters ("Σ r0" / "to 15"); an all-to-all
                            buffer (n·n slots) is drawn as n blocks, block i holding rank i's pieces,
                            labelled with the pieces held ("p3", "all"); hover a cell for its values.
                            `follow`: one chunk framed on every rank (the player follows it).
- chunk_moves(replay, k, j) what step k does to chunk j: its transfers, in words.
- links_chart(replay, k)    bytes on each (sender, receiver) link during step k.

Labels are at least MIN_FONT px: Vega-Lite keeps font sizes when it fits a chart to the page's width.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
from charts import FONT

from simulator.units import fmt_bytes

MIN_FONT = 10      # px: the smallest label the player draws
PLOT_PX = 480      # the narrowest plot the labels must fit (measured: ~490 px in a 1024 px window, sidebar open)
CHAR_EM = 0.55     # width of a character of the bold label font (Source Sans, Streamlit's), in ems, with margin


def _run(ids: list[int], n: int) -> tuple[int, int] | None:
    """(first, last) when `ids` (sorted) are consecutive round a ring of n (14, 15, 0, 1 -> (14, 1))."""
    have = set(ids)
    starts = [a for a in ids if (a - 1) % n not in have]
    if len(starts) == 1 and all((starts[0] + t) % n in have for t in range(len(ids))):
        return starts[0], (starts[0] + len(ids) - 1) % n
    return (ids[0], ids[-1]) if len(starts) == 0 else None  # all n of them


def _lines(prefix: str, ids: list[int], n: int, many: str) -> list[str]:
    """At most two lines of at most 5 characters: 'r3'; 'r3' / 'r11'; 'r12' / 'to 10' (a run, round
    the ring); '8' / 'ranks' (neither)."""
    if len(ids) == 1:
        return [f"{prefix}{ids[0]}"]
    if len(ids) == 2:
        return [f"{prefix}{ids[0]}", f"{prefix}{ids[1]}"]
    run = _run(ids, n)
    return [f"{prefix}{run[0]}", f"to {run[1]}"] if run else [str(len(ids)), many]


def slot_label(kind: str, holds, n: int) -> str:
    """A slot's label, lines joined by newlines: '—' empty, 'r3' one rank's input, 'Σ r0' / 'to 15'
    the sum of ranks 0 to 15's inputs, 'Σ 8' / 'ranks' a sum over 8 ranks that are not a run."""
    if not holds:
        return "—"
    lines = _lines("r", sorted(holds), n, "ranks")
    if kind in ("all_reduce", "reduce", "reduce_scatter") and len(holds) > 1:
        lines[0] = f"Σ {lines[0]}"
    return "\n".join(lines)


def _pieces(js: list[int], n: int) -> str:
    """The pieces of one source a rank holds: '—', 'p3', 'p2' / 'to 5', 'all', '3' / 'pcs'."""
    if not js:
        return "—"
    return "all" if len(js) == n else "\n".join(_lines("p", js, n, "pcs"))


def _values(arr) -> str:
    return "empty" if arr is None else " ".join(f"{v:g}" for v in list(arr.ravel()[:6])) + (
        " …" if arr.size > 6 else "")


def buffers_frame(replay, k: int) -> pd.DataFrame:
    """Rank x slot after step k: what the slot holds (label and tooltip), its values, and whether
    step k wrote it. An all-to-all buffer (slot i·n + j: rank i's piece for rank j) is grouped into
    one row per (rank, source rank i)."""
    from simulator.collectives.player import describe_slot

    n = replay.plan.n
    written = {(t.dst, t.dst_chunk): t for t in replay.plan.steps[k - 1].transfers} if k >= 1 else {}
    blocks = replay.kind == "all_to_all" and replay.plan.n_chunks == n * n
    rows = []
    for r, slots in enumerate(replay.states[k]):
        holds = replay.holds[k][r]
        if blocks:
            for i in range(n):
                js = [j for j in range(n) if holds[i * n + j]]
                ts = [written[(r, i * n + j)] for j in range(n) if (r, i * n + j) in written]
                rows.append({"rank": r, "slot": i, "label": _pieces(js, n), "contributions": len(js),
                             "holds": f"rank {i}'s pieces for ranks {', '.join(map(str, js)) or '(none)'}",
                             "values": " | ".join(_values(slots[i * n + j]) for j in js[:2]) + (" | …" if len(js) > 2 else "")
                             or "empty",
                             "this step": ", ".join(f"p{t.dst_chunk - i * n} <- from rank {t.src}" for t in ts) or "-",
                             "changed": bool(ts)})
            continue
        for j, arr in enumerate(slots):
            t = written.get((r, j))
            rows.append({"rank": r, "slot": j, "label": slot_label(replay.kind, holds[j], n),
                         "contributions": len(holds[j]), "holds": describe_slot(replay.kind, holds[j], n),
                         "values": _values(arr),
                         "this step": "-" if t is None else (f"+= from rank {t.src}" if t.reduce else f"<- from rank {t.src}"),
                         "changed": t is not None})
    return pd.DataFrame(rows)


def label_font(labels, columns: int, top: int = FONT) -> int:
    """The label size (px) that fits the widest label line into a cell of the narrowest plot,
    between MIN_FONT and `top` (the charts' font: larger in presentation mode, ui.chart_font)."""
    widest = max((len(line) for lab in labels for line in lab.split("\n")), default=1)
    return max(MIN_FONT, min(top, int(PLOT_PX / max(columns, 1) / (CHAR_EM * widest))))


def buffers_chart(replay, k: int, follow: int | None = None, font: int = FONT) -> alt.LayerChart:
    """The buffers after step k; `follow`: one slot (chunk) framed in black on every rank, to follow it;
    `font`: the largest label size (ui.chart_font: larger in presentation mode)."""
    df = buffers_frame(replay, k)
    n = replay.plan.n
    columns = int(df["slot"].max()) + 1
    blocks = replay.kind == "all_to_all" and columns == n and replay.plan.n_chunks == n * n
    x_title = "from rank (its pieces in this rank's buffer)" if blocks else "slot (chunk) of the buffer"
    cell = max(24, min(56, 900 // columns))
    lines = int(df["label"].str.count("\n").max()) + 1
    font = label_font(df["label"], columns, font)
    base = alt.Chart(df).encode(
        x=alt.X("slot:O", title=x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("rank:O", title="rank"))
    rect = base.mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("contributions:Q", title="pieces held" if blocks else "ranks' inputs in the slot",
                        scale=alt.Scale(domain=[0, n], scheme="blues"), legend=alt.Legend(orient="top")),
        tooltip=["rank:O", alt.Tooltip("slot:O", title="from rank" if blocks else "slot"), "holds:N", "values:N",
                 "this step:N"])
    ring = base.mark_rect(fill=None, stroke="#E45756", strokeWidth=2.5).transform_filter("datum.changed")
    text = base.mark_text(fontSize=font, fontWeight="bold", lineBreak="\n", lineHeight=font + 1).encode(
        text="label:N", color=alt.condition(f"datum.contributions > {n / 2}", alt.value("white"), alt.value("#222")))
    row_px = max(30, (font + 1) * lines + 8)
    layers = [rect, ring, text]
    if follow is not None:
        layers.insert(2, base.mark_rect(fill=None, stroke="#111111", strokeWidth=3, strokeDash=[5, 2])
                      .transform_filter(f"datum.slot == {int(follow)}"))
    return alt.layer(*layers).properties(
        width=min(cell * columns, 900), height=min(row_px * n, 34 * 16 if lines == 1 else 40 * 16),
        title=f"buffers after step {k} of {len(replay.plan.steps)}")


def follow_count(replay) -> int:
    """How many columns the buffers chart draws (the chunks one can follow): an all-to-all's n·n
    slots are drawn as n blocks."""
    n = replay.plan.n
    return n if replay.kind == "all_to_all" and replay.plan.n_chunks == n * n else replay.plan.n_chunks


def chunk_moves(replay, k: int, j: int) -> str:
    """Step k's transfers of chunk (slot) j, in words: 'rank 0 → rank 1 (added), ...' or 'does not
    move'. An all-to-all drawn as blocks (`follow_count`): j is block j, rank j's pieces."""
    if k < 1:
        return "the inputs: nothing has moved yet"
    n = replay.plan.n
    per = n if follow_count(replay) == n and replay.plan.n_chunks == n * n else 1
    moves = [f"rank {t.src} → rank {t.dst}{' (added)' if t.reduce else ''}"
             for t in replay.plan.steps[k - 1].transfers if t.dst_chunk // per == j]
    return ", ".join(moves) if moves else "does not move in this step"


def links_chart(replay, k: int) -> alt.Chart:
    """Bytes each rank sends each other rank during step k (empty before the first step)."""
    links = replay.step_links(k)
    n = replay.plan.n
    df = pd.DataFrame([{"from": s, "to": d, "bytes": b, "size": fmt_bytes(b)} for (s, d), b in links.items()]
                      or [{"from": 0, "to": 0, "bytes": 0, "size": "-"}])
    cell = max(18, min(40, 520 // n))
    return alt.Chart(df).mark_rect(stroke="white").encode(
        x=alt.X("to:O", title="to rank", scale=alt.Scale(domain=list(range(n))), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("from:O", title="from rank", scale=alt.Scale(domain=list(range(n)))),
        color=alt.Color("bytes:Q", scale=alt.Scale(scheme="reds"), legend=alt.Legend(orient="top", format="~s")),
        tooltip=["from:O", "to:O", "size:N"]).properties(width=cell * n, height=cell * n,
                                                         title=f"bytes on each link in step {k}")
