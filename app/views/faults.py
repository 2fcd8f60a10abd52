"""Fault tolerance: inject a device failure into a real run and watch the recovery on the timeline."""

import streamlit as st
from charts import stage_map, timeline_chart
from ui import BIND, interactive, intro, remember, restore, show_code, show_error, trace_downloads

from simulator import (
    Fault,
    ParasimError,
    TrainConfig,
    run_device_model,
    train,
    train_resilient,
    viz,
)
from simulator.run_models import LABELS, RUN_MODELS
from simulator.units import fmt_time

MODELS = {LABELS[name]: RUN_MODELS[name] for name in ("mlp", "gpt")}  # simulator.run_models, as on the Training playground
STRATEGIES = {"dp": "data parallel (replicas can restore a lost device)",
              "pp": "pipeline (no replicas: restore from the checkpoint)",
              "zero1": "ZeRO-1 (sharded optimizer state: restore from the checkpoint)",
              "hybrid": "dp 2 × pp 2"}
SENDS = ("pp", "hybrid")  # the strategies whose programs have point-to-point sends (a drop needs one)
KINDS = {"kill": "the device dies (its actor is gone)", "fail": "it crashes at an instruction",
         "slow": "a straggler: slow, no failure", "drop": "a message is lost (pipeline sends only)"}

intro("Fault tolerance",
      "Devices fail. The driver detects the failure, restarts the device and restores its state: from a "
      "**replica** when a data-parallel peer still holds it (only the failed step is retried), otherwise from the "
      "last **checkpoint** (every step since then is replayed). Replays use the same batches, so the final "
      "weights equal a fault-free run exactly. The timeline shows the **lost** work (dark red-brown), the failure "
      "(black), the recovery (cyan) and the **replayed** steps (hatched).")

restore("faults")
with st.sidebar:
    st.subheader("Run")
    model_name = st.selectbox("Model", list(MODELS), key="f_model", **BIND)
    strategy = st.selectbox("Strategy", list(STRATEGIES), key="f_strategy", **BIND)
    st.caption(STRATEGIES[strategy])
    devices = 4
    steps = st.slider("Steps", 2, 8, 6, key="f_steps", **BIND)
    checkpoint_every = st.slider("Checkpoint every k steps (0: never)", 0, 4, 2, key="ckpt", **BIND,
                                 help="a checkpoint saves every device's weights and optimizer state after the "
                                      "step; a device with no live replica is restored from the last one")
    replicas = st.toggle("Restore from replicas when possible", value=True, key="replicas", **BIND,
                         help="a data-parallel peer holds the same weights: copy them and retry only the "
                              "failed step")
    st.subheader("Fault")
    offered = [k for k in KINDS if k != "drop" or strategy in SENDS]  # every choice gives a valid run
    if st.session_state.get("fault") not in (None, *offered):  # drop, then a strategy without sends
        del st.session_state["fault"]
    kind = st.selectbox("Kind", offered, key="fault", **BIND,
                        help="drop is offered for the strategies whose devices send messages (pp, hybrid)")
    st.caption(KINDS[kind])
    device = st.slider("Device", 0, devices - 1, 1, key="device", **BIND)
    if st.session_state.get("fault_step", 0) > steps - 1:  # fewer steps than before: the last one
        st.session_state["fault_step"] = steps - 1
    step = st.slider("At step", 0, steps - 1, min(3, steps - 1), key="fault_step", **BIND,
                     help="steps count from 0")
    at_ins = st.number_input("At instruction # (-1: the kind's default place)", -1, 10_000, -1, key="ins", **BIND,
                             help="the index in the device's program; by default a kill strikes before the "
                                  "step, a crash at the step's first instruction, a drop at its first send")
remember("faults", "f_model", "f_strategy", "f_steps", "ckpt", "replicas", "fault", "device", "fault_step", "ins")
# the action in view at the top of the results (not at the foot of the sidebar)
action = st.columns([1, 3], vertical_alignment="center")
run = action[0].button("Run with the fault", type="primary", key="run", width="stretch",
                       help="runs the settings of the sidebar")
action[1].caption(f"**{strategy}** · {model_name} · {steps} steps · checkpoint every {checkpoint_every} · "
                  f"fault: {kind} device {device} at step {step}")

WHAT = {"kill": "kill device {d} before step {s}", "fail": "crash device {d} in step {s}",
        "slow": "slow down device {d} in step {s}", "drop": "drop a message of device {d} in step {s}"}


def describe_fault(kind: str, device: int, step: int, ins: int) -> str:
    """The fault in words: 'kill device 1 before step 3' (at instruction #5 when chosen)."""
    return WHAT[kind].format(d=device, s=step) + (f", at instruction #{ins}" if ins >= 0 else "")


def describe_recovery(r: dict) -> str:
    """A recovery in words; a lost message restarts no device and restores nothing: the step is retried."""
    replay = r["step"] - r["resume_step"] + 1
    if not r["restarted"]:
        return (f"no device lost its state: every device retried step {r['step']} (the lost message is sent "
                "again)")
    devs = ", ".join(map(str, r["restarted"]))
    source = ("copied from a data-parallel replica" if r["from"] == "replicas"
              else f"restored from the checkpoint taken before step {r['resume_step']}")
    return (f"device{'s' if len(r['restarted']) > 1 else ''} {devs} restarted, state {source}; resumed at step "
            f"{r['resume_step']} (replaying {replay} step{'s' if replay > 1 else ''}).")


def make_config(model_name: str, strategy: str, steps: int) -> TrainConfig:
    kw = {"dp": 2, "pp": 2} if strategy == "hybrid" else {}
    return TrainConfig(MODELS[model_name], strategy=strategy, devices=4, microbatches=4, global_batch=64,
                       steps=steps, **kw)


@st.cache_data(show_spinner="Training with an injected fault ...", max_entries=16)
def run_with_fault(model_name, strategy, steps, ckpt, replicas, kind, device, step, ins) -> dict:
    """train_resilient() with one Fault, and the same run without it (for the lost time)."""
    cfg = make_config(model_name, strategy, steps)
    dm = run_device_model(4)  # the fixed default preset of real runs
    fault = Fault(device, step, kind, None if ins < 0 else ins)
    res = train_resilient(cfg, faults=(fault,), checkpoint_every=ckpt, replicas=replicas, device_model=dm)
    clean = train(cfg, device_model=dm, check=False)
    t = res.train
    return {"trace": t.trace, "diff": t.max_rel_weight_diff_vs_single, "clean_s": clean.trace.makespan_s,
            "injected": res.faults_injected, "recovered": res.faults_recovered, "replayed": res.replayed_steps,
            "reports": res.reports, "recoveries": res.recoveries, "checkpoints": res.checkpoints,
            "stages": stage_map(cfg.resolved()), "same_as_clean": max(
                abs(a - b) for a, b in zip(t.losses, clean.losses)) if t.losses else 0.0}


request = (model_name, strategy, steps, checkpoint_every, replicas, kind, device, step, int(at_ins))
if run:
    try:
        st.session_state["fault_run"] = (request, run_with_fault(*request))
    except ParasimError as err:  # the CLI's fault spec (kill:1@3) in words
        spec = f"fault {Fault(device, step, kind, None if at_ins < 0 else int(at_ins))!r}"
        show_error(str(err).replace(spec, describe_fault(kind, device, step, int(at_ins)).capitalize()))
        if "fault_run" in st.session_state:
            st.caption("Below: the last run that worked.")
if "fault_run" not in st.session_state:
    st.info("Choose a fault in the sidebar and press **Run with the fault** above. "
            "Try a kill on `dp` (restored from a replica) and then on `pp` (restored from the checkpoint).")
    show_code(train_resilient, key="code")
    st.stop()

req, out = st.session_state["fault_run"]
if req != request and not run:
    st.warning("Showing the last run: the settings changed since. Press **Run with the fault** above to run them.")
trace = out["trace"]

c = [*st.columns(3), *st.columns(3)]  # three to a row: no label breaks inside a word at 1024 px
c[0].metric("fault", describe_fault(*req[5:]), help=f"the library's Fault: kind {req[5]}, device {req[6]}, "
            f"step {req[7]}" + (f", instruction #{req[8]}" if req[8] >= 0 else ""))
c[1].metric("recovered", f"{out['recovered']} of {out['injected']}" if out["reports"] else "nothing failed",
            help="failures the driver detected and recovered from; a straggler is slow, it does not fail")
c[2].metric("replayed steps", out["replayed"], help="steps run again after the recovery (hatched)")
c[3].metric("simulated time", fmt_time(trace.makespan_s),
            f"+{fmt_time(trace.makespan_s - out['clean_s'])}" if trace.makespan_s > out["clean_s"] else None,
            delta_color="inverse", help="against the same run without the fault")
c[4].metric("checkpoints before steps", ", ".join(map(str, out["checkpoints"])) or "none",
            help="each checkpoint holds the state at the start of that step")
c[5].metric("vs one device", f"{out['diff']:.1e}", help="max relative weight difference after training")

for line in out["reports"]:
    st.error(f"Detected: {line}")
for r in out["recoveries"]:
    st.success(f"Recovered: {describe_recovery(r)}")
st.caption(f"Losses of the recovered run differ from the fault-free run by at most {out['same_as_clean']:.1e}.")
if not out["reports"]:
    st.info("Nothing failed: a slow device only lengthens its instruction on the timeline.")

interactive(timeline_chart(trace, stage_of=out["stages"], title="timeline with the fault"), key="timeline")
st.caption("Dark red-brown: work of the failed attempt, thrown away. Black: the failed instruction. Cyan: restart and "
           "restore. Replayed steps show attempt 1 in the tooltip (hatched in the PNG). Hover a bar for its "
           "details; drag to pan, scroll to zoom (double-click resets); dashed lines mark the step boundaries.")
trace_downloads(trace, lambda: viz.png_bytes(viz.timeline(trace), dpi=120), f"faults-{req[1]}-{req[5]}-d{req[6]}-s{req[7]}", key="faults")
st.markdown("**Events of the failure and the recovery**")
rows = [{"device": e.device, "phase": e.phase, "name": e.name, "step": e.step, "attempt": e.attempt,
         "start": fmt_time(e.start_s), "duration": fmt_time(e.duration_s)}
        for e in trace.events if e.phase in ("failure", "recovery")]
st.dataframe(rows, hide_index=True, width="stretch")
show_code(train_resilient, key="code")
