"""Scale explorer: step time, throughput and memory of GPT training at cluster scale (cost model)."""

import streamlit as st
from ui import figure, friendly_errors, intro, show_code

from simulator.cost.analytic import estimate
from simulator.cost.hardware import get_hardware, hardware_names
from simulator.cost.model_presets import model_names
from simulator.cost.parallel_config import ParallelConfig
from simulator.units import fmt_time
from simulator.viz import memory_breakdown

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")

intro("Scale explorer",
      "Too big to run, cheap to price: the closed-form cost model gives step time, TFLOP/s per GPU, MFU and "
      "memory per GPU for a GPT under tensor (t), pipeline (p) and data (d) parallelism, as in Megatron-LM "
      "(Narayanan et al. 2021).")

with st.sidebar:
    st.subheader("Model and cluster")
    names = model_names()
    model = st.selectbox("Model", names, index=names.index("gpt3-175b") if "gpt3-175b" in names else 0, key="model")
    hws = [h for h in hardware_names() if h != "local"]
    hw = st.selectbox("Hardware", hws, index=hws.index("a100-80gb") if "a100-80gb" in hws else 0, key="hw")
    st.subheader("Parallelism")
    tp = st.select_slider("Tensor parallel t", [1, 2, 4, 8], value=8, key="tp")
    pp = st.select_slider("Pipeline stages p", [1, 2, 4, 8, 12, 16, 24, 32], value=8, key="pp")
    dp = st.select_slider("Data parallel d", [1, 2, 4, 8, 16, 32, 64], value=8, key="dp")
    b = st.select_slider("Micro-batch size b", [1, 2, 4, 8], value=1, key="b")
    B = st.select_slider("Global batch B", [64, 128, 256, 512, 1024, 1536, 2048], value=512, key="B")
    schedule = st.selectbox("Schedule", SCHEDULES, index=1, key="schedule")
    v = st.slider("Chunks v (interleaved)", 1, 4, 1, key="v")
    recompute = st.selectbox("Recompute", ["none", "selective", "full"], index=2, key="recompute")
    sp = st.toggle("Sequence parallel", value=False, key="sp")


@st.cache_data(show_spinner=False)
def explore(model, hw, tp, pp, dp, b, B, schedule, v, recompute, sp) -> dict:
    """estimate() of this configuration under ZeRO stages 0..3 (the same config otherwise)."""
    out = {}
    for z in range(4):
        cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, micro_batch_size=b, global_batch=B, schedule=schedule,
                             virtual_stages=v, recompute=recompute, sequence_parallel=sp, zero_stage=z)
        out[z] = estimate(model, cfg, hw).as_dict()  # plain data, so the cache can pickle it
    return {"by_zero": out, "capacity": get_hardware(hw).memory_bytes, "config": repr(cfg)}


with friendly_errors():
    res = explore(model, hw, tp, pp, dp, b, B, schedule, v, recompute, sp)
zero = st.radio("ZeRO stage for the numbers below", [0, 1, 2, 3], horizontal=True, key="zero")
r = res["by_zero"][zero]

c = st.columns(6)
c[0].metric("GPUs", r["gpus"])
c[1].metric("step time", fmt_time(r["step_time_s"]))
c[2].metric("TFLOP/s per GPU", f"{r['tflops_per_gpu']:.0f}")
c[3].metric("MFU", f"{r['mfu']:.1%}")
c[4].metric("bubble", f"{r['bubble_fraction']:.1%}")
c[5].metric("memory per GPU", f"{r['memory_per_gpu_bytes'] / 1e9:.1f} GB", "OOM" if r["oom"] else None,
            delta_color="inverse" if r["oom"] else "normal")
st.caption(res["config"].replace("zero=3", f"zero={zero}"))

left, right = st.columns([3, 2])
with left:
    bars = {f"ZeRO-{z}": {"model_state": e["memory"]["model_state_bytes"],
                          "activations": e["memory"]["activation_bytes"], "logits": e["memory"]["logits_bytes"]}
            for z, e in res["by_zero"].items()}
    figure(memory_breakdown(bars, res["capacity"], title=f"memory per GPU on {hw}"),
           "Model states shrink with each ZeRO stage (Rajbhandari et al. 2020); activations depend on t, p, "
           "recomputation and the schedule's micro-batches in flight.")
with right:
    st.markdown("**Where a step goes**")
    parts = {"compute": r["compute_time_s"], "bubble": r["bubble_time_s"], "exposed comm": r["exposed_comm_s"],
             "optimizer": r["optimizer_time_s"]}
    st.bar_chart({"part": list(parts), "seconds": list(parts.values())}, x="part", y="seconds",
                 horizontal=True, height=220)
    st.caption(" · ".join(f"{k} {fmt_time(t)}" for k, t in parts.items()))
    st.markdown("**Communication by purpose**")
    st.dataframe([{"purpose": k, "time": fmt_time(t)} for k, t in r["comm_time_by_kind"].items()], hide_index=True)
show_code(estimate, key="code")
