"""Training playground: run real training steps of a parallel strategy on emulated devices, or only
price its program on the simulated clock."""

import streamlit as st
from ui import figure, friendly_errors, intro, show_code, trace_downloads

from simulator import (
    SCHEDULES,
    STRATEGIES,
    GPTConfig,
    HardwareDeviceModel,
    MLPConfig,
    MoEGPTConfig,
    ParasimError,
    TrainConfig,
    compile_strategy,
    hardware_names,
    simulate,
    train,
    viz,
)
from simulator.units import fmt_bytes, fmt_time

MODELS = {"MLP, 8 layers (64 → 256 → 8 classes)": MLPConfig(64, 256, 8, 8),
          "tiny GPT (2 blocks, h=32, 4 heads, s=16, V=64)": GPTConfig(2, 32, 4, 16, 64),
          "tiny MoE GPT (2 blocks, 4 experts, top-1)": MoEGPTConfig(2, 32, 4, 16, 64, experts=4)}
ABOUT = {"single": "one device: the reference", "dp": "data parallel: replicas, gradients AllReduced",
         "layer": "layer-wise model parallel: contiguous layers per device, one batch",
         "pp": "pipeline: layer stages, micro-batches on a schedule",
         "tp": "tensor parallel (Megatron): weights cut by columns/rows, AllReduce per block",
         "sp": "tensor + sequence parallel: AllGather / ReduceScatter around each block",
         "ep": "expert parallel: experts spread over devices, AllToAll dispatch and combine",
         "zero1": "ZeRO-1: optimizer state sharded", "zero2": "ZeRO-2: + gradients sharded",
         "zero3": "ZeRO-3: + parameters sharded, gathered when used",
         "cp": "context parallel: each sequence split over devices, ring or all-to-all attention",
         "hybrid": "dp × cp × pp × tp on Megatron's mesh"}
MODES = ("run on Ray actors", "run in-process", "simulated clock only")
PIPELINED = ("pp", "hybrid", "cp")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


intro("Training playground",
      "Devices really compute numpy shards and really exchange tensors; the same program is priced on a "
      "simulated clock. Every run is checked against **one device** doing the same steps: parallelism may "
      "change the timeline and the memory, never the math.")

with st.sidebar:
    st.subheader("Model and strategy")
    model_name = st.selectbox("Model", list(MODELS), key="model")
    strategy = st.selectbox("Strategy", STRATEGIES, index=STRATEGIES.index("pp"), key="strategy",
                            format_func=lambda s: f"{s} · {ABOUT.get(s, '')}")
    devices = st.slider("Devices", 1, 8, 4, key="devices")
    dp = pp = 0
    tp = ep = cp = 1
    cp_kind = "ring"
    if strategy in ("cp", "hybrid"):
        cp_kind = st.radio("Context-parallel attention", ("ring", "all-to-all"), key="cp_kind", horizontal=True,
                           help="ring: K/V blocks travel round the context group (Send/Recv); all-to-all "
                                "(Ulysses): heads <-> sequence, two AllToAlls per attention")
    if strategy == "cp":
        cp = st.select_slider("Context-parallel degree c", divisors(devices), value=devices, key="cp",
                              help="each sequence is split c ways; the remaining devices are data-parallel")
    elif strategy in ("tp", "sp"):
        tp = st.select_slider("Tensor-parallel degree t", divisors(devices), value=devices, key="tp",
                              help="the remaining devices are data-parallel replicas")
    elif strategy == "ep":
        ep = st.select_slider("Expert-parallel degree e", divisors(devices), value=devices, key="ep")
    elif strategy == "hybrid":
        c = st.columns(4)
        dp = c[0].selectbox("dp", divisors(devices), index=min(1, len(divisors(devices)) - 1), key="h_dp")
        pp = c[1].selectbox("pp", divisors(devices), index=min(1, len(divisors(devices)) - 1), key="h_pp")
        tp = c[2].selectbox("tp", divisors(devices), key="h_tp")
        cp = c[3].selectbox("cp", divisors(devices), key="h_cp")
        st.caption(f"dp × cp × pp × tp = {dp * cp * pp * tp} (must be {devices}); ranks in Megatron's order, "
                   "tensor fastest, then context, data, pipeline")
    st.subheader("Batch and schedule")
    pipelined = strategy in PIPELINED
    microbatches = st.slider("Micro-batches", 1, 16, 4, key="microbatches",
                             help="per step; layer-wise model parallelism uses 1")
    schedule = st.selectbox("Pipeline schedule", SCHEDULES, index=SCHEDULES.index("1f1b"), key="schedule",
                            disabled=not pipelined)
    v = st.slider("Chunks per device v (interleaved)", 1, 4, 1, key="v",
                  disabled=not (pipelined and schedule == "interleaved"))
    batch = st.select_slider("Global batch", [16, 32, 64, 128], value=64, key="batch")
    steps = st.slider("Steps", 1, 6, 3, key="steps")
    st.subheader("Run")
    hws = hardware_names()
    price_on = st.selectbox("Price the timeline on", hws, key="price_on",
                            index=hws.index("local") if "local" in hws else 0,
                            help="local = this machine (parasim calibrate); the others are datasheet presets")
    mode = st.radio("How", MODES, key="mode",
                    help="Ray starts once when the app server starts (2 CPUs, one actor per device); in-process "
                         "devices behave identically; the simulated "
                         "clock compiles and prices one step without executing it")
    run = st.button("Run training" if mode != MODES[2] else "Price on the clock", type="primary", key="run",
                    width="stretch")


def make_config(model_name, strategy, devices, dp, pp, tp, ep, cp, cp_kind, microbatches, schedule, v, batch, steps):
    return TrainConfig(MODELS[model_name], strategy=strategy, devices=devices, dp=dp, pp=pp, tp=tp, ep=ep,
                       cp=cp, cp_kind=cp_kind,
                       microbatches=1 if strategy == "layer" else microbatches,
                       schedule=schedule if strategy in PIPELINED else "1f1b",
                       virtual_stages=v if strategy in PIPELINED and schedule == "interleaved" else 1,
                       batch_size=batch, steps=steps)


def device_model(price_on: str, devices: int) -> HardwareDeviceModel:
    return HardwareDeviceModel(price_on, devices, dtype="fp64" if price_on == "local" else "bf16")


@st.cache_data(show_spinner="Compiling and pricing ...", max_entries=32)
def price_only(cfg: TrainConfig, price_on: str) -> dict:
    """Compile the strategy and price one step on the clock, executing nothing."""
    cfg = cfg.resolved()
    compiled = compile_strategy(cfg)
    trace = simulate(compiled.program, device_model(price_on, cfg.devices))
    return {"trace": trace, "losses": [], "reference": [], "diff": None, "sent": None, "wall_s": None,
            "notes": dict(compiled.notes), "config": repr(cfg), "messages": None}


def run_for_real(cfg: TrainConfig, price_on: str, on_ray: bool) -> dict:
    """Run `cfg.steps` real steps with a progress bar, price them, compare with one device.
    A refused configuration leaves no progress bar behind (only its one-line error)."""
    cfg.resolved()  # refuse bad degrees before drawing a bar or starting Ray
    bar = st.progress(0.0, text="compiling ...")
    rt = None
    try:
        if on_ray:
            from ray_session import get_ray

            from simulator import make_runtime

            get_ray()
            rt = make_runtime("ray", cfg.devices)
        res = train(cfg, runtime=rt, device_model=device_model(price_on, cfg.devices),
                    progress=lambda k, n: bar.progress(k / n, text=f"step {k} of {n} done"))
    except ParasimError:
        bar.empty()
        raise
    finally:
        if rt is not None:
            rt.close()
    bar.progress(1.0, text="checked against one device")
    return {"trace": res.trace, "losses": res.losses, "reference": res.reference_losses,
            "diff": res.max_rel_weight_diff_vs_single, "sent": res.bytes_sent_per_device,
            "messages": res.messages, "wall_s": res.wall_time_s, "notes": dict(res.compiled.notes),
            "config": repr(res.config)}


request = (model_name, strategy, devices, dp, pp, tp, ep, cp, cp_kind, microbatches, schedule, v, batch, steps,
           price_on, mode)
if run:
    with friendly_errors():
        cfg = make_config(*request[:14])
        out = price_only(cfg, price_on) if mode == MODES[2] else run_for_real(cfg, price_on, on_ray=mode == MODES[0])
    st.session_state["train_run"] = (request, out)
if "train_run" not in st.session_state:
    st.info("Pick a model and a strategy in the sidebar and press **Run training** (or choose "
            "*simulated clock only* to price the program without running it).")
    show_code(train, key="code")
    st.stop()

req, out = st.session_state["train_run"]
if req != request:
    st.caption("Showing the last run; press the button in the sidebar to run the current settings.")
trace = out["trace"]
real = out["diff"] is not None

c = st.columns(6)
c[0].metric("bubble", f"{trace.bubble_fraction():.1%}", help="idle share of devices x simulated time")
c[1].metric("simulated time", fmt_time(trace.makespan_s), help=f"{len(out['losses']) or 1} step(s) on {req[12]}")
c[2].metric("bytes moved", fmt_bytes(sum(trace.bytes_by_collective().values())))
c[3].metric("peak memory", fmt_bytes(max(trace.peak_memory_bytes(), default=0)) if trace.memory else "not run",
            help="largest bytes one device held (measured on the devices)")
if real:
    c[4].metric("final loss", f"{out['losses'][-1]:.4f}")
    c[5].metric("vs one device", f"{out['diff']:.1e}", help="max relative weight difference after training")
else:
    c[4].metric("wall time", "not run")
    c[5].metric("vs one device", "not run")
st.caption(f"{out['config']} · schedule {out['notes'].get('schedule', '-')} · "
           f"stages {out['notes'].get('stages', '-')}" + (f" · wall time {fmt_time(out['wall_s'])}" if real else ""))
if real:
    if out["diff"] < 1e-9:
        st.success(f"The check: after {len(out['losses'])} step(s) every weight equals the single-device run "
                   f"to {out['diff']:.1e} (relative); the losses coincide.")
    else:
        st.warning(f"The weights differ from the single-device run by {out['diff']:.2e} (relative).")

png = figure(viz.timeline(trace), "Each device has a compute lane (forward blue, backward orange, weight gradient "
             "green, optimizer purple) and a communication lane (red). Grey is idle: the bubble.")
trace_downloads(trace, png, f"train-{req[1]}-{req[2]}dev", key="train")

st.markdown("**Every bar of the timeline** (what hovering would show), for the chosen devices")
ev_left, ev_right = st.columns([3, 10])
with ev_left:
    shown = st.multiselect("Devices", list(range(trace.n_devices)), default=[min(1, trace.n_devices - 1)],
                           key="event_devices")
    lanes = st.multiselect("Lanes", ["compute", "comm"], default=["compute", "comm"], key="event_lanes")
with ev_right:
    rows = [{"device": e.device, "lane": e.lane, "name": e.name, "phase": e.phase, "kind": e.kind,
             "micro-batch": e.microbatch, "step": e.step, "start": fmt_time(e.start_s),
             "duration": fmt_time(e.duration_s), "bytes": e.nbytes or None, "GFLOP": round(e.flops / 1e9, 4) or None,
             "group": str(list(e.group)) if e.group else ""}
            for e in sorted(trace.events, key=lambda e: (e.start_s, e.device)) if e.device in shown and e.lane in lanes]
    st.dataframe(rows[:3000], hide_index=True, width="stretch", height=280)
    st.caption(f"{len(rows)} events on the chosen devices" + (" (first 3000 shown)" if len(rows) > 3000 else ""))

left, right = st.columns(2)
with left:
    figure(viz.device_breakdown(trace), "Share of the simulated time each device computes, waits on communication, "
                                        "or idles.")
with right:
    if real:
        st.markdown("**Loss per step: this run and one device**")
        st.line_chart({"this run": out["losses"], "one device": out["reference"]}, x_label="step", y_label="loss",
                      height=300)
        st.caption("The two curves coincide: the parallel run computes the same math.")
    else:
        st.info("Simulated clock only: nothing was executed, so there is no loss curve and no check. "
                "Choose *run in-process* or *run on Ray actors* to train for real.")

left, right = st.columns(2)
with left:
    st.markdown("**Bytes by collective** (whole run)")
    by = trace.bytes_by_collective()
    if by:
        st.bar_chart({"collective": list(by), "bytes": list(by.values())}, x="collective", y="bytes",
                     horizontal=True, x_label="", y_label="bytes", height=70 + 40 * len(by))
        st.caption(" · ".join(f"{k} {fmt_bytes(b)}" for k, b in by.items()))
    else:
        st.caption("No communication: a single device.")
with right:
    st.markdown("**Time in each collective** (summed over devices)")
    tb = trace.time_by_collective()
    if tb:
        st.dataframe([{"collective": k, "time": fmt_time(t)} for k, t in tb.items()], hide_index=True)
st.markdown("**Memory per device over time**")
figure(viz.memory_over_time(trace), "Bytes each device really held after each instruction, placed on the "
                                    "simulated clock." if trace.memory else None)
show_code(train, compile_strategy, key="code")
