"""Pipeline schedules side by side: every schedule of the registry (simulator.SCHEDULES)."""

import dataclasses

import streamlit as st
from charts import schedule_compare_spec, timeline_chart
from ui import BIND, interactive, intro, predict, remember, restore, show_code, show_error, trace_downloads

from simulator import (
    SCHEDULES,
    ParasimError,
    SimResult,
    one_f_one_b,
    simulate_schedule,
    time_schedule,
    viz,
    zb_h1,
    zb_h2,
)
from simulator.units import fmt_time

NAMES = list(SCHEDULES)  # the registry's, in its order

intro("Pipeline schedules",
      "A pipeline splits the layers into **p stages**; each step pushes **m micro-batches** through them. "
      "The order in which stages run forwards (F) and backwards (B, W) decides the idle **bubble** and how "
      "many micro-batches' activations a stage must keep **in flight**.")

restore("pipelines")
with st.sidebar:
    st.subheader("Pipeline")
    chosen = st.multiselect("Schedules", NAMES, default=NAMES, key="schedules", **BIND,
                            help="gpipe: all forwards, then all backwards; 1f1b: one forward, one backward; "
                                 "interleaved: v chunks per stage; zb-h1/zb-h2: the backward split into B "
                                 "(input gradient) and W (weight gradient); dualpipe: fed from both ends; looped-bfs, "
                                 "interleaved-zb, zb-v and dualpipev: PyTorch's schedules with chunks (zb-v "
                                 "and dualpipev always two, V-shaped)")
    p = st.slider("Stages p", 2, 8, 4, key="p", **BIND, help="pipeline stages, one per device")
    m = st.slider("Micro-batches m", 1, 32, 8, key="m", **BIND, help="per step; the bubble shrinks as m grows")
    v = st.slider("Chunks per stage v (interleaved)", 1, 4, 2, key="v", **BIND,
                  help="interleaved, interleaved-zb and looped-bfs cut each stage's layers into v chunks "
                       "(Megatron's virtual pipeline stages)")
    st.subheader("Times per micro-batch and stage (ms)")
    t_f = st.slider("F forward (ms)", 0.1, 4.0, 1.0, 0.1, key="t_f", **BIND)
    t_b = st.slider("B input gradient (ms)", 0.1, 4.0, 1.0, 0.1, key="t_b", **BIND)
    t_w = st.slider("W weight gradient (ms)", 0.1, 4.0, 1.0, 0.1, key="t_w", **BIND)
    t_comm = st.slider("Stage-to-stage transfer (ms)", 0.0, 1.0, 0.0, 0.05, key="t_comm", **BIND)
remember("pipelines", "schedules", "p", "m", "v", "t_f", "t_b", "t_w", "t_comm")


@st.cache_data(show_spinner=False)
def run_schedules(names: tuple, p: int, m: int, v: int, t_f: float, t_b: float, t_w: float,
                  t_comm: float) -> list[tuple[str, SimResult | None, str]]:
    """Build and time each schedule; an invalid one returns its one-line ParasimError message.
    A chunk holds 1/v of a device's layers, so its times are divided by v (`time_schedule`)."""
    out = []
    for name in names:
        try:
            res = time_schedule(name, p, m, v, t_f, t_b, t_w, t_comm)
            out.append((name, res, ""))
        except ParasimError as err:
            out.append((name, None, str(err)))
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def timeline_spec(names: tuple, p: int, m: int, v: int, t_f: float, t_b: float, t_w: float, t_comm: float,
                  pick: str, upto: int | None) -> dict:
    """The interactive timeline of schedule `pick` (with `upto`: its first `upto` operation ends, the
    player's frame), as a Vega-Lite spec built once per setting: a slider moved back costs nothing."""
    res = {name: r for name, r, _ in run_schedules(names, p, m, v, t_f, t_b, t_w, t_comm)}[pick]
    trace = viz.schedule_trace(res)
    title = f"{pick}: p={p}, m={m}"
    if upto is not None:
        now = frame_ticks(trace)[upto - 1]
        trace = dataclasses.replace(trace, events=[e for e in trace.events if round(e.end_s, 12) <= now])
        title = f"{pick} up to step {upto} of {len(frame_ticks(viz.schedule_trace(res)))}"
    return timeline_chart(trace, stage_of={d: d for d in range(p)}, title=title,
                          height_per_row=34 if upto is None else 30)


def frame_ticks(trace) -> list[float]:
    """The player's steps: the distinct end times of the operations, in order."""
    return sorted({round(e.end_s, 12) for e in trace.events})


if not chosen:
    st.warning("Pick at least one schedule.")
    st.stop()

rows = run_schedules(tuple(chosen), p, m, v, t_f, t_b, t_w, t_comm)
for name, _, err in rows:
    if err:
        show_error(err, f"The {name} schedule cannot run these settings: ")
good = [(name, res) for name, res, _ in rows if res is not None]
if not good:
    st.stop()

# schedules side by side: at 1024 px a column still holds "micro-batches" whole (presentation's larger text: 3)
per_row = 3 if st.session_state.get("present") else 5
cols = [c for i in range(0, len(good), per_row) for c in st.columns(per_row)]
base = next((res for name, res in good if name == "1f1b"), None)
for col, (name, res) in zip(cols, good):
    with col:
        st.markdown(f"**{name}**")
        diff = None if base is None else res.bubble_fraction - base.bubble_fraction
        if diff is None or name == "1f1b" or abs(diff) < 5e-4:  # the baseline, or no visible change
            delta = None if base is None else ("baseline" if name == "1f1b" else "same as 1f1b")
            st.metric("bubble", f"{res.bubble_fraction:.1%}", delta, delta_color="off", delta_arrow="off",
                      help="idle share of p x step time")
        else:
            st.metric("bubble", f"{res.bubble_fraction:.1%}", f"{diff:+.1%} vs 1f1b", delta_color="inverse",
                      help="idle share of p x step time")
        v_res = 1 if res.schedule.bidirectional else res.schedule.v  # DualPipe's chunks are whole stages
        st.metric("peak activations", f"{max(res.peak_in_flight) / v_res:.3g} micro-batches",
                  help="activations held at once by the busiest stage, counted in micro-batches (one "
                       f"micro-batch's activations for a whole stage); {max(res.peak_in_flight)} micro-batch"
                       f"{' chunks of 1/' + str(v_res) if v_res > 1 else 'es'} in flight")
        st.metric("step time", fmt_time(res.makespan * 1e-3), help="from the first forward to the last "
                  "weight gradient, with the F, B, W times of the sidebar")

if base is not None:
    predict(f"what share of the 1F1B step idles with p={p} stages and m={m} micro-batches?", 100 * base.bubble_fraction,
            "%", f"The bubble is (p-1) slots of F+B at each end of the step: (p-1)/(m+p-1) = {p - 1}/{m + p - 1} with "
            "equal times and free transfers (Narayanan et al. 2021); more micro-batches dilute it.", key="bubble")

shown = [name for name, _ in good]
if st.session_state.get("show") not in (None, *shown):  # a schedule no longer chosen (or invalid now)
    del st.session_state["show"]
pick = st.selectbox("Timeline of", shown, key="show", **BIND, index=shown.index("1f1b") if base is not None else 0,
                    help="the interactive timeline, the downloads and the Chrome trace show this schedule")
remember("pipelines", "show")
trace = viz.schedule_trace(dict(good)[pick])
inputs = (tuple(chosen), p, m, v, t_f, t_b, t_w, t_comm, pick)
interactive(timeline_spec(*inputs, None), key="timeline")
st.caption("Hover a bar for its micro-batch, stage, start and duration; drag to pan and scroll to zoom the time "
           "axis (double-click resets); click a bar or pick one in *highlight micro-batch* to follow that "
           "micro-batch through the stages. Grey is the pipeline bubble.")

PLAY_SECONDS = 1.0  # between two ticks while playing


def play_schedule(trace, name: str) -> None:
    """The chosen schedule played tick by tick: Play, Pause, a step slider (also moved by hand), and
    the timeline's *highlight micro-batch* to follow one micro-batch as it crosses the stages."""
    ticks = frame_ticks(trace)
    last = len(ticks)
    if st.session_state.get("tick", 0) > last:
        st.session_state["tick"] = last
    st.session_state.setdefault("pipe_playing", False)

    def start() -> None:
        if st.session_state.get("tick", 0) >= last:
            st.session_state["tick"] = 0
        st.session_state["pipe_playing"] = True

    def pause() -> None:
        st.session_state["pipe_playing"] = False

    row = st.container(horizontal=True)  # buttons as wide as their labels, at any font size
    c = [row, row]
    if st.session_state["pipe_playing"]:
        c[0].button("Pause", icon=":material/pause:", key="pipe_pause", on_click=pause, width="content")
    else:
        c[0].button("Play", icon=":material/play_arrow:", key="pipe_play", on_click=start, width="content",
                    help=f"advance one event every {PLAY_SECONDS:g} s")
    c[1].button("Step", icon=":material/skip_next:", key="pipe_step", width="content",
                on_click=lambda: st.session_state.update(tick=min(st.session_state.get("tick", 0) + 1, last)))

    @st.fragment(run_every=PLAY_SECONDS if st.session_state["pipe_playing"] else None)
    def frames() -> None:
        if st.session_state["pipe_playing"]:
            st.session_state["tick"] = min(st.session_state.get("tick", 0) + 1, last)
        k = st.slider("Time step", 0, last, key="tick", **BIND, help="0: nothing has run; k: the first k "
                      "ends of an operation")
        now = ticks[k - 1] if k else 0.0
        done = [e for e in trace.events if round(e.end_s, 12) <= now]
        st.caption(f"{name}: at {fmt_time(now)}, {len(done)} of {len(trace.events)} "
                   "operations done. Pick a micro-batch in *highlight micro-batch* to follow it.")
        if done:
            interactive(timeline_spec(*inputs, k), key="play_timeline")
        if k == last and st.session_state["pipe_playing"]:
            st.session_state["pipe_playing"] = False
            st.rerun(scope="app")  # stop the timer

    frames()


with st.expander("Play the schedule, operation by operation", icon=":material/play_circle:"):
    play_schedule(trace, pick)
remember("pipelines", "tick")

interactive(schedule_compare_spec([res for _, res in good]), key="compare")
st.caption("All the chosen schedules on one time axis (hover a bar for its action). Blue F forward, orange B "
           "backward (BW = B and W fused), green W weight gradient, grey idle. Lighter bars are chunk 1, 3 of an "
           "interleaved stage.")

st.caption(f"Textbook check: GPipe and 1F1B bubble (p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.1%} of the step "
           "with fused backward and free transfers (Narayanan et al. 2021); ZB-H1 cuts the bubble to "
           "(p-1)(F+B-W) and ZB-H2 to (p-1)(F+B-2W) (Qi et al. 2023), but with a synchronised step no schedule "
           "idles less than (p-1)F: the last stage's first input arrives only then (the paper removes that "
           "synchronisation with its optimizer post-validation). DualPipe (DeepSeek-V3, Sec. 3.2.1) feeds two "
           "copies of the model from both ends (chunk .1 runs the copy fed from the last device): bubble at most "
           f"(p/2-1)(F&B+B-3W) = {max(p / 2 - 1, 0) * ((t_f + t_b + t_w) + (t_b + t_w) - 3 * t_w):.3g} ms with B the "
           "full backward, p+1 micro-batches in flight, twice the parameters; it needs p even and m >= 2p.")

# the PNG, like the JSON and CSV, holds the chosen schedule only (drawn when asked for)
png = lambda res=dict(good)[pick]: viz.png_bytes(viz.schedule_chart(res), dpi=120)  # noqa: E731
trace_downloads(trace, png, f"pipeline-{pick}-p{p}-m{m}", key="pipe")
show_code(time_schedule, simulate_schedule, one_f_one_b, zb_h1, zb_h2, key="code")
