"""Scale explorer: step time, MFU and memory per component of GPT training at cluster scale (cost
model), the priced step as an interactive timeline on the event clock, the software-stack choices
(overlap, FlashAttention, precision, FP8), uneven stages, context and expert parallelism; the
configuration search and why the alternatives lose; two configurations side by side; goodput.
Every configuration widget is bound to the URL (app/README.md lists the parameters)."""

import streamlit as st
from charts import memory_components_spec, timeline_chart
from scale_compute import clock_run, explore
from scale_goodput import goodput_panel
from scale_search import OFFERED, search_panel
from ui import BIND, enlarge_text, interactive, intro, or_error, predict, remember, restore, show_code

from simulator import (
    PRICED_SCHEDULES,
    SCHEDULE_SPECS,
    ModelSpec,
    estimate,
    format_assumptions,
    get_hardware,
    get_model,
    hardware_names,
    model_names,
    viz,
)
from simulator.cost.parallel_config import PRECISION
from simulator.cost.scale_sim import simulate_at_scale
from simulator.cost.stack import stack_names
from simulator.units import fmt_bytes, fmt_time
from simulator.vocabulary import DEFAULTS

SCHEDULES = PRICED_SCHEDULES  # the schedules the closed form prices (simulator.parallel.schedule_registry)
RECOMPUTE = ("none", "selective", "full")
CUSTOM = "custom ..."
TP, PP = [1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 12, 16, 24, 32, 64]  # t > 8 crosses nodes: the lesson of TP
DP = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
CP, EP = [1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32, 64]
SEQS = ["preset", "2048", "4096", "8192", "16384", "32768", "65536", "131072"]
DENSE_FIRST = ["preset", "0", "1", "2", "3", "4", "8"]   # dense layers before the MoE ones (--moe-layer-freq)
MTPS = ["preset", "0", "1", "2", "3"]                     # multi-token prediction modules (--mtp-num-layers)
SPLITS = ("even", "first/last stage layers", "balanced with embedding and head")
OFFERED.update(tp=TP, pp=PP, dp=DP, b=[1, 2, 4, 8], cp=CP, ep=EP, split=SPLITS)
CP_KINDS = {"ring (send/recv)": "p2p", "all-to-all (Ulysses)": "a2a"}
PRECISIONS = {"megatron": "bf16 + fp32 main grads + fp32 Adam (18 B/param)",
              "mixed": "16-bit params and grads + fp32 master and Adam (16 B/param)",
              "fp32": "fp32 everywhere, matmuls at the fp32 peak (16 B/param)"}
AUTO_INSTRUCTIONS = 25_000   # beyond this the event clock runs only on request (seconds, not instants)
KEYS = ("model", "c_L", "c_h", "c_a", "c_s", "c_V", "c_f", "c_kv", "c_glu", "c_untied", "seq", "moe", "experts",
        "topk", "moe_ffn", "dense_first", "mtp", "hw", "B", "tp", "pp", "dp", "b", "schedule", "v", "recompute", "sp", "cp", "cp_kind",
        "ep", "split", "first", "last", "zero", "ov_grad", "ov_param", "ov_tp", "flash", "precision", "fp8",
        "s_gpus", "s_schedules", "s_zeros", "s_cp", "s_ep", "s_top", "g_gpus", "g_mtbf", "g_write", "g_restart",
        *(f"{ab}_{k}" for ab in "ab" for k in ("tp", "pp", "dp", "b", "schedule", "v", "recompute", "sp", "zero")))

intro("Scale explorer",
      "Too big to run, cheap to price: the closed-form cost model gives step time, TFLOP/s per GPU, MFU and "
      "memory per GPU, per component as Megatron-LM reports it, for a GPT under tensor (t), context (c), "
      "pipeline (p), data (d) and expert (e) parallelism; the same step runs as a program on the event clock "
      "and is drawn as a timeline. It searches every configuration, says why each alternative loses, and "
      "prices failures against checkpoints.")
restore("scale")

with st.sidebar:
    st.subheader("Model and cluster")
    names = list(model_names()) + [CUSTOM]
    model_name = st.selectbox("Model", names, index=names.index("gpt3-175b"), key="model", **BIND)
    if model_name == CUSTOM:
        c = st.columns(2)
        custom = dict(layers=c[0].number_input("layers L", 1, 512, 64, key="c_L", **BIND),
                      hidden=c[1].number_input("hidden h", 64, 65536, 8192, 64, key="c_h", **BIND),
                      heads=c[0].number_input("heads a", 1, 512, 64, key="c_a", **BIND),
                      seq=c[1].number_input("sequence s", 128, 131072, 2048, key="c_s", **BIND),
                      vocab=c[0].number_input("vocabulary V", 1000, 500000, 51200, key="c_V", **BIND),
                      ffn_hidden=c[1].number_input("FFN f (0: 4h)", 0, 262144, 0, key="c_f", **BIND),
                      kv_heads=c[0].number_input("KV heads (0: a)", 0, 512, 0, key="c_kv", **BIND,
                                                 help="grouped-query attention: fewer K/V heads than query heads"))
        custom["gated_mlp"] = c[1].toggle("SwiGLU", key="c_glu", **BIND)
        custom["tied_embeddings"] = not c[0].toggle("untied embeddings", key="c_untied", **BIND)
    seq = st.select_slider("Sequence length s (tokens)", SEQS, value="preset", key="seq", **BIND,
                           help="override the preset's sequence length (long context: try context parallelism)")
    moe = st.toggle("Mixture of experts", key="moe", **BIND, help="replace every MLP by routed experts")
    if moe:
        c = st.columns(3)
        experts = c[0].number_input("experts E", 2, 256, 8, key="experts", **BIND)
        topk = c[1].number_input("top-k", 1, 8, 2, key="topk", **BIND)
        moe_ffn = c[2].number_input("expert FFN (0: f)", 0, 262144, 0, key="moe_ffn", **BIND)
        dense_first = st.select_slider("Dense layers first", DENSE_FIRST, value="preset", key="dense_first", **BIND,
                                       help="Megatron's --moe-layer-freq: the first layers keep a dense MLP "
                                            "(DeepSeek-V3: 3)")
    mtp = st.select_slider("MTP modules", MTPS, value="preset", key="mtp", **BIND,
                           help="Megatron's --mtp-num-layers: multi-token prediction on the last stage (DeepSeek-V3: 1)")
    hws = [h for h in hardware_names() if h != "local"]
    hw = st.selectbox("Hardware", hws, index=hws.index("a100-80gb"), key="hw", **BIND)
    B = st.select_slider("Global batch B (sequences)", [64, 128, 256, 512, 1024, 1536, 2048, 4096], value=512,
                         key="B", **BIND)


def model_spec() -> ModelSpec:
    """The chosen preset or custom ModelSpec with the sequence and MoE overrides (validated by the
    library: `get_model` refuses what cannot exist)."""
    if model_name == CUSTOM:
        kw = {k: (int(x) if not isinstance(x, bool) else x) for k, x in custom.items()}
        kw = {k: x for k, x in kw.items() if not (k in ("ffn_hidden", "kv_heads") and x == 0)}
        spec = ModelSpec("custom", **kw)
    else:
        spec = get_model(model_name)
    over = {} if seq == "preset" else {"seq": int(seq)}
    if moe:
        over.update(num_experts=int(experts), moe_router_topk=int(topk))
        if moe_ffn:
            over["moe_ffn_hidden"] = int(moe_ffn)
        if dense_first != "preset":
            k = int(dense_first)      # as many as the layers: refused by ModelSpec in one line
            over["moe_layer_freq"] = (0,) * k + (1,) * max(0, spec.layers - k)
    if mtp != "preset":
        over["mtp_num_layers"] = int(mtp)
    return get_model(spec, **over) if over else spec


def config_widgets(prefix: str, defaults: dict, per_row: int = 4, extended: bool = False) -> dict:
    """t, p, d, b, schedule, v, recompute, SP widgets (keys prefixed) -> ParallelConfig kwargs; with
    `extended` also c and its kind, e and the stage split. `per_row` = 2 in the half-width columns."""
    # every tab's configuration is in the URL (Compare: a_tp, b_schedule, ...)
    cells = [c for _ in range(8 // per_row) for c in st.columns(per_row)]
    kw = {"tp": cells[0].select_slider("Tensor parallel t", TP, value=defaults["tp"], key=f"{prefix}tp", **BIND),
          "pp": cells[1].select_slider("Pipeline stages p", PP, value=defaults["pp"], key=f"{prefix}pp", **BIND),
          "dp": cells[2].select_slider("Data parallel d", DP, value=defaults["dp"], key=f"{prefix}dp", **BIND),
          "micro_batch_size": cells[3].select_slider("Micro-batch b (sequences)", [1, 2, 4, 8], value=1,
                                                     key=f"{prefix}b", **BIND)}
    kw["schedule"] = cells[4].selectbox("Schedule", SCHEDULES, index=SCHEDULES.index(defaults["schedule"]),
                                        key=f"{prefix}schedule", **BIND)
    spec = SCHEDULE_SPECS[kw["schedule"]]
    kw["virtual_stages"] = cells[5].slider("Chunks v (interleaved)", 1, 4, defaults.get("v", 1), key=f"{prefix}v",
                                           disabled=not spec.virtual_stages or spec.chunks is not None, **BIND,
                                           help="the schedule's own count when it fixes one (zb-v, dualpipev: 2)")
    kw["virtual_stages"] = spec.chunks_for(kw["virtual_stages"])   # 1 without chunks; V-shaped: their 2
    kw["recompute"] = cells[6].selectbox("Recompute", RECOMPUTE, index=RECOMPUTE.index(defaults["recompute"]),
                                         key=f"{prefix}recompute", **BIND)
    kw["sequence_parallel"] = cells[7].toggle("Sequence parallel", value=defaults.get("sp", False),
                                              key=f"{prefix}sp", disabled=kw["tp"] == 1, **BIND) and kw["tp"] > 1
    if extended:
        c = st.columns(4)
        kw["cp"] = c[0].select_slider("Context parallel c", CP, value=1, key="cp", **BIND,
                                      help="each sequence split over c GPUs (Megatron --context-parallel-size)")
        kind = c[1].selectbox("Context-parallel kind", list(CP_KINDS), key="cp_kind", disabled=kw["cp"] == 1, **BIND,
                              help="ring attention: K/V blocks go round the c GPUs; all-to-all: heads <-> sequence")
        kw["cp_comm_type"] = CP_KINDS[kind]
        kw["ep"] = c[2].select_slider("Expert parallel e", EP, value=1, key="ep", disabled=not moe, **BIND,
                                      help="experts spread over e of the d data-parallel GPUs (divides d)")
        if not moe:
            kw["ep"] = 1
        split = c[3].selectbox("Layers per stage", SPLITS, key="split", disabled=kw["pp"] == 1, **BIND,
                               help="Megatron --decoder-first/last-pipeline-num-layers, or "
                                    "--account-for-embedding/loss-in-pipeline-split")
        if kw["pp"] > 1 and split == SPLITS[1]:
            c = st.columns(4)
            kw["first_stage_layers"] = int(c[0].number_input("first stage layers", 1, 512, 1, key="first", **BIND))
            kw["last_stage_layers"] = int(c[1].number_input("last stage layers", 1, 512, 1, key="last", **BIND))
        elif kw["pp"] > 1 and split == SPLITS[2]:
            kw["balance_embedding"] = True
    return kw


def stack_widgets(spec: ModelSpec) -> dict:
    """The software stack as `Assumptions` keywords: overlap, FlashAttention, precision, FP8.
    FlashAttention starts at the model preset's own choice (`ModelSpec.flash_attention`, as every
    other door assumes) and follows the preset until the toggle is moved."""
    untouched = "flash" not in st.session_state or st.session_state.get("_flash_preset") == st.session_state["flash"]
    if untouched and "flash" not in st.query_params:
        st.session_state["flash"] = spec.flash_attention
    st.session_state["_flash_preset"] = spec.flash_attention
    c = [cell for _ in range(2) for cell in st.columns(3)]  # three a row: at 1024 px no label wraps inside a word
    kw = {"overlap_grad_reduce": c[0].toggle("Overlap grad reduce", key="ov_grad", **BIND,
                                             help="gradient buckets reduced under the backward (--overlap-grad-reduce)"),
          "overlap_param_gather": c[1].toggle("Overlap param gather", key="ov_param", **BIND,
                                              help="ZeRO parameter all-gathers under the forward (--overlap-param-gather)"),
          "overlap_tp_comm": c[2].toggle("Overlap TP comm", key="ov_tp", **BIND,
                                         help="TP collectives pipelined with their GEMMs (--tp-comm-overlap)"),
          "flash_attention": c[3].toggle("FlashAttention", key="flash", **BIND,
                                         help="no s² scores in memory or HBM traffic (--use-flash-attn)")}
    if kw["flash_attention"] == spec.flash_attention:
        kw["flash_attention"] = None      # the preset's: the stated assumptions say "preset NAME"
    precision = c[4].selectbox("Precision", list(PRECISIONS), key="precision", **BIND,
                               format_func=lambda k: k, help=" · ".join(f"{k}: {v}" for k, v in PRECISIONS.items()))
    kw.update(PRECISION[precision])
    kw["fp8"] = c[5].toggle("FP8 matmuls", key="fp8", disabled=precision == "fp32", **BIND,
                            help="Transformer Engine FP8 GEMMs at the fp8 peak (--fp8-format)") and precision != "fp32"
    c = st.columns(3)  # three a row, as above: no label wraps inside a word at 1024 px
    stacks = list(stack_names())
    kw["stack"] = c[0].selectbox("Software stack", stacks, index=stacks.index(DEFAULTS["stack"]), key="stack", **BIND,
                                 help="kernel efficiencies, overheads and the overlaps it performs (--stack; "
                                      "simulator/cost/stack_presets/)")
    kw["causal_attention_flops"] = c[1].toggle("Causal attention FLOPs", key="causal_flops", **BIND,
                                               help="model TFLOP/s and MFU count the attention core's causal half "
                                                    "(--causal-attention-flops)")
    return kw


@st.cache_data(show_spinner=False, max_entries=16)
def memory_png(bars: tuple, capacity_bytes: float, title: str, big: bool = False) -> bytes:
    """`viz.memory_breakdown` of (name, ((part, bytes), ...)) pairs drawn once per set of inputs, as
    PNG: reruns reuse it. `big`: presentation mode's larger text (ui.enlarge_text)."""
    fig = viz.memory_breakdown({k: dict(v) for k, v in bars}, capacity_bytes, title=title, width=6.5)
    return viz.png_bytes(enlarge_text(fig) if big else fig, dpi=120)


def time_parts(r: dict) -> dict:
    """The step's one breakdown (`simulator.cost.step_breakdown`): its parts add up to the step."""
    b = r["breakdown"]
    return {k[:-2].replace("exposed_", "exposed "): v for k, v in b.items() if k not in ("step_s", "device")}


def memory_bar(r: dict) -> dict:
    m = r["memory"]
    return {"model_state": m["model_state_bytes"], "activations": m["activation_bytes"], "logits": m["logits_bytes"]}


def memory_parts(m: dict) -> dict:
    """Megatron-LM's components (theoretical_memory_usage; `simulator.cost.memory_report`)."""
    return {"parameters": m["parameter_bytes"], "gradients": m["gradient_bytes"],
            "optimizer states": m["optimizer_bytes"], "activations": m["activation_bytes"],
            "logits": m["logits_bytes"], "buffers": m["buffer_bytes"], "temporaries (5 %)": m["allowance_bytes"]}


def show_metrics(r: dict, base: dict | None = None) -> None:
    c = st.columns(6)

    def delta(key, fmt):
        return None if base is None else fmt(r[key] - base[key])

    c[0].metric("GPUs", r["gpus"], help="t × c × p × d: every GPU of the run")
    c[1].metric("step time", fmt_time(r["step_time_s"]), delta("step_time_s", lambda d: ("+" if d >= 0 else "") + fmt_time(d)),
                delta_color="inverse", help="one optimizer step over the global batch B: compute, pipeline bubble, "
                                            "exposed communication and the optimizer")
    c[2].metric("TFLOP/s per GPU", f"{r['tflops_per_gpu']:.0f}", delta("tflops_per_gpu", lambda d: f"{d:+.0f}"),
                help="hardware FLOPs per second and GPU, recomputation included (Narayanan et al. 2021, eq. 3)")
    c[3].metric("MFU", f"{r['mfu']:.1%}", delta("mfu", lambda d: f"{d * 100:+.1f} pt"),
                help="model FLOPs utilisation: the model's FLOPs per second (no recomputation) over the GPUs' "
                     "peak (PaLM, Chowdhery et al. 2022)")
    c[4].metric("bubble", f"{r['bubble_fraction']:.1%}", delta("bubble_fraction", lambda d: f"{d * 100:+.1f} pt"),
                delta_color="inverse", help="pipeline bubble: the share of the step a GPU idles waiting for "
                                            "its pipeline neighbours")
    c[5].metric("memory per GPU", f"{r['memory_per_gpu_bytes'] / 1e9:.1f} GB", "OOM" if r["oom"] else None,
                delta_color="inverse" if r["oom"] else "normal",
                help="weights, gradients, optimizer states, activations and buffers on the fullest GPU; OOM "
                     "beyond its capacity")


def show_timeline(spec: ModelSpec, kw: dict, akw: dict, zero: int) -> None:
    """The priced step on the event clock, drawn as an interactive timeline."""
    st.markdown("#### The step on the event clock")
    m = B // (kw["micro_batch_size"] * kw["dp"])
    guess = m * spec.layers * 13 + 1000   # ~13 instructions per micro-batch and layer (one TP rank per stage)
    if guess > AUTO_INSTRUCTIONS and not st.toggle(
            f"Run the step on the event clock (about {guess:,} instructions: seconds)", key="run_big"):
        st.info(f"The event clock would run about {guess:,} instructions ({m} micro-batches x {spec.layers} layers); "
                f"the page runs up to {AUTO_INSTRUCTIONS:,} by itself so that it stays interactive. Raise b or lower B, "
                "or switch it on.")
        return
    got = or_error(clock_run, spec, hw, B, tuple(sorted(kw.items())), tuple(sorted(akw.items())), zero)
    if got is None:
        return
    res, trace, note = got
    c = st.columns(4)
    c[0].metric("step on the clock", fmt_time(res.step_time_s))
    c[1].metric("MFU on the clock", f"{res.mfu:.1%}")
    c[2].metric("bubble on the clock", f"{res.bubble_fraction:.1%}")
    c[3].metric("instructions", f"{res.instructions:,}")
    chart = timeline_chart(trace, stage_of={k: k for k in range(trace.n_devices)},
                           title=f"one data-parallel replica, one TP rank per stage ({res.simulated_ranks} rows)")
    interactive(chart, key="timeline")
    st.caption("Device k is pipeline stage k (its t TP ranks run alike). Hover a bar for its op, micro-batch, "
               "bytes, FLOPs, start and duration; drag to pan, scroll to zoom the time axis. "
               + (f"**Aggregated**: {note}." if note else "Every instruction is drawn."))


spec = or_error(model_spec)
if spec is None:
    st.stop()
st.caption(f"{spec!r} · {get_hardware(hw).name} ({get_hardware(hw).memory_bytes / 2**30:.0f} GiB)")
tab_est, tab_search, tab_cmp, tab_good = st.tabs(["Estimate", "Search configurations", "Compare two",
                                                  "Goodput and checkpoints"])

with tab_est:
    kw = config_widgets("", {"tp": 8, "pp": 8, "dp": 8, "schedule": "1f1b", "recompute": "full"}, extended=True)
    akw = stack_widgets(spec)
    res = or_error(explore, spec, hw, B, tuple(sorted(kw.items())), tuple(sorted(akw.items())))
    if res is not None:
        zero = st.radio("ZeRO stage for the numbers below", list(res["by_zero"]), horizontal=True, key="zero",
                        help="ZeRO-2/3 need pp = 1: DeepSpeed refuses them with a pipeline", **BIND)
        for z, why in res["refused"].items():
            st.caption(f"ZeRO-{z} is not offered here: {why}")
        r = res["by_zero"][zero]
        show_metrics(r)
        zs = list(res["by_zero"])
        if len(zs) > 1:
            top = zs[-1]
            gb = res["by_zero"][top]["memory_per_gpu_bytes"] / 1e9
            predict(f"how much memory per GPU (GB) does ZeRO-{top} need here, against "
                    f"{res['by_zero'][0]['memory_per_gpu_bytes'] / 1e9:.1f} GB without ZeRO?", gb, "GB",
                    f"ZeRO-{top} shards {'the optimizer states' if top == 1 else 'the model states'} over the d = "
                    f"{kw['dp']} data-parallel GPUs; activations and buffers are not sharded, so the saving is less "
                    f"than {kw['dp']}x.", key=f"zero{top}")
        if kw["tp"] >= 8:
            across = get_hardware(hw).devices_per_node
            where = "across nodes" if kw["tp"] > across else "inside one node"
            predict(f"what step time (s) does t={kw['tp']} give, {where} of {across} GPUs?",
                    r["step_time_s"], "s", "Tensor parallelism AllReduces activations in every layer; beyond one "
                    "node (t > GPUs per node) they cross the slower inter-node links: compare t = 8 with t = 16.",
                    key="tp_nodes")
        st.caption(r["config"])
        st.caption(format_assumptions(r["assumptions"], indent="").strip())
        if r["oom"]:
            st.warning(f"Out of memory: {r['memory_per_gpu_bytes'] / 1e9:.1f} GB per GPU needed, "
                       f"{res['capacity'] / 1e9:.1f} GB available. Raise t or p, recompute activations, or "
                       "shard the model states with a higher ZeRO stage.")
        left, right = st.columns([3, 2])
        with left:
            parts = memory_parts(r["memory"])
            interactive(memory_components_spec(parts, res["capacity"],
                                               title=f"memory per GPU on {hw}, stage {r['memory']['stage']}"),
                        key="memory")
            st.dataframe([{"component": k, "bytes": fmt_bytes(v), "GB": round(v / 1e9, 2)}
                          for k, v in parts.items()], hide_index=True, width="stretch")
            st.caption("As Megatron-LM's theoretical_memory_usage counts it (Korthikanti et al. 2022), for the "
                       "most loaded pipeline stage; buffers: ZeRO-3's gathered largest layer (DeepSpeed).")
        with right:
            st.markdown("**Where a step goes**")
            tparts = time_parts(r)
            st.bar_chart({"part": list(tparts), "seconds": list(tparts.values())}, x="part", y="seconds",
                         horizontal=True, height=220)
            st.caption(" · ".join(f"{k} {fmt_time(t)}" for k, t in tparts.items()))
            st.markdown("**Communication by purpose**")
            st.dataframe([{"purpose": k.replace("_", " "), "time": fmt_time(t)}
                          for k, t in r["comm_time_by_kind"].items()], hide_index=True, width="stretch")
        show_timeline(spec, kw, akw, zero)
    show_code(estimate, simulate_at_scale, key="code")


with tab_search:
    search_panel(spec, hw, B, akw, moe)

with tab_cmp:
    left, right = st.columns(2, gap="large")
    with left:
        st.markdown("#### Configuration A")
        kw_a = config_widgets("a_", {"tp": 8, "pp": 8, "dp": 8, "schedule": "1f1b", "recompute": "full"}, 2)
        zero_a = st.radio("ZeRO (A)", [0, 1, 2, 3], horizontal=True, key="a_zero", **BIND)
    with right:
        st.markdown("#### Configuration B")
        kw_b = config_widgets("b_", {"tp": 4, "pp": 16, "dp": 8, "schedule": "interleaved", "v": 2,
                                     "recompute": "selective", "sp": True}, 2)
        zero_b = st.radio("ZeRO (B)", [0, 1, 2, 3], horizontal=True, index=1, key="b_zero", **BIND)
    ra = or_error(explore, spec, hw, B, tuple(sorted(kw_a.items())))
    rb = or_error(explore, spec, hw, B, tuple(sorted(kw_b.items())))
    if ra is not None and rb is not None:
        missing = [f"ZeRO-{z} ({n}) needs pp = 1: DeepSpeed refuses ZeRO-2/3 with a pipeline"
                   for z, n, r_ in ((zero_a, "A", ra), (zero_b, "B", rb)) if z not in r_["by_zero"]]
        if missing:
            st.error("; ".join(missing) + ". Choose ZeRO 0 or 1 there, or set p = 1.")
            st.stop()
        a, b = ra["by_zero"][zero_a], rb["by_zero"][zero_b]
        st.markdown("**A**")
        show_metrics(a)
        st.markdown("**B** (deltas against A)")
        show_metrics(b, a)
        c1, c2 = st.columns(2)
        with c1:
            bars = tuple((k, tuple(memory_bar(r_).items())) for k, r_ in (("A", a), ("B", b)))
            st.image(memory_png(bars, ra["capacity"], "memory per GPU", big=bool(st.session_state.get("present"))),
                     width="stretch")
            st.caption(f"A: {a['config']}\n\nB: {b['config']}")
        with c2:
            pa, pb = time_parts(a), time_parts(b)
            st.markdown("**Where a step goes (seconds)**")
            st.bar_chart({"part": list(pa), "A": list(pa.values()), "B": list(pb.values())}, x="part", y=["A", "B"],
                         stack=False, horizontal=True, height=280, y_label="seconds")
    show_code(estimate, key="code_cmp")

with tab_good:
    goodput_panel(spec)
remember("scale", *KEYS)
