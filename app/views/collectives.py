"""Collectives: how ring, tree, halving-doubling and direct algorithms move chunks, and what it costs."""

import numpy as np
import streamlit as st
from charts import bytes_bars, sweep_lines
from plan_charts import steps_spec
from ui import (
    ALGO_HELP,
    BIND,
    KIND_HELP,
    friendly_errors,
    interactive,
    intro,
    link_to,
    png_download,
    predict,
    remember,
    restore,
    show_code,
)

from simulator import COLLECTIVE_KINDS as KINDS
from simulator import (
    PRICED_ALGOS,
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
# The bytes every algorithm must send per rank, on average (the data that must leave each rank; Chan et al.
# 2007, "Collective communication: theory, practice, and experience", Sec. 4; Patarasuk & Yuan 2009 for
# all-reduce). S as nccl-tests counts it: the whole array (for all_gather, reduce_scatter, all_to_all the
# per-rank part x n).
LEAST = {"all_reduce": ("2(n-1)/n·S", lambda n: 2 * (n - 1) / n),
         "reduce_scatter": ("(n-1)/n·S", lambda n: (n - 1) / n), "all_gather": ("(n-1)/n·S", lambda n: (n - 1) / n),
         "broadcast": ("(n-1)/n·S", lambda n: (n - 1) / n), "reduce": ("(n-1)/n·S", lambda n: (n - 1) / n),
         "all_to_all": ("(n-1)/n²·S", lambda n: (n - 1) / n ** 2)}

intro("Collectives",
      "A collective is a plan: a few **steps**, each a set of chunk transfers between ranks. The plan fixes "
      "the bytes every rank sends and, with the latency α and bandwidth β of the links, the time "
      "≈ steps·α + bytes/β (Hockney's α-β model).")

restore("collectives")
with st.sidebar:
    st.subheader("Collective")
    kind = st.selectbox("Kind", [k for k in KINDS if k != "barrier"], key="kind", **BIND,  # a barrier moves no data
                        help=KIND_HELP)
    algo = st.selectbox("Algorithm", algorithms(kind), key="algo", **BIND,
                        help=ALGO_HELP)
    n = st.slider("Ranks n", 2, 16, 4, key="n", **BIND)
    size_name = st.select_slider("Message size S", list(SIZES), value="16 MB", key="size", **BIND,
                                 help="the whole array, as nccl-tests counts it")
    hw_name = st.selectbox("Hardware", [h for h in hardware_names() if h != "local"], key="hw", **BIND,
                           help="prices each step with the links' latency α and bandwidth β")
remember("collectives", "kind", "algo", "n", "size", "hw")


@st.cache_data(show_spinner=False)
def analyse(kind: str, algo: str, n: int, nbytes: int, hw_name: str) -> dict:
    """The plan, its price on the hardware's topology, and the cost model's sweeps over n and S."""
    hw = get_hardware(hw_name)
    plan = make_plan(kind, algo, n, nbytes)
    topo = hw.topology(max(WORLD))
    link_of = lambda s, d: (topo.link(s, d).latency_s, topo.link(s, d).bandwidth_Bps)  # noqa: E731
    algos = [a for a in algorithms(kind) if a in PRICED_ALGOS]  # the ones with a closed form (cost.comm)
    by_n = {a: [collective_time_s(kind, nbytes, range(w), topo, a) for w in WORLD] for a in algos}
    by_s = {a: [collective_time_s(kind, s, range(n), topo, a) for s in SIZES.values()] for a in algos}
    return {"plan": plan, "time_s": plan_time(plan, link_of), "by_n": by_n, "by_s": by_s,
            "busbw_factor": bus_bandwidth_factor(kind, n), "per_node": hw.devices_per_node}


with friendly_errors():
    res = analyse(kind, algo, n, int(SIZES[size_name]), hw_name)
plan = res["plan"]
sent = plan.bytes_sent_per_rank()

c = st.columns(5)
c[0].metric("steps", len(plan.steps), help="rounds of concurrent transfers; each pays the latency α once")
c[1].metric("messages", plan.messages, help="chunk transfers in all steps, over all ranks")
c[2].metric("max sent per rank", fmt_bytes(max(sent)), help="the bytes the busiest rank sends in the whole collective")
c[3].metric("time (priced plan)", fmt_time(res["time_s"]),
            help="each step costs α + (bytes on its busiest link)/β on the hardware's links, summed over steps")
c[4].metric("bus bandwidth factor", f"{res['busbw_factor']:.3g}",
            help="bus bandwidth = S / time × this factor (nccl-tests): comparable across kinds and n")

predict(f"how many bytes does the busiest rank send in this {algo} {kind} of {size_name} over {n} ranks?",
        max(sent) / 1e6, "MB", f"The plan counts it transfer by transfer; every {kind} algorithm must send at least "
        f"{LEAST[kind][0]} per rank on average (here {fmt_bytes(LEAST[kind][1](n) * SIZES[size_name])}).", key="bytes")

tab_steps, tab_bytes, tab_n, tab_s = st.tabs(["Steps", "Bytes per rank", "Time vs world size", "Time vs size"])
with tab_steps:
    interactive(steps_spec(plan), key="steps")
    st.caption("Each cell: the chunk a rank receives at that step and from whom (hover a cell for the transfer in "
               "words); dark frame = added into its slot (reduce), white = copied. Colour = chunk.")
    png_download(lambda: viz.collective_steps(plan), f"{kind}-{algo}-{n}ranks.png", "steps-png",
                 "simulator.viz.collective_steps")
    link_to("Collective player", "Step through this plan with each rank's buffer", kind=kind, algo=algo, n=n)
with tab_bytes:
    interactive(bytes_bars(sent), key="bytes")
    formula, share = LEAST[kind]
    S = SIZES[size_name]
    st.caption(f"Every {kind} algorithm must send at least {formula} = {fmt_bytes(share(n) * S)} per rank on "
               f"average (n = {n}, S = {size_name}); in this {algo} plan " + (
                   f"every rank sends {fmt_bytes(max(sent))}" if min(sent) == max(sent) else
                   f"the ranks send {fmt_bytes(min(sent))} to {fmt_bytes(max(sent))}")
               + f", {fmt_bytes(sum(sent))} in all (the sum over ranks), counted transfer by transfer.")
with tab_n:
    interactive(sweep_lines(WORLD, res["by_n"], x_title="ranks n", title=f"{kind} of {size_name} on {hw_name}"),
                key="by_n")
    st.caption(f"Cost model (topology-aware): groups up to {res['per_node']} ranks stay inside one node (fast "
               "links); larger groups cross nodes and are priced hierarchically. Hover a point for its time.")
with tab_s:
    interactive(sweep_lines(list(SIZES), res["by_s"], x_title="message size S", title=f"{kind} over {n} ranks on "
                            f"{hw_name}"), key="by_s")
    st.caption("Small messages pay latency (steps × α), large ones pay bandwidth (bytes / β).")



@st.cache_data(show_spinner=False, max_entries=64)
def run_on_devices(kind: str, algo: str, n: int) -> float:
    """The plan executed chunk by chunk on n numpy devices (24 float64 each, seed 0): its largest
    difference from numpy's own result (`reference`). Milliseconds: it follows the widgets."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(24) for _ in range(n)]
    outs, _, _ = collective(kind, arrays, algo)
    ref = reference(kind, arrays)
    return max((float(np.max(np.abs(o - r))) for o, r in zip(outs, ref) if o is not None), default=0.0)


with friendly_errors():
    err = run_on_devices(kind, algo, n)
st.success(f"Run on numpy devices: {n} ranks executed the {algo} {kind} plan on 24 float64 each; max difference "
           f"from the numpy reference: {err:.2g}")

show_code(make_plan, plan_time, collective_time_s, key="code")
