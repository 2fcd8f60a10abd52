"""Home: what parasim is, the pages as a map of the concepts, a lecture path through them (the
lessons' order), and one live figure: a 1F1B pipeline whose bubble follows two sliders."""

import streamlit as st
from nav import PAGE_FILES, PAGES, redirect_old_links

redirect_old_links()  # "/?kind=...": the Collectives page was the landing page before this one
# The first paint: the text and the map need no simulator import (a cold server's first page shows at once)
st.title("parasim")
st.markdown(
    "**parasim** is a simulator you can read: it trains small models on emulated devices with data, pipeline, "
    "tensor, expert, context and hybrid parallelism, really exchanging the tensors, and checks every run against "
    "one device doing the same steps. The same programs are priced on a simulated clock, and a closed-form cost "
    "model prices the same strategies at the scale of thousands of GPUs. Every number on these pages comes from "
    "the parasim library (`pip install -e .`, `parasim --help`): the command line gives the same answers.")

st.subheader("The pages: a map of the concepts")
groups: dict[str, list[str]] = {}
for title, (_file, _icon, group, _concept) in PAGES.items():
    groups.setdefault(group, []).append(title)
for group, titles in groups.items():
    st.markdown(f"**{group}**")
    cols = st.columns(3)
    for i, title in enumerate(titles):
        with cols[i % 3].container(border=True):
            try:
                st.page_link(PAGE_FILES[title], label=title, icon=PAGES[title][1])
            except Exception:  # noqa: BLE001  (a page run on its own, e.g. AppTest, has no router)
                st.markdown(f"**{title}**")
            st.caption(PAGES[title][3])

# The rest imports the simulator (seconds on a cold server): Streamlit sends the text and the map above
# to the browser while it does.
from charts import timeline_chart  # noqa: E402
from ui import BIND, interactive, link_to, remember, restore  # noqa: E402

from simulator import list_lessons, make_schedule, simulate_schedule, viz  # noqa: E402


@st.cache_data(show_spinner=False)
def lecture_path() -> list[dict]:
    """The lessons in their order with the pages each uses: the suggested path through the app."""
    return [{"title": info.title, "number": info.number, "pages": list(info.app_pages), "minutes": info.minutes}
            for info in list_lessons()]


@st.cache_data(show_spinner=False, max_entries=128)
def live_figure(p: int, m: int) -> tuple[float, dict]:
    """(bubble fraction, timeline spec) of 1F1B with p stages and m micro-batches on the simulated
    clock (forward, input and weight gradient 1 ms each): one computation per (p, m) for every session."""
    res = simulate_schedule(make_schedule("1f1b", p, m), 1.0, 1.0, 1.0, 0.0)
    spec = timeline_chart(viz.schedule_trace(res), stage_of={d: d for d in range(p)}, title=f"1F1B: p={p}, m={m}",
                          height_per_row=30)
    return res.bubble_fraction, spec


LIVE_KEYS = ("home_p", "home_m")
restore("home")
st.subheader("Try it: the pipeline bubble")
left, right = st.columns([1, 3], gap="large")
with left:
    p = st.slider("Stages p", 2, 8, 4, key="home_p", **BIND, help="pipeline stages, one per device")
    m = st.slider("Micro-batches m", 1, 16, 4, key="home_m", **BIND, help="pushed through the stages per step")
remember("home", *LIVE_KEYS)
bubble, spec = live_figure(p, m)
with left:
    st.metric("bubble (simulated)", f"{bubble:.1%}", help="idle share of p × step time, from the "
              "schedule run on the simulated clock (forward, input and weight gradient 1 ms each)")
    st.metric("(p-1)/(m+p-1)", f"{(p - 1) / (m + p - 1):.1%}", help="the textbook bubble of GPipe and 1F1B "
              "(Narayanan et al. 2021): the simulation agrees")
    st.caption("More micro-batches shrink the bubble; more stages grow it.")
with right:
    interactive(spec, key="home_timeline")
link_to("Pipeline schedules", "Compare with GPipe, interleaved, zero-bubble and DualPipe", p=p, m=m)

st.subheader("A path for a lecture")
st.markdown("The lessons build on each other; each opens the pages it uses. Follow them in order, or pick the "
            "pages of one row for a lecture on that topic.")
# a Markdown table, not st.dataframe: a dataframe would import pandas and pyarrow (over a second of a
# cold server's first page, by py-spy) for ten rows of text
rows = [f"| {d['number']} | {d['title']} | {' → '.join(d['pages'])} | {d['minutes']} |" for d in lecture_path()]
st.markdown("\n".join(["| # | lesson | pages | minutes |", "|---|---|---|---|", *rows]))
link_to("Lessons", "Open the lessons")
