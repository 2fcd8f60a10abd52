"""Training playground: run real training steps of a parallel strategy on emulated devices, or only
price its program on the simulated clock; the overlap lab buckets the data-parallel gradients."""

import sys
import time

import streamlit as st
from charts import loss_spec, stage_map, timeline_chart
from ray_session import start_ray
from shared_runs import shared
from ui import BIND, figure, interactive, intro, remember, restore, show_code, show_error, trace_downloads

from simulator import (
    SCHEDULE_SPECS,
    SCHEDULES,
    STRATEGIES,
    HardwareDeviceModel,
    MoEGPTConfig,
    ParasimError,
    TrainConfig,
    compile_strategy,
    hardware_names,
    price_training,
    run_device_model,
    train,
    viz,
)
from simulator.run_models import LABELS, RUN_MODELS, describe
from simulator.trace import STEP_PART_LABELS
from simulator.units import fmt_bytes, fmt_time
from simulator.vocabulary import TRAIN_DEFAULTS, canonical_value

MODELS = {LABELS[name]: model for name, model in RUN_MODELS.items()}   # simulator.run_models: one table
MODEL_HELP = " ".join(describe(name) + "." for name in RUN_MODELS)
ABOUT = {"single": "one device: the reference", "dp": "data parallel: replicas, gradients AllReduced",
         "layer": "layer-wise model parallel: contiguous layers per device, one batch",
         "pp": "pipeline: layer stages, micro-batches on a schedule",
         "tp": "tensor parallel (Megatron): weights cut by columns/rows, AllReduce per block",
         "sp": "tensor + sequence parallel: AllGather / ReduceScatter around each block",
         "ep": "expert parallel: experts spread over devices, AllToAll dispatch and combine",
         "zero1": "ZeRO-1: optimizer state sharded", "zero2": "ZeRO-2: + gradients sharded",
         "zero3": "ZeRO-3: + parameters sharded, gathered when used",
         "cp": "context parallel: each sequence split over devices, ring or all-to-all attention",
         "hybrid": "dp × cp × pp × tp on Megatron's mesh (× ep for the MoE model)"}
MODES = ("run on Ray actors", "run in-process", "simulated clock only")
PIPELINED = ("pp", "hybrid", "cp")
BUCKETS = (0.01, 0.05, 0.25, 1.0, 4.0)
# The definitions of Trace.step_breakdown, shown as the help of each part
PART_HELP = {
    "compute": "a device runs a kernel of the model (forward, backward, weight gradient)",
    "exposed_comm": "its communication lane is busy while its compute lane is not: a collective or a "
                    "send/recv that nothing hides (light red on the timeline)",
    "bubble": "it is idle inside a pipelined step: a stage waits for its input or its gradient "
              "(grey on the timeline)",
    "other_idle": "it is idle outside a pipeline: waiting for a slower device (pale yellow on the timeline)",
    "optimizer": "it updates the weights",
}
KEYS = ("net_model", "strategy", "devices", "tp_degree", "ep_degree", "cp_degree", "attention", "h_cp", "h_dp", "h_ep", "h_pp", "h_tp", "microbatches", "pp_schedule", "v", "batch",
        "steps", "bucket", "bucket_mb", "grad_dtype", "price_on", "run_mode")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_degrees(model, devices: int) -> list[int]:
    """Tensor-parallel degrees that divide the devices and, for a GPT, its heads (Megatron cuts heads)."""
    heads = getattr(model, "heads", None)
    return [d for d in divisors(devices) if heads is None or heads % d == 0]


intro("Training playground",
      "Devices really compute numpy shards and really exchange tensors; the same program is priced on a "
      "simulated clock. Every run is checked against **one device** doing the same steps: parallelism may "
      "change the timeline and the memory, never the math.")

restore("training")
with st.sidebar:
    st.subheader("Model and strategy")
    model_name = st.selectbox("Model", list(MODELS), key="net_model", help=MODEL_HELP, **BIND)
    strategy = st.selectbox("Strategy", STRATEGIES, index=STRATEGIES.index("pp"), key="strategy", **BIND)
    st.caption(ABOUT.get(strategy, ""))
    devices = st.slider("Devices", 1, 8, 4, key="devices", disabled=strategy == "single",
                        help="a single device is the reference: the strategy 'single' always uses 1", **BIND)
    if strategy == "single":
        devices = 1
    dp = pp = 0
    tp = ep = cp = 1
    cp_kind = "ring"
    if strategy in ("cp", "hybrid"):
        cp_kind = st.radio("Context-parallel attention", ("ring", "all-to-all"), key="attention", horizontal=True,
                           help="ring: K/V blocks travel round the context group (Send/Recv); all-to-all "
                                "(Ulysses): heads <-> sequence, two AllToAlls per attention", **BIND)
    if strategy == "cp":
        cp = st.select_slider("Context-parallel degree c", divisors(devices), value=devices, key="cp_degree",
                              help="each sequence is split c ways; the remaining devices are data-parallel", **BIND)
    elif strategy in ("tp", "sp"):
        degrees = tp_degrees(MODELS[model_name], devices)
        tp = st.select_slider("Tensor-parallel degree t", degrees, value=degrees[-1], key="tp_degree",
                              help="divides the devices and the heads; the remaining devices are data-parallel "
                                   "replicas", **BIND)
    elif strategy == "ep":
        ep = st.select_slider("Expert-parallel degree e", divisors(devices), value=devices, key="ep_degree", **BIND)
    elif strategy == "hybrid":
        moe = isinstance(MODELS[model_name], MoEGPTConfig)
        c = st.columns(5 if moe else 4)
        ds = divisors(devices)
        pp0 = 2 if devices % 2 == 0 else 1
        dp = c[0].selectbox("dp", ds, index=ds.index(devices // pp0), key="h_dp", **BIND)
        pp = c[1].selectbox("pp", ds, index=ds.index(pp0), key="h_pp", **BIND)
        tp = c[2].selectbox("tp", tp_degrees(MODELS[model_name], devices), key="h_tp", **BIND)
        cp = c[3].selectbox("cp", ds, key="h_cp", **BIND)
        if moe:
            ep = c[4].selectbox("ep", divisors(MODELS[model_name].experts), key="h_ep", **BIND,
                                help="experts spread over ep ranks carved out of the dp × cp ranks (Megatron's MoE "
                                     "folding); ep divides the experts and dp × cp")
        st.caption(f"dp × cp × pp × tp = {dp * cp * pp * tp} (must be {devices}); ranks in Megatron's order, "
                   "tensor fastest, then context, data, pipeline" + (f"; experts over ep={ep} of the dp × cp ranks"
                                                                     if moe else ""))
    st.subheader("Batch and schedule")
    pipelined = strategy in PIPELINED
    microbatches = st.slider("Micro-batches", 1, 16, 4, key="microbatches", disabled=strategy in ("layer", "single"),
                             help="per step; layer-wise model parallelism passes the whole batch (1)", **BIND)
    schedule = st.selectbox("Pipeline schedule", SCHEDULES, index=SCHEDULES.index("1f1b"), key="pp_schedule",
                            disabled=not pipelined, **BIND)
    v = st.slider("Chunks per device v (interleaved)", 1, 4, 1, key="v",
                  disabled=not (pipelined and SCHEDULE_SPECS[schedule].virtual_stages), **BIND)
    batch = st.select_slider("Global batch", [16, 32, 64, 128], value=64, key="batch", **BIND)
    steps = st.slider("Steps", 1, 6, TRAIN_DEFAULTS["steps"], key="steps", **BIND)
    st.subheader("Overlap lab")
    bucket = st.toggle("Bucket the gradients (overlap with backward)", key="bucket",
                       help="PyTorch DDP: gradients packed into buckets in the order backward produces them; each "
                            "bucket's AllReduce starts as soon as it is full and runs while backward goes on. "
                            "Off: buckets of the default 25 MB (simulator.vocabulary.DEFAULT_BUCKET_MB) reduced after "
                            "the backward", **BIND)
    bucket_mb = st.select_slider("Bucket size (MB)", BUCKETS, value=0.25, key="bucket_mb", disabled=not bucket,
                                 help="smaller buckets start earlier; larger ones pay fewer latencies", **BIND)
    grad_dtype = st.selectbox("Gradients on the wire", ["float64", "float32", "float16"], key="grad_dtype",
                              help="cast before the AllReduce: fewer bytes, a rounding error the check measures",
                              **BIND)
    st.subheader("Run")
    hws = hardware_names()
    price_on = st.selectbox("Price the timeline on", hws, key="price_on", index=hws.index("teaching"),
                            help="teaching: an invented device on which these tiny models compute about as long "
                                 "as they communicate; cpu = a fixed 2-core CPU, the default of train() and parasim train; "
                                 "local = this machine (parasim calibrate); the others are "
                                 "datasheet presets (there the tiny models' kernels last nanoseconds)", **BIND)
    mode = st.radio("How", MODES, key="run_mode", **BIND,
                    help="Ray starts in the background the first time this page is opened (2 CPUs, one actor per "
                         "device); until it is ready, runs go in-process, where devices behave identically; the "
                         "simulated clock compiles and prices the steps without executing them")
    if mode == MODES[0]:
        st.caption(start_ray().status())
remember("training", *KEYS)
# the action beside what it changes, in view at the top of the results (not at the foot of the sidebar)
action = st.columns([1, 3], vertical_alignment="center")
run = action[0].button("Run training" if mode != MODES[2] else "Price on the clock", type="primary", key="run",
                       width="stretch", help="runs the settings of the sidebar")
action[1].caption(f"**{strategy}** on {devices} device{'s' if devices > 1 else ''} · {model_name} · "
                  f"{microbatches} micro-batches · batch {batch} · {steps} step{'s' if steps != 1 else ''} · priced on {price_on} · {mode}")


def make_config(model_name, strategy, devices, dp, pp, tp, ep, cp, cp_kind, microbatches, schedule, v, batch, steps,
                bucket_mb, grad_dtype):
    return TrainConfig(MODELS[model_name], strategy=strategy, devices=devices, dp=dp, pp=pp, tp=tp, ep=ep,
                       cp=cp, cp_comm_type=canonical_value("cp_comm_type", cp_kind),
                       microbatches=1 if strategy in ("layer", "single") else microbatches,
                       schedule=schedule if strategy in PIPELINED else "1f1b",
                       virtual_stages=v if strategy in PIPELINED and SCHEDULE_SPECS[schedule].virtual_stages else 1,
                       global_batch=batch, steps=steps, bucket_mb=bucket_mb, grad_dtype=grad_dtype)


def device_model(price_on: str, devices: int) -> HardwareDeviceModel:
    return run_device_model(devices, price_on)


def summary(cfg: TrainConfig, notes: dict) -> str:
    """One readable line: the strategy, the resolved degrees, the batch and the schedule."""
    parts = [f"{cfg.strategy} on {cfg.devices} device{'s' if cfg.devices > 1 else ''}",
             f"dp={cfg.dp} · pp={cfg.pp} · tp={cfg.tp}" + (f" · ep={cfg.ep}" if cfg.ep > 1 else "") + (f" · cp={cfg.cp}" if getattr(cfg, "cp", 1) > 1 else "")
             + (f" · zero_stage={cfg.zero_stage}" if cfg.zero_stage else ""),
             f"batch {cfg.global_batch} in {cfg.m} micro-batch{'es' if cfg.m > 1 else ''}"]
    if cfg.pp > 1:
        parts.append(f"schedule {notes.get('schedule', cfg.schedule)}, stages {notes.get('stages', '-')}")
    if cfg.bucket_mb:
        parts.append(f"gradient buckets of {cfg.bucket_mb:g} MB")
    if cfg.grad_dtype != "float64":
        parts.append(f"gradients sent as {cfg.grad_dtype}")
    return " · ".join(parts)


@st.cache_data(show_spinner="Compiling and pricing ...", max_entries=32)
def price_only(cfg: TrainConfig, price_on: str) -> dict:
    """Compile the strategy and price its steps on the clock, executing nothing."""
    trace, compiled = price_training(cfg, device_model(price_on, cfg.devices))
    resolved = cfg.resolved()
    return {"trace": trace, "losses": [], "reference": [], "diff": None, "sent": None, "wall_s": None,
            "summary": summary(resolved, compiled.notes), "stages": stage_map(resolved), "messages": None}


def run_steps(cfg: TrainConfig, price_on: str, rt, progress) -> dict:
    """`cfg.steps` real steps on `rt` (None: in-process), priced on `price_on`, checked against one device."""
    res = train(cfg, runtime=rt, device_model=device_model(price_on, cfg.devices), progress=progress)
    return {"trace": res.trace, "losses": res.losses, "reference": res.reference_losses,
            "diff": res.max_rel_weight_diff_vs_single, "verdict": res.verdict(), "sent": res.bytes_sent_per_device,
            "messages": res.messages, "wall_s": res.wall_time_s, "summary": summary(res.config, res.compiled.notes),
            "stages": stage_map(res.config)}


def run_for_real(cfg: TrainConfig, price_on: str, on_ray: bool, request: tuple) -> dict:
    """Run `cfg.steps` real steps with a progress bar, price them, compare with one device.
    On Ray when Ray is ready; while it is still starting, on the in-process runtime (the same
    results) and the run says so. An in-process run is deterministic, so it is computed once per
    server for all the sessions asking for the same `request` (the page's inputs; shared_runs).
    A refused configuration leaves no progress bar behind."""
    cfg.resolved()  # refuse bad degrees before drawing a bar or starting anything
    clicked = time.perf_counter()
    bar = st.progress(0.0, text="compiling ...")
    progress = lambda k, n: bar.progress(k / n, text=f"step {k} of {n} done")  # noqa: E731
    rt, where, share = None, "in-process", None
    try:
        if on_ray and start_ray().ready:
            from simulator import make_runtime

            bar.progress(0.0, text=f"starting {cfg.devices} Ray actors ...")
            rt, where = make_runtime("ray", cfg.devices), "on Ray actors"
            out = run_steps(cfg, price_on, rt, progress)
        else:
            where = "in-process (Ray was still starting)" if on_ray else where
            share = ("run", *request[:-1])  # the mode aside: a run in-process while Ray starts is the same run
            out, reused = shared(share, lambda: run_steps(cfg, price_on, None, progress),
                                 wait=lambda: bar.progress(0.0, text="another session is making this same run: "
                                                                      "waiting for its result ..."))
            if reused:
                where += ", made once on this server for every session asking for these settings"
    except ParasimError:
        bar.empty()
        raise
    finally:
        if rt is not None:
            rt.close()
    bar.progress(1.0, text="checked against one device")
    return {**out, "total_s": time.perf_counter() - clicked, "where": where, "share": share}


request = (model_name, strategy, devices, dp, pp, tp, ep, cp, cp_kind, microbatches, schedule, v, batch, steps,
           bucket_mb if bucket else None, grad_dtype, price_on, mode)
clicked_at = time.perf_counter()
if run:
    try:
        cfg = make_config(*request[:16])
        out = ({**price_only(cfg, price_on), "share": ("price", *request)} if mode == MODES[2]
               else run_for_real(cfg, price_on, on_ray=mode == MODES[0], request=request))
        st.session_state["train_run"] = (request, out)
    except ParasimError as err:
        show_error(err)
        if "train_run" in st.session_state:
            st.caption("Below: the last run that worked.")
if "train_run" not in st.session_state:
    st.info("Pick a model and a strategy in the sidebar and press **Run training** above (or choose "
            "*simulated clock only* to price the program without running it).")
    show_code(train, key="code")
    st.stop()

req, out = st.session_state["train_run"]
if req != request:
    st.warning("Showing the last run: the settings changed since. Press **Run training** above to run them.")
trace = out["trace"]
real = out["diff"] is not None
parts = trace.step_breakdown()

st.markdown(f"**Where the step goes** · {trace.steps} step{'s' if trace.steps > 1 else ''} of "
            f"{fmt_time(trace.step_time_s)} on {req[16]}, {fmt_time(trace.makespan_s)} simulated in all "
            "(shares of devices × time; they add up to 100%)")
c = [*st.columns(3), *st.columns(3)]  # three to a row: no label breaks inside a word at 1024 px
for col, (k, share) in zip(c, parts.items()):
    col.metric(STEP_PART_LABELS[k], f"{share:.1%}", help=PART_HELP[k])
c = [*st.columns(3), *st.columns(3)]  # three to a row: "3.4715" broke mid-number at 1024 px in presentation mode
c[0].metric("time per step", fmt_time(trace.step_time_s), help=f"simulated on {req[16]}: {fmt_time(trace.makespan_s)} "
            f"for {trace.steps} step(s), the same whether run or only priced")
c[1].metric("bytes sent per step", fmt_bytes(sum(trace.bytes_by_collective().values()) / trace.steps),
            help="by all devices together, every collective and send counted")
c[2].metric("peak memory per device", fmt_bytes(max(trace.peak_memory_bytes(), default=0)) if trace.memory
            else "not run", help="largest bytes one device held (measured on the devices)")
if real:
    c[3].metric("final loss", f"{out['losses'][-1]:.4f}", help="the loss of the last step's batch")
    c[4].metric("vs one device", f"{out['diff']:.1e}", help="max relative weight difference after training")
else:
    c[3].metric("final loss", "not run", help="the simulated clock prices the step without running it")
    c[4].metric("vs one device", "not run")
st.caption(out["summary"] + (f" · ran {out['where']}: {fmt_time(out['total_s'])} from the click to these results "
                              f"({fmt_time(out['wall_s'])} in the training steps; the rest starts the devices, "
                              "runs the single-device reference and checks it)" if real else ""))
if real:
    matches, line = out["verdict"]
    if matches:
        st.success(f"The check: after {len(out['losses'])} step(s) every weight equals the single-device run "
                   f"to {out['diff']:.1e} (relative); the losses coincide.")
    elif matches is None:
        st.info(f"The check: {line}.")
    else:
        st.error(f"The check: {line}.")

def draw_timeline() -> dict:
    return timeline_chart(trace, stage_of=out["stages"], title="timeline")


share = out["share"]  # None for a Ray run: its figures are drawn for its session alone
interactive(shared((*share, "timeline"), draw_timeline)[0] if share else draw_timeline(), key="timeline")
st.caption("Hover a bar for its details; drag to pan and scroll to zoom the time axis (double-click resets); click a "
           "bar or pick one in *highlight micro-batch* to follow a micro-batch through the stages. Each device has "
           "a compute lane (forward blue, backward orange, weight gradient green, optimizer purple) and a "
           "communication lane (red). On the compute lane, light red is exposed communication, grey the pipeline "
           "bubble, pale yellow other idle time; dashed lines mark the step boundaries.")
trace_downloads(trace, lambda: viz.png_bytes(viz.timeline(trace), dpi=120), f"train-{req[1]}-{req[2]}dev", key="train")

st.markdown("**Every bar of the timeline**, for the chosen devices")
ev_left, ev_right = st.columns([3, 10])
with ev_left:
    shown = st.multiselect("Devices", list(range(trace.n_devices)), default=[min(1, trace.n_devices - 1)],
                           key="event_devices")
    lanes = st.multiselect("Lanes", ["compute", "comm"], default=["compute", "comm"], key="event_lanes")
with ev_right:
    rows = [{"device": e.device, "lane": e.lane, "name": e.name, "phase": e.phase, "kind": e.kind,
             "micro-batch": e.microbatch, "step": e.step, "start": fmt_time(e.start_s),
             "duration": fmt_time(e.duration_s), "bytes": fmt_bytes(e.nbytes) if e.nbytes else "",
             "GFLOP": round(e.flops / 1e9, 4) or None, "group": str(list(e.group)) if e.group else ""}
            for e in sorted(trace.events, key=lambda e: (e.start_s, e.device)) if e.device in shown and e.lane in lanes]
    st.dataframe(rows[:3000], hide_index=True, width="stretch", height=280)
    st.caption(f"{len(rows)} events on the chosen devices" + (" (first 3000 shown)" if len(rows) > 3000 else ""))

left, right = st.columns(2)
with left:
    figure(lambda: viz.device_breakdown(trace), "Per device, the same five parts of the step.",
           share=share and (*share, "breakdown"))
with right:
    if real:
        st.markdown("**Loss per step: this run and one device**")
        interactive(loss_spec({"this run": out["losses"], "one device": out["reference"]}), key="loss")
        st.caption("One device's curve is dashed, drawn over this run's. " + (
            "They coincide: the parallel run computes the same math." if out["verdict"][0] else
            "Where they part, the run computes other numbers than one device: the check above says by how much."))
    else:
        st.info("Simulated clock only: nothing was executed, so there is no loss curve and no check. "
                "Choose *run in-process* or *run on Ray actors* to train for real.")

left, right = st.columns(2)
with left:
    st.markdown("**Bytes sent per step, by collective** (all devices together)")
    by = {k: b / trace.steps for k, b in trace.bytes_by_collective().items()}
    if by:
        st.dataframe([{"collective": k, "bytes per step, sum over devices": fmt_bytes(b),
                       "per device": fmt_bytes(b / trace.n_devices)} for k, b in by.items()], hide_index=True)
    else:
        st.caption("No communication: a single device.")
with right:
    st.markdown("**Time in each collective per step** (summed over devices)")
    tb = trace.time_by_collective()
    if tb:
        st.dataframe([{"collective": k, "time per step": fmt_time(t / trace.steps)} for k, t in tb.items()],
                     hide_index=True)
st.markdown("**Memory per device over time**")
figure(lambda: viz.memory_over_time(trace), "Bytes each device really held after each instruction, placed on the "
                                            "simulated clock." if trace.memory else None, share=share and (*share, "memory"))
show_code(train, compile_strategy, key="code")
if run:  # the server's side of a click, in the server's log (bench/bench_app_sessions.py reads it)
    print(f"parasim app: training script finished {time.perf_counter() - clicked_at:.3f} s after the click",
          file=sys.stderr, flush=True)
