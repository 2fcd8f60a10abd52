"""Scale explorer: the URL-bound software-stack, context/expert-parallel and stage-split controls,
memory per component, the step on the event clock as a timeline, and the search over c."""

import pytest
from app_helpers import APP
from streamlit.testing.v1 import AppTest

from simulator import Assumptions, ParallelConfig, estimate, get_model
from simulator.cost.parallel_config import PRECISION
from simulator.units import fmt_time

EST, SEARCH = 0, 1


def open_with(**params) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / "scale.py"), default_timeout=90)
    at.query_params.update({k: [str(x) for x in v] if isinstance(v, list) else str(v).lower() if isinstance(v, bool)
                            else str(v) for k, v in params.items()})
    at.run()
    assert not at.exception, at.exception
    return at


def metric(at, label: str, tab: int = EST) -> str:
    return next(m.value for m in at.tabs[tab].metric if m.label == label)


def component_gb(at) -> dict:
    table = at.tabs[EST].dataframe[0].value
    return dict(zip(table["component"], table["GB"]))


def test_url_configures_stack_and_the_step_runs_on_the_event_clock():
    from simulator.cost.scale_sim import simulate_at_scale

    at = open_with(model="llama3-8b", hw="h100-sxm", B=64, tp=8, pp=4, dp=2, recompute="selective", sp=True,
                   flash=True, precision="mixed", ov_grad=True)
    assert at.toggle(key="flash").value and at.selectbox(key="precision").value == "mixed"
    cfg = ParallelConfig(tp=8, pp=4, dp=2, global_batch=64, recompute="selective", sequence_parallel=True)
    A = Assumptions(flash_attention=True, overlap_grad_reduce=True, **PRECISION["mixed"])
    ref = estimate("llama3-8b", cfg, "h100-sxm", A)
    assert metric(at, "step time") == fmt_time(ref.step_time_s) and metric(at, "MFU") == f"{ref.mfu:.1%}"
    gb = component_gb(at)   # Megatron's components; mixed precision: 2-byte gradients
    mem = ref.memory
    assert gb["gradients"] == round(mem.gradient_bytes / 1e9, 2) and gb["parameters"] == gb["gradients"]
    assert gb["optimizer states"] == round(mem.optimizer_bytes / 1e9, 2) > 0
    clock = simulate_at_scale("llama3-8b", cfg, "h100-sxm", A, fold_tp=True)
    assert metric(at, "step on the clock") == fmt_time(clock.step_time_s)
    charts = [c.proto.spec for c in at.tabs[EST].get("vega_lite_chart")]   # where the step goes, memory, timeline
    timeline = [s for s in charts if "micro-batch" in s and "zoom" in s]
    assert len(charts) == 3 and len(timeline) == 1 and '"bytes"' in timeline[0] and '"FLOPs"' in timeline[0]
    assert any("Aggregated" in c.value for c in at.tabs[EST].caption)   # 4 stages x 32 micro-batches: too many


def test_flash_context_parallel_and_uneven_stages_move_the_numbers():
    at = open_with(model="llama3-8b", hw="h100-sxm", seq="32768", B=64, tp=8, pp=1, dp=8, recompute="none")
    assert at.toggle(key="flash").value is True      # the Llama preset trains with FlashAttention
    flash = component_gb(at)["activations"]
    at.toggle(key="flash").set_value(False).run()
    base = component_gb(at)["activations"]
    assert flash < base / 5                          # no s^2 scores: 5 a s / h = 40 x sbh per layer gone
    at.toggle(key="flash").set_value(True).run()
    at.select_slider(key="cp").set_value(4).run()
    assert abs(component_gb(at)["activations"] / flash - 1 / 4) < 0.02    # the sequence split 4 ways
    assert "c=4" in at.tabs[EST].caption[0].value
    at.select_slider(key="pp").set_value(4).run()
    at.selectbox(key="split").set_value("first/last stage layers").run()
    at.number_input(key="first").set_value(30).run()   # 32 - 30 - 1 leaves 1 layer for 2 middle stages
    errors = at.tabs[EST].error
    assert len(errors) == 1 and "other 2 stages" in errors[0].value and "\n" not in errors[0].value


def test_moe_fields_and_search_over_context_parallel_sizes():
    at = open_with(model="llama3-8b", hw="h100-sxm", seq="32768", B=64, tp=2, pp=1, dp=8, moe=True, experts=8,
                   topk=2, ep=4, flash=True, s_gpus=64, s_cp=[1, 2, 4, 8], s_schedules=["1f1b"], s_zeros=[1])
    moe = get_model("llama3-8b", seq=32768, num_experts=8, moe_router_topk=2)
    assert any("experts=8 top-2" in c.value for c in at.caption)
    ref = estimate(moe, ParallelConfig(tp=2, dp=8, ep=4, global_batch=64, recompute="full"), "h100-sxm", Assumptions(flash_attention=True))
    assert metric(at, "step time") == fmt_time(ref.step_time_s) and "e=4" in at.tabs[EST].caption[0].value
    at.button(key="search").click().run()
    assert not at.exception, at.exception
    ranked = at.tabs[SEARCH].dataframe[0].value
    assert set(ranked["c"]) - {1} and (ranked["headroom (GB)"] >= 0).all()    # long context: c > 1 wins places
    assert {"c", "e"} <= set(ranked.columns)
    best = ranked.iloc[0]
    at.button(key="open_best").click().run()     # the winner, explained in the Estimate tab
    assert not at.exception, at.exception
    assert (at.select_slider(key="cp").value, at.select_slider(key="tp").value) == (best["c"], best["t"])
    value, unit = metric(at, "step time").split()
    assert unit == "s" and float(value) == pytest.approx(best["step time (s)"], rel=0.01)


def test_aggregate_trace_merges_runs_of_a_micro_batch_and_then_keeps_the_start():
    from charts import aggregate_trace

    from simulator.trace import Trace, TraceEvent
    ev = [TraceEvent(0, "compute", f"op{i}", float(i), 1.0, "forward", "matmul", 0, 10.0, i // 3) for i in range(6)]
    ev += [TraceEvent(0, "comm", "ar", 0.5, 0.25, "comm", "all_reduce", 100, 0.0, 0)]
    trace = Trace(1, ev)
    assert aggregate_trace(trace, 10) == (trace, "")            # small traces are drawn as they are
    merged, note = aggregate_trace(trace, 3)
    runs = sorted((e.lane, e.microbatch, e.start_s, e.end_s, e.flops) for e in merged.events)
    assert runs == [("comm", 0, 0.5, 0.75, 0.0), ("compute", 0, 0.0, 3.0, 30.0), ("compute", 1, 3.0, 6.0, 30.0)]
    assert "7 events drawn as 3" in note and "x3 ops" in merged.events[0].name + merged.events[1].name
    window, note = aggregate_trace(trace, 2)
    assert len(window.events) == 2 and "only the first" in note


def test_dense_layers_first_and_mtp_modules_reach_the_model():
    """The MoE section's "Dense layers first" (--moe-layer-freq) and "MTP modules" (--mtp-num-layers)
    give the library's model and price (`simulator.cost.layer_kinds`, `simulator.cost.mtp`)."""
    at = open_with(model="llama3-8b", hw="h100-sxm", B=64, tp=2, pp=1, dp=8, moe=True, experts=8, topk=2, ep=4,
                   dense_first="2", mtp="1")
    model = get_model("llama3-8b", num_experts=8, moe_router_topk=2, moe_layer_freq=(0, 0) + (1,) * 30,
                      mtp_num_layers=1)
    assert any("experts=8 top-2 in 30 of 32 layers, MTP 1" in c.value for c in at.caption)
    ref = estimate(model, ParallelConfig(tp=2, dp=8, ep=4, global_batch=64, recompute="full"), "h100-sxm",
                   Assumptions(flash_attention=True))
    assert metric(at, "step time") == fmt_time(ref.step_time_s)
    # DeepSpeed's ZeRO-3 is not priced with dense layers: the radio leaves it out and says why, in one line
    assert list(at.radio(key="zero").options) == ["0", "1", "2"]
    assert any(c.value.startswith("ZeRO-3 is not offered here: --moe-layer-freq makes 2 of the 32 layers dense")
               for c in at.tabs[EST].caption)
    at = open_with(model="deepseek-v3", mtp="0")
    assert any("MTP" not in c.value and "in 58 of 61 layers" in c.value for c in at.caption)
