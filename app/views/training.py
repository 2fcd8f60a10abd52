"""Training playground: run real training steps of a parallel strategy on emulated devices."""

import streamlit as st
from ui import figure, friendly_errors, intro, show_code, trace_downloads

from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.hardware import hardware_names
from simulator.models import GPTConfig, MLPConfig
from simulator.parallel.config import SCHEDULES, STRATEGIES, TrainConfig
from simulator.parallel.train import train
from simulator.units import fmt_bytes, fmt_time
from simulator.viz import device_breakdown, memory_over_time, timeline

MODELS = {"MLP, 8 layers (64 → 256 → 8 classes)": MLPConfig(64, 256, 8, 8),
          "tiny GPT (2 blocks, h=32, 4 heads, s=16, V=64)": GPTConfig(2, 32, 4, 16, 64)}

intro("Training playground",
      "Devices really compute numpy shards and really exchange tensors; the same program is priced on a "
      "simulated clock. Every run is checked against **one device** doing the same steps: parallelism may "
      "change the timeline and the memory, never the math.")

with st.sidebar:
    st.subheader("Run")
    model_name = st.selectbox("Model", list(MODELS), key="model")
    strategy = st.selectbox("Strategy", STRATEGIES, index=STRATEGIES.index("pp"), key="strategy",
                            help="dp data, layer layer-wise, pp pipeline, tp tensor, zeroN ZeRO stage N")
    devices = st.slider("Devices", 1, 8, 4, key="devices")
    microbatches = st.slider("Micro-batches", 1, 16, 4, key="microbatches")
    schedule = st.selectbox("Pipeline schedule", SCHEDULES, index=SCHEDULES.index("1f1b"), key="schedule")
    batch = st.select_slider("Global batch", [16, 32, 64, 128], value=64, key="batch")
    steps = st.slider("Steps", 1, 5, 2, key="steps")
    hws = hardware_names()
    price_on = st.selectbox("Price the timeline on", hws, key="price_on",
                            index=hws.index("local") if "local" in hws else 0,
                            help="local = this machine (parasim calibrate); the others are datasheet presets")
    runtime = st.radio("Devices run as", ["in-process", "Ray actors"], horizontal=True, key="runtime",
                       help="Ray starts once per server (2 CPUs) the first time you ask for it")
    run = st.button("Run training", type="primary", key="run", width="stretch")


@st.cache_data(show_spinner="Training on emulated devices ...", max_entries=16)
def run_training(model_name: str, strategy: str, devices: int, microbatches: int, schedule: str, batch: int,
                 steps: int, price_on: str, runtime: str) -> dict:
    """Compile the strategy, run `steps` real steps, price them on the clock, compare with one device."""
    cfg = TrainConfig(MODELS[model_name], strategy=strategy, devices=devices, microbatches=microbatches,
                      schedule=schedule, batch_size=batch, steps=steps)
    rt = None
    if runtime == "Ray actors":
        from ray_session import get_ray

        from simulator.runtime import make_runtime

        get_ray()
        rt = make_runtime("ray", devices)
    try:
        dtype = "fp64" if price_on == "local" else "bf16"
        res = train(cfg, runtime=rt, device_model=HardwareDeviceModel(price_on, devices, dtype=dtype))
    finally:
        if rt is not None:
            rt.close()
    return {"trace": res.trace, "losses": res.losses, "reference": res.reference_losses,
            "diff": res.max_rel_weight_diff_vs_single, "sent": res.bytes_sent_per_device,
            "messages": res.messages, "wall_s": res.wall_time_s, "notes": dict(res.compiled.notes),
            "config": repr(res.config)}


request = (model_name, strategy, devices, microbatches, schedule, batch, steps, price_on, runtime)
if run:
    st.session_state["train_request"] = request
if "train_request" not in st.session_state:
    st.info("Pick a strategy in the sidebar and press **Run training**.")
    show_code(train, key="code")
    st.stop()

req = st.session_state["train_request"]
if req != request:
    st.caption("Showing the last run; press **Run training** to run the current settings.")
with friendly_errors():
    out = run_training(*req)
trace = out["trace"]

c = st.columns(6)
c[0].metric("final loss", f"{out['losses'][-1]:.4f}")
c[1].metric("vs one device", f"{out['diff']:.1e}", help="max relative weight difference after training")
c[2].metric("bubble", f"{trace.bubble_fraction():.1%}", help="idle share of devices x simulated time")
c[3].metric("simulated time", fmt_time(trace.makespan_s))
c[4].metric("wall time", fmt_time(out["wall_s"]))
c[5].metric("bytes sent", fmt_bytes(sum(out["sent"])), help=f"{out['messages']} messages")
st.caption(f"{out['config']} · schedule {out['notes'].get('schedule', '-')} · "
           f"stages {out['notes'].get('stages', '-')}")

png = figure(timeline(trace), "Each device has a compute lane (forward blue, backward orange, weight gradient green, optimizer "
            "purple) and a communication lane (red). Grey is idle: the bubble.")
trace_downloads(trace, png, f"train-{req[1]}-{req[2]}dev", key="train")

left, right = st.columns(2)
with left:
    figure(device_breakdown(trace), "Share of the simulated time each device computes, waits on communication, "
                                    "or idles.")
with right:
    st.line_chart({"this run": out["losses"], "one device": out["reference"]}, x_label="step", y_label="loss",
                  height=300)
    st.caption("Loss per step of the parallel run and of the single-device reference: they coincide.")
with st.expander("Memory over time", expanded=False):
    figure(memory_over_time(trace), "Bytes each device really held after each instruction, placed on the "
                                    "simulated clock.")
show_code(train, key="code")
