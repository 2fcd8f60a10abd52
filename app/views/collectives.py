"""Collectives: how ring, tree, halving-doubling and direct algorithms move chunks, and what it costs."""

import numpy as np
import streamlit as st
from ui import figure, friendly_errors, intro, show_code

from simulator import COLLECTIVE_KINDS as KINDS
from simulator import (
    algorithms,
    bus_bandwidth_factor,
    collective,
    collective_time_s,
    get_hardware,
    hardware_names,
    make_plan,
    plan_time,
    reference,
    viz,
)
from simulator.units import fmt_bytes, fmt_time

SIZES = {"1 kB": 1e3, "64 kB": 64e3, "1 MB": 1e6, "16 MB": 16e6, "256 MB": 256e6, "1 GB": 1e9}
WORLD = (2, 4, 8, 16, 32, 64, 128)

intro("Collectives",
      "A collective is a plan: a few **steps**, each a set of chunk transfers between ranks. The plan fixes "
      "the bytes every rank sends and, with the latency α and bandwidth β of the links, the time "
      "≈ steps·α + bytes/β (Hockney's α-β model).")

with st.sidebar:
    st.subheader("Collective")
    kind = st.selectbox("Kind", [k for k in KINDS if k != "barrier"], key="kind")  # a barrier moves no data
    algo = st.selectbox("Algorithm", algorithms(kind), key="algo")
    n = st.slider("Ranks n", 2, 16, 4, key="n")
    size_name = st.select_slider("Message size S", list(SIZES), value="16 MB", key="size")
    hw_name = st.selectbox("Hardware", [h for h in hardware_names() if h != "local"], key="hw")


@st.cache_data(show_spinner=False)
def analyse(kind: str, algo: str, n: int, nbytes: int, hw_name: str) -> dict:
    """The plan, its price on the hardware's topology, and the cost model's sweeps over n and S."""
    hw = get_hardware(hw_name)
    plan = make_plan(kind, algo, n, nbytes)
    topo = hw.topology(max(WORLD))
    link_of = lambda s, d: (topo.link(s, d).latency_s, topo.link(s, d).bandwidth_Bps)  # noqa: E731
    algos = [a for a in algorithms(kind) if a in ("ring", "tree", "halving_doubling", "direct")]
    by_n = {a: [collective_time_s(kind, nbytes, range(w), topo, a) for w in WORLD] for a in algos}
    by_s = {a: [collective_time_s(kind, s, range(n), topo, a) for s in SIZES.values()] for a in algos}
    return {"plan": plan, "time_s": plan_time(plan, link_of), "by_n": by_n, "by_s": by_s,
            "busbw_factor": bus_bandwidth_factor(kind, n), "per_node": hw.devices_per_node}


with friendly_errors():
    res = analyse(kind, algo, n, int(SIZES[size_name]), hw_name)
plan = res["plan"]
sent = plan.bytes_sent_per_rank()

c = st.columns(5)
c[0].metric("steps", len(plan.steps))
c[1].metric("messages", plan.messages)
c[2].metric("max sent per rank", fmt_bytes(max(sent)))
c[3].metric("time (priced plan)", fmt_time(res["time_s"]))
c[4].metric("bus bandwidth factor", f"{res['busbw_factor']:.3g}", help="busbw = S/t × factor (nccl-tests)")

tab_steps, tab_bytes, tab_n, tab_s = st.tabs(["Steps", "Bytes per rank", "Time vs world size", "Time vs size"])
with tab_steps:
    figure(viz.collective_steps(plan), "Each cell: the chunk a rank receives at that step and from whom; hatched = "
                                   "added into its slot (reduce), plain = copied. Colour = chunk.")
with tab_bytes:
    st.bar_chart({"bytes sent": sent}, x_label="rank", y_label="bytes sent", height=280)
    st.caption(f"Ring all-reduce sends 2(n-1)/n·S = {2 * (n - 1) / n * SIZES[size_name]:.4g} B per rank; "
               "every plan's bytes are counted transfer by transfer.")
with tab_n:
    figure(viz.sweep_chart(WORLD, res["by_n"], xlabel="ranks n", ylabel="time", logx=True, logy=True, y_is_time=True,
                       title=f"{kind} of {size_name} on {hw_name}"),
           f"Cost model (topology-aware): groups up to {res['per_node']} ranks stay inside one node (fast links); "
           "larger groups cross nodes and are priced hierarchically.")
with tab_s:
    figure(viz.sweep_chart(list(SIZES.values()), res["by_s"], xlabel="message size S (bytes)", ylabel="time",
                       logx=True, logy=True, y_is_time=True, title=f"{kind} over {n} ranks on {hw_name}"),
           "Small messages pay latency (steps × α), large ones pay bandwidth (bytes / β).")

if st.button("Run it on numpy devices", key="run", help="execute the plan chunk by chunk and compare with numpy"):
    with friendly_errors():
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(24) for _ in range(n)]
        outs, _, _ = collective(kind, arrays, algo)
        ref = reference(kind, arrays)
        err = max((float(np.max(np.abs(o - r))) for o, r in zip(outs, ref) if o is not None), default=0.0)
    st.success(f"{n} ranks ran the {algo} {kind} plan on 24 float64 each; max difference from the "
               f"numpy reference: {err:.2g}")

show_code(make_plan, plan_time, collective_time_s, key="code")
