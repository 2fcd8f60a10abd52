"""Collective player: every rank's buffer after each step of a collective algorithm, step by step,
with the bytes on each link; the last step's buffers are compared with numpy's result."""

import numpy as np
import pandas as pd
import streamlit as st
from player_charts import buffers_chart, chunk_moves, follow_count, links_chart
from ui import ALGO_HELP, BIND, KIND_HELP, chart_font, friendly_errors, interactive, intro, remember, restore, show_code

from simulator import COLLECTIVE_KINDS, algorithms
from simulator.collectives.player import Replay, replay
from simulator.units import fmt_bytes

KINDS = [k for k in COLLECTIVE_KINDS if k != "barrier"]  # a barrier moves no data
SIZES = (4, 8, 16, 32, 64)
PLAY_SECONDS = 0.8  # between two steps while playing
SHOWN = 8  # numbers of a result shown in the table

intro("Collective player",
      "Step through a collective: after each **step** of the chosen algorithm, every rank's buffer of "
      "**slots** (chunks) and whose inputs each slot holds (Σ r0-r3: the sum of ranks 0 to 3's inputs). "
      "Red frames mark the slots this step wrote; the second chart shows the bytes on each link. Rank r "
      "starts with the numbers 100·r + 0, 1, 2, ... so every sum can be read off.")

restore("player")
with st.sidebar:
    st.subheader("Collective")
    kind = st.selectbox("Kind", KINDS, key="kind", **BIND,
                        help=KIND_HELP)
    algo = st.selectbox("Algorithm", algorithms(kind), key="algo", **BIND,
                        help=ALGO_HELP)
    n = st.slider("Ranks n", 2, 16, 4, key="n", **BIND)
    per_rank = st.select_slider("Numbers per rank", SIZES, value=16, key="per_rank", **BIND,
                                help="float64 (8 bytes each): the input array of every rank")
remember("player", "kind", "algo", "n", "per_rank")


@st.cache_data(show_spinner=False, max_entries=32)
def play(kind: str, algo: str, n: int, per_rank: int) -> Replay:
    """The collective run step by step on rank r's input 100·r + arange(per_rank) (float64)."""
    return replay(kind, [100.0 * r + np.arange(per_rank, dtype=np.float64) for r in range(n)], algo)


def numbers(a) -> str:
    if a is None:
        return "(nothing: not the root)"
    flat = np.asarray(a).ravel()
    return " ".join(f"{v:g}" for v in flat[:SHOWN]) + (f" … ({flat.size} numbers)" if flat.size > SHOWN else "")


def results_table(rep: Replay) -> pd.DataFrame:
    """Each rank's result (its slots joined) beside numpy's, and their largest difference."""
    rows = []
    for r, (out, ref) in enumerate(zip(rep.outputs, rep.expected)):
        same = (out is None and ref is None) or (out is not None and ref is not None and np.array_equal(out, ref))
        diff = 0.0 if out is None or ref is None or not np.size(out) else float(np.max(np.abs(out - ref)))
        rows.append({"rank": r, "buffer after the last step": numbers(out), "numpy": numbers(ref),
                     "max |difference|": f"{diff:g}", "equal": "yes" if same else "NO"})
    return pd.DataFrame(rows)


with friendly_errors():
    rep = play(kind, algo, n, per_rank)
last = len(rep.plan.steps)
if st.session_state.get("step", 0) > last:  # fewer steps than the previous algorithm
    st.session_state["step"] = last
st.session_state.setdefault("playing", False)


def start() -> None:
    if st.session_state.get("step", 0) >= last:
        st.session_state["step"] = 0
    st.session_state["playing"] = True


def pause() -> None:
    st.session_state["playing"] = False


def step_once() -> None:
    st.session_state["playing"] = False
    st.session_state["step"] = min(st.session_state.get("step", 0) + 1, last)


with st.container(horizontal=True):  # as wide as its label at any font size; outside the fragment: a click reruns the page, which starts or stops the fragment's timer
    if st.session_state["playing"]:
        st.button("Pause", icon=":material/pause:", key="pause", on_click=pause, width="content")
    else:
        st.button("Play", icon=":material/play_arrow:", key="play", on_click=start, width="content",
                  help="advance one step every %.1f s from here (from the start after the last step)" % PLAY_SECONDS)
    st.button("Step", icon=":material/skip_next:", key="step_once", on_click=step_once, width="content",
              help="one step forward (pauses)")
options = ["none", *range(follow_count(rep))]
if st.session_state.get("follow", "none") not in options:  # fewer chunks than the previous collective
    del st.session_state["follow"]
follow = st.selectbox("Follow chunk", options, key="follow", **BIND,
                      help="frame one slot (chunk) on every rank and say where each step sends it")
follow = None if follow == "none" else int(follow)


@st.fragment(run_every=PLAY_SECONDS if st.session_state["playing"] else None)
def player() -> None:
    """The step slider and the step's buffers and links (reruns alone, on a timer while playing)."""
    if st.session_state["playing"]:
        st.session_state["step"] = min(st.session_state.get("step", 0) + 1, last)
    k = st.slider("Step", 0, last, key="step", **BIND,
                  help="0: the inputs, before any transfer; k: after step k of the plan")
    links = rep.step_links(k)
    c = st.columns(4)
    c[0].metric("step", f"{k} of {last}", help="0 shows the inputs")
    c[1].metric("messages in this step", len(links), help="(sender, receiver) pairs that exchange data")
    c[2].metric("bytes on all links", fmt_bytes(sum(links.values())), help="this step, summed over every link")
    c[3].metric("most on one link", fmt_bytes(max(links.values(), default=0)),
                help="the busiest link of the step bounds its time (α + bytes/β)")
    label = rep.plan.steps[k - 1].label if k >= 1 else ""
    if label:
        st.caption(f"Step {k}: {label}")
    if follow is not None:
        st.caption(f"Chunk {follow} in step {k}: {chunk_moves(rep, k, follow)} (framed in black below).")
    interactive(buffers_chart(rep, k, follow, chart_font()), key="buffers")
    if k >= 1:
        interactive(links_chart(rep, k), key="links")
    if k == last:
        if st.session_state["playing"]:
            st.session_state["playing"] = False
            st.rerun(scope="app")  # stop the timer
        same = rep.max_abs_diff == 0.0 and all((o is None) == (e is None) for o, e in zip(rep.outputs, rep.expected))
        (st.success if same else st.error)(
            f"After the last step every rank's buffer {'equals' if same else 'DIFFERS from'} numpy's {kind} of the "
            f"inputs (largest difference {rep.max_abs_diff:g}).")
        st.table(results_table(rep).set_index("rank"))
    else:
        st.caption(f"Move to step {last} (or press Play) to compare every rank's buffer with numpy's result.")


player()
remember("player", "step", "follow")
show_code(replay, key="code")
