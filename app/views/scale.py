"""Scale explorer: step time, MFU and memory of GPT training at cluster scale (cost model); the
configuration search and why the alternatives lose; two configurations side by side; goodput."""

import streamlit as st
from ui import figure, intro, or_error, show_code

from simulator import (
    PRICED_SCHEDULES,
    FailureModel,
    ModelSpec,
    ParallelConfig,
    checkpoint_nbytes,
    daly_interval_s,
    estimate,
    get_hardware,
    get_model,
    goodput,
    goodput_curve,
    hardware_names,
    model_names,
    search_training,
    viz,
    young_interval_s,
)
from simulator.units import fmt_time

SCHEDULES = PRICED_SCHEDULES  # the schedules the closed form prices (simulator.parallel.schedule_registry)
RECOMPUTE = ("none", "selective", "full")
CUSTOM = "custom ..."
TP, PP, DP = [1, 2, 4, 8], [1, 2, 4, 8, 12, 16, 24, 32, 64], [1, 2, 4, 8, 16, 32, 64, 128]

intro("Scale explorer",
      "Too big to run, cheap to price: the closed-form cost model gives step time, TFLOP/s per GPU, MFU and "
      "memory per GPU for a GPT under tensor (t), pipeline (p) and data (d) parallelism, as in Megatron-LM "
      "(Narayanan et al. 2021); it searches every configuration, says why each alternative loses, and "
      "prices failures against checkpoints.")

with st.sidebar:
    st.subheader("Model and cluster")
    names = list(model_names()) + [CUSTOM]
    model_name = st.selectbox("Model", names, index=names.index("gpt3-175b"), key="model")
    if model_name == CUSTOM:
        c = st.columns(2)
        custom = (c[0].number_input("layers L", 1, 512, 64, key="c_L"),
                  c[1].number_input("hidden h", 64, 65536, 8192, 64, key="c_h"),
                  c[0].number_input("heads a", 1, 512, 64, key="c_a"),
                  c[1].number_input("sequence s", 128, 131072, 2048, key="c_s"),
                  c[0].number_input("vocabulary V", 1000, 500000, 51200, key="c_V"))
    hws = [h for h in hardware_names() if h != "local"]
    hw = st.selectbox("Hardware", hws, index=hws.index("a100-80gb"), key="hw")
    B = st.select_slider("Global batch B", [64, 128, 256, 512, 1024, 1536, 2048, 4096], value=512, key="B")


def fmt_long(seconds: float) -> str:
    """Durations from seconds to days in the unit that reads best."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return fmt_time(seconds)


def model_spec():
    """The chosen preset, or the custom ModelSpec (validated by the library)."""
    if model_name != CUSTOM:
        return get_model(model_name)
    L, h, a, s, V = (int(x) for x in custom)
    return ModelSpec("custom", L, h, a, s, V)


def config_widgets(prefix: str, defaults: dict, per_row: int = 4) -> dict:
    """t, p, d, b, schedule, v, recompute, SP and ZeRO widgets (keys prefixed) -> ParallelConfig kwargs.
    `per_row` = 2 in the half-width columns of "Compare two", so no label is cut off."""
    cells = [c for _ in range(8 // per_row) for c in st.columns(per_row)]
    kw = {"tp": cells[0].select_slider("Tensor parallel t", TP, value=defaults["tp"], key=f"{prefix}tp"),
          "pp": cells[1].select_slider("Pipeline stages p", PP, value=defaults["pp"], key=f"{prefix}pp"),
          "dp": cells[2].select_slider("Data parallel d", DP, value=defaults["dp"], key=f"{prefix}dp"),
          "micro_batch_size": cells[3].select_slider("Micro-batch b", [1, 2, 4, 8], value=1, key=f"{prefix}b")}
    kw["schedule"] = cells[4].selectbox("Schedule", SCHEDULES, index=SCHEDULES.index(defaults["schedule"]),
                                        key=f"{prefix}schedule")
    kw["virtual_stages"] = cells[5].slider("Chunks v (interleaved)", 1, 4, defaults.get("v", 1), key=f"{prefix}v",
                                           disabled=kw["schedule"] != "interleaved")
    if kw["schedule"] != "interleaved":
        kw["virtual_stages"] = 1
    kw["recompute"] = cells[6].selectbox("Recompute", RECOMPUTE, index=RECOMPUTE.index(defaults["recompute"]),
                                         key=f"{prefix}recompute")
    kw["sequence_parallel"] = cells[7].toggle("Sequence parallel", value=defaults.get("sp", False),
                                              key=f"{prefix}sp", disabled=kw["tp"] == 1) and kw["tp"] > 1
    return kw


@st.cache_data(show_spinner=False)
def explore(model: ModelSpec, hw: str, B: int, kw: tuple) -> dict:
    """estimate() of one configuration under ZeRO stages 0..3 (plain dicts, cheap to cache); with a
    pipeline only 0 and 1 (ZeRO-2/3 with pp > 1 are refused, as DeepSpeed refuses them)."""
    out = {}
    for z in range(4 if dict(kw)["pp"] == 1 else 2):
        cfg = ParallelConfig(global_batch=B, zero_stage=z, **dict(kw))
        out[z] = estimate(model, cfg, hw).as_dict()
        out[z]["config"] = repr(cfg)
    return {"by_zero": out, "capacity": get_hardware(hw).memory_bytes}


def time_parts(r: dict) -> dict:
    return {"compute": r["compute_time_s"], "bubble": r["bubble_time_s"],
            "exposed comm": r["exposed_comm_s"], "optimizer": r["optimizer_time_s"]}


def memory_bar(r: dict) -> dict:
    m = r["memory"]
    return {"model_state": m["model_state_bytes"], "activations": m["activation_bytes"], "logits": m["logits_bytes"]}


def show_metrics(r: dict, base: dict | None = None) -> None:
    c = st.columns(6)

    def delta(key, fmt):
        return None if base is None else fmt(r[key] - base[key])

    c[0].metric("GPUs", r["gpus"])
    c[1].metric("step time", fmt_time(r["step_time_s"]), delta("step_time_s", lambda d: f"{d:+.3g} s"),
                delta_color="inverse")
    c[2].metric("TFLOP/s per GPU", f"{r['tflops_per_gpu']:.0f}", delta("tflops_per_gpu", lambda d: f"{d:+.0f}"))
    c[3].metric("MFU", f"{r['mfu']:.1%}", delta("mfu", lambda d: f"{d * 100:+.1f} pt"))
    c[4].metric("bubble", f"{r['bubble_fraction']:.1%}", delta("bubble_fraction", lambda d: f"{d * 100:+.1f} pt"),
                delta_color="inverse")
    c[5].metric("memory per GPU", f"{r['memory_per_gpu_bytes'] / 1e9:.1f} GB", "OOM" if r["oom"] else None,
                delta_color="inverse" if r["oom"] else "normal")


spec = or_error(model_spec)
if spec is None:
    st.stop()
st.caption(f"{spec!r} · {get_hardware(hw).name}")
tab_est, tab_search, tab_cmp, tab_good = st.tabs(["Estimate", "Search configurations", "Compare two",
                                                  "Goodput and checkpoints"])

with tab_est:
    kw = config_widgets("", {"tp": 8, "pp": 8, "dp": 8, "schedule": "1f1b", "recompute": "full"})
    res = or_error(explore, spec, hw, B, tuple(sorted(kw.items())))
    if res is not None:
        zero = st.radio("ZeRO stage for the numbers below", list(res["by_zero"]), horizontal=True, key="zero",
                        help="ZeRO-2/3 need pp = 1: DeepSpeed refuses them with a pipeline")
        r = res["by_zero"][zero]
        show_metrics(r)
        st.caption(r["config"])
        if r["oom"]:
            st.warning(f"Out of memory: {r['memory_per_gpu_bytes'] / 1e9:.1f} GB per GPU needed, "
                       f"{res['capacity'] / 1e9:.0f} GB available. Raise t or p, recompute activations, or "
                       "shard the model states with a higher ZeRO stage.")
        left, right = st.columns([3, 2])
        with left:
            figure(viz.memory_breakdown({f"ZeRO-{z}": memory_bar(e) for z, e in res["by_zero"].items()},
                                        res["capacity"], title=f"memory per GPU on {hw}"),
                   "Model states shrink with each ZeRO stage (Rajbhandari et al. 2020); activations depend on t, "
                   "p, recomputation and the schedule's micro-batches in flight (Korthikanti et al. 2022).")
        with right:
            st.markdown("**Where a step goes**")
            parts = time_parts(r)
            st.bar_chart({"part": list(parts), "seconds": list(parts.values())}, x="part", y="seconds",
                         horizontal=True, height=220)
            st.caption(" · ".join(f"{k} {fmt_time(t)}" for k, t in parts.items()))
            st.markdown("**Communication by purpose**")
            st.dataframe([{"purpose": k.replace("_", " "), "time": fmt_time(t)}
                          for k, t in r["comm_time_by_kind"].items()], hide_index=True, width="stretch")
    show_code(estimate, key="code")


@st.cache_data(show_spinner="Searching every configuration ...")
def search(model: ModelSpec, hw: str, gpus: int, B: int, schedules: tuple, zeros: tuple, top: int) -> dict:
    """search_training(): the fastest fits and, per other (t, p, d), why it loses (plain dicts)."""
    return search_training(model, hw, gpus, B, schedules=schedules, zero_stages=zeros, top=top).as_dict()


with tab_search:
    c = st.columns([1, 2, 2, 1])
    gpus = c[0].number_input("GPUs", 1, 65536, 512, key="s_gpus")
    schedules = c[1].multiselect("Schedules", SCHEDULES, default=list(SCHEDULES), key="s_schedules")
    zeros = c[2].multiselect("ZeRO stages", [0, 1, 2, 3], default=[0, 1], key="s_zeros")
    top = c[3].number_input("Show top", 1, 50, 10, key="s_top")
    if st.button("Search", type="primary", key="search"):
        st.session_state["search_request"] = (spec, hw, int(gpus), B, tuple(schedules), tuple(zeros), int(top))
    req = st.session_state.get("search_request")
    if req is None:
        st.info("Every t (powers of two dividing the heads), p (dividing the layers), d = GPUs/(t p), micro-batch, "
                "schedule, ZeRO stage, recomputation and sequence parallelism is priced with the cost model. "
                "Press **Search**.")
    else:
        found = or_error(search, *req)
        if found is not None:
            best = found["top"][0]
            st.success(f"Best of {found['evaluated']:,} priced configurations ({found['considered']:,} considered): "
                       f"**{best['config']}**: {fmt_time(best['step_time_s'])} per step, MFU {best['mfu']:.1%}, "
                       f"{best['memory_per_gpu_bytes'] / 1e9:.1f} GB per GPU")

            def row(d, rank=None):
                out = {} if rank is None else {"rank": rank}
                out.update({"t": d["tp"], "p": d["pp"], "d": d["dp"]})
                if "reason" in d:
                    out["why it loses"] = d["reason"]
                out.update({"b": d["micro_batch_size"],
                            "schedule": d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else ""),
                            "recompute": d["recompute"], "SP": d["sequence_parallel"], "ZeRO": d["zero_stage"],
                            "step time (s)": round(d["step_time_s"], 3), "MFU": f"{d['mfu']:.1%}",
                            "bubble": f"{d['bubble_fraction']:.1%}",
                            "GB per GPU": round(d["memory_per_gpu_bytes"] / 1e9, 1)})
                return out

            st.markdown("**Ranked: the fastest configurations that fit**")
            st.dataframe([row(d, i + 1) for i, d in enumerate(found["top"])], hide_index=True, width="stretch")
            st.markdown("**Why the alternatives lose**: the best configuration of every other (t, p, d) layout, "
                        "then faster ones that do not fit in memory")
            st.dataframe([row(d) for d in found["alternatives"]], hide_index=True, width="stretch",
                         column_config={"why it loses": st.column_config.TextColumn(width="large")})
    show_code(search_training, key="code_search")

with tab_cmp:
    left, right = st.columns(2, gap="large")
    with left:
        st.markdown("#### Configuration A")
        kw_a = config_widgets("a_", {"tp": 8, "pp": 8, "dp": 8, "schedule": "1f1b", "recompute": "full"}, 2)
        zero_a = st.radio("ZeRO (A)", [0, 1, 2, 3], horizontal=True, key="a_zero")
    with right:
        st.markdown("#### Configuration B")
        kw_b = config_widgets("b_", {"tp": 4, "pp": 16, "dp": 8, "schedule": "interleaved", "v": 2,
                                     "recompute": "selective", "sp": True}, 2)
        zero_b = st.radio("ZeRO (B)", [0, 1, 2, 3], horizontal=True, index=1, key="b_zero")
    ra = or_error(explore, spec, hw, B, tuple(sorted(kw_a.items())))
    rb = or_error(explore, spec, hw, B, tuple(sorted(kw_b.items())))
    if ra is not None and rb is not None:
        a, b = ra["by_zero"][zero_a], rb["by_zero"][zero_b]
        st.markdown("**A**")
        show_metrics(a)
        st.markdown("**B** (deltas against A)")
        show_metrics(b, a)
        c1, c2 = st.columns(2)
        with c1:
            figure(viz.memory_breakdown({"A": memory_bar(a), "B": memory_bar(b)}, ra["capacity"],
                                        title="memory per GPU", width=6.5), f"A: {a['config']}\n\nB: {b['config']}")
        with c2:
            pa, pb = time_parts(a), time_parts(b)
            st.markdown("**Where a step goes (seconds)**")
            st.bar_chart({"part": list(pa), "A": list(pa.values()), "B": list(pb.values())}, x="part", y=["A", "B"],
                         stack=False, horizontal=True, height=280, y_label="seconds")
    show_code(estimate, key="code_cmp")

with tab_good:
    c = st.columns(4)
    g_gpus = c[0].number_input("GPUs", 1, 1_000_000, 1024, key="g_gpus")
    mtbf = c[1].number_input("MTBF per GPU (hours)", 100, 10_000_000, 50_000, 1000, key="g_mtbf",
                             help="an assumption: vendors do not publish one; large clusters report a failure "
                                  "every few hours")
    write = c[2].number_input("Checkpoint write bandwidth (GB/s)", 1, 10_000, 50, key="g_write")
    restart = c[3].number_input("Restart time (s)", 0, 36_000, 600, 60, key="g_restart",
                                help="rescheduling and job start, excluding the checkpoint read")
    ckpt = checkpoint_nbytes(spec.params())
    fm = or_error(FailureModel, int(g_gpus), float(mtbf), ckpt, float(write) * 1e9, None, float(restart))
    if fm is not None:
        curve = or_error(goodput_curve, fm)
        if curve is not None:
            young, daly = young_interval_s(fm), daly_interval_s(fm)
            g = goodput(fm, daly)
            c = st.columns(4)
            c[0].metric("system MTBF", fmt_long(fm.system_mtbf_s), help="MTBF per GPU / GPUs")
            c[1].metric("checkpoint C", fmt_long(fm.checkpoint_time_s), help=f"{ckpt / 1e9:.0f} GB at 14 B/param")
            c[2].metric("best interval (Daly)", fmt_long(daly), help=f"Young: {fmt_long(young)}")
            c[3].metric("goodput at best", f"{g.goodput:.1%}")
            figure(viz.goodput_chart(curve, young_s=young, daly_s=daly, title=f"{spec.name} on {int(g_gpus)} GPUs"),
                   "Checkpoint too often and the writes dominate; too rarely and each failure loses half an "
                   "interval of work (Young 1974; Daly 2006).")
    show_code(goodput, key="code_goodput")
