"""The Scale explorer's goodput tab: a failure model of the cluster (GPUs, MTBF per GPU, checkpoint
write bandwidth, restart time), Young's and Daly's checkpoint intervals, and the goodput curve
against the interval (`simulator.cost.goodput`)."""

import streamlit as st
from ui import BIND, enlarge_text, or_error, show_code

from simulator import (
    FailureModel,
    ModelSpec,
    ParasimError,
    checkpoint_nbytes,
    daly_interval_s,
    goodput,
    goodput_curve,
    viz,
    young_interval_s,
)
from simulator.units import fmt_time


@st.cache_data(show_spinner=False, max_entries=16)
def goodput_png(fm: FailureModel, young: float, daly: float, title: str, big: bool = False) -> bytes:
    """`viz.goodput_chart` of `fm` drawn once per set of inputs, as PNG: reruns reuse it. `big`:
    presentation mode's larger text (ui.enlarge_text)."""
    fig = viz.goodput_chart(goodput_curve(fm), young_s=young, daly_s=daly, title=title)
    return viz.png_bytes(enlarge_text(fig) if big else fig, dpi=120)


def goodput_panel(spec: ModelSpec) -> None:
    """The tab's widgets (bound to the URL: g_gpus, g_mtbf, g_write, g_restart), its metrics and curve."""
    c = st.columns(4)
    g_gpus = c[0].number_input("GPUs", 1, 1_000_000, 1024, key="g_gpus", **BIND)
    mtbf = c[1].number_input("MTBF per GPU (hours)", 100, 10_000_000, 50_000, 1000, key="g_mtbf", **BIND,
                             help="an assumption: vendors do not publish one; large clusters report a failure "
                                  "every few hours")
    write = c[2].number_input("Checkpoint write bandwidth (GB/s)", 1, 10_000, 50, key="g_write", **BIND)
    restart = c[3].number_input("Restart time (s)", 0, 36_000, 600, 60, key="g_restart", **BIND,
                                help="rescheduling and job start, excluding the checkpoint read")
    ckpt = checkpoint_nbytes(spec.params())
    fm = or_error(FailureModel, int(g_gpus), float(mtbf), ckpt, float(write) * 1e9, None, float(restart))
    young = daly = g = None
    if fm is not None:
        young, daly = young_interval_s(fm), daly_interval_s(fm)
        try:
            if not daly > 0:  # Daly's formula turns negative when a checkpoint lasts nearly 2 MTBF
                raise ParasimError("no interval")
            goodput_curve(fm)  # refuses (ParasimError) the numbers its curve cannot be drawn for
            g = goodput(fm, daly)
        except ParasimError:
            st.warning(
                f"With these numbers the run cannot make progress: the {int(g_gpus):,} GPUs fail once every "
                f"{fmt_time(fm.system_mtbf_s)} together (MTBF per GPU / GPUs), while writing one checkpoint takes "
                f"{fmt_time(fm.checkpoint_time_s)} and a restart {fmt_time(fm.restore_time_s)}. The goodput model needs "
                "a checkpoint and a restart well inside the time between failures: use fewer GPUs, a larger MTBF per "
                "GPU, a faster checkpoint write or a shorter restart.", icon=":material/warning:")
            g = None
        if g is not None:
            c = st.columns(4)
            c[0].metric("system MTBF", fmt_time(fm.system_mtbf_s), help="MTBF per GPU / GPUs")
            c[1].metric("checkpoint C", fmt_time(fm.checkpoint_time_s), help=f"{ckpt / 1e9:.0f} GB at 14 B/param")
            c[2].metric("best interval (Daly)", fmt_time(daly), help=f"Young: {fmt_time(young)}")
            c[3].metric("goodput at best", f"{g.goodput:.1%}", help="useful training time / wall time with a "
                        "checkpoint every Daly interval: the rest goes to writes, lost work and restarts")
            st.image(goodput_png(fm, young, daly, f"{spec.name} on {int(g_gpus)} GPUs",
                                 big=bool(st.session_state.get("present"))), width="stretch")
            st.caption(f"Checkpoint too often and the writes dominate; too rarely and each failure loses half an "
                       f"interval of work. Daly's interval {fmt_time(daly)} (dash-dot line; Daly 2006) refines "
                       f"Young's √(2CM) = {fmt_time(young)} (dotted; Young 1974).")
    show_code(goodput, key="code_goodput")
