"""App page tests (scale): renders without exceptions, key widgets, controls change results, fast reruns."""


from app_helpers import page

EST, SEARCH, CMP, GOOD = range(4)


def metrics(at, tab: int, skip: int = 0, count: int = 6) -> dict:
    ms = list(at.tabs[tab].metric)[skip:skip + count]
    return {m.label: m.value for m in ms}


def gb(value: str) -> float:
    return float(value.split()[0])


def test_scale_explorer_memory_follows_tensor_parallelism():
    from simulator import ParallelConfig, estimate

    at = page("scale")
    m = metrics(at, EST)
    ref = estimate("gpt3-175b", ParallelConfig(tp=8, pp=8, dp=8, global_batch=512, recompute="full"), "a100-80gb")
    assert gb(m["memory per GPU"]) == round(ref.memory_per_gpu_bytes / 1e9, 1)
    assert m["MFU"] == f"{ref.mfu:.1%}"
    at.select_slider(key="tp").set_value(4).run()    # rerun speed: bench/bench_cost.py (no timed tests)
    tp4 = gb(metrics(at, EST)["memory per GPU"])
    assert tp4 > gb(m["memory per GPU"])  # fewer shards per layer
    # with a pipeline only ZeRO 0 and 1 are offered (DeepSpeed refuses ZeRO-2/3 with pp > 1)
    assert list(at.radio(key="zero").options) == ["0", "1"]
    at.radio(key="zero").set_value(1).run()
    assert gb(metrics(at, EST)["memory per GPU"]) < tp4


def test_scale_explorer_warns_out_of_memory_and_custom_models():
    at = page("scale")
    at.selectbox(key="recompute").set_value("none").run()
    assert metrics(at, EST)["memory per GPU"] and any("Out of memory" in w.value for w in at.tabs[EST].warning)
    at.selectbox(key="model").set_value("custom ...").run()
    assert not at.exception and any("custom" in c.value for c in at.caption)
    at.number_input(key="c_a").set_value(60).run()  # 8192 / 60 is not an integer head size
    assert len(at.error) == 1 and "not divisible by heads 60" in at.error[0].value


def test_scale_search_ranks_and_says_why_alternatives_lose():
    at = page("scale")
    at.number_input(key="s_gpus").set_value(64).run()
    at.selectbox(key="model").set_value("megatron-7.5b").run()
    at.button(key="search").click().run()
    assert not at.exception, at.exception
    ranked, alternatives = (d.value for d in at.tabs[SEARCH].dataframe)
    times = list(ranked["step time (s)"])
    assert times == sorted(times) and len(times) == 10
    reasons = list(alternatives["why it loses"])
    assert reasons and all(r.startswith(("slower by", "OOM by")) for r in reasons)
    assert "Best of" in at.tabs[SEARCH].success[0].value


def test_scale_compare_two_configurations():
    at = page("scale")
    a = metrics(at, CMP)
    b = metrics(at, CMP, skip=6)
    assert a["step time"] != b["step time"]
    at.select_slider(key="b_tp").set_value(8).run()
    at.select_slider(key="b_pp").set_value(8).run()
    at.selectbox(key="b_schedule").set_value("1f1b").run()
    at.selectbox(key="b_recompute").set_value("full").run()
    at.toggle(key="b_sp").set_value(False).run()
    at.radio(key="b_zero").set_value(0).run()
    assert metrics(at, CMP, skip=6) == metrics(at, CMP)  # B set equal to A: the same numbers


def test_scale_goodput_follows_the_failure_rate():
    at = page("scale")
    g = metrics(at, GOOD)
    assert float(g["goodput at best"].rstrip("%")) > 90
    at.number_input(key="g_mtbf").set_value(5000).run()  # ten times the failures
    g2 = metrics(at, GOOD)
    assert float(g2["goodput at best"].rstrip("%")) < float(g["goodput at best"].rstrip("%"))
    assert g2["best interval (Daly)"] != g["best interval (Daly)"]


def test_the_daly_interval_prints_identically_everywhere(monkeypatch):
    """One formatter (simulator.units.fmt_time) for every duration: the metric, its help, the caption
    and the chart's legend show the same strings, and the chart's title repeats no other interval."""
    import streamlit as st

    from simulator import viz
    from simulator.units import fmt_time

    drawn = []
    real = viz.goodput_chart

    def spy(*args, **kwargs):
        fig = real(*args, **kwargs)
        drawn.append(([t.get_text() for t in fig.axes[0].get_legend().get_texts()], fig._suptitle.get_text()))
        return fig

    monkeypatch.setattr(viz, "goodput_chart", spy)
    st.cache_data.clear()  # the page caches its PNGs
    at = page("scale")
    daly = metrics(at, GOOD)["best interval (Daly)"]
    young = next(m for m in at.tabs[GOOD].metric if m.label == "best interval (Daly)").help.removeprefix("Young: ")
    from simulator import get_model
    from simulator.cost.goodput import FailureModel, checkpoint_nbytes, daly_interval_s, young_interval_s

    fm = FailureModel(1024, 50_000, checkpoint_nbytes(get_model("gpt3-175b").params()), 50e9, None, 600)
    assert daly == fmt_time(daly_interval_s(fm)) == "68.6 min" and young == fmt_time(young_interval_s(fm))
    caption = next(c.value for c in at.tabs[GOOD].caption if "Daly" in c.value)
    assert f"Daly's interval {daly}" in caption and f"√(2CM) = {young}" in caption
    legend, title = drawn[-1]
    assert f"Daly {daly}" in legend and f"Young √(2CM) {young}" in legend
    assert "τ =" not in title  # the curve's best sample (1.13 h) is not printed beside Daly's 1.14 h
    assert fmt_time(4116) == "68.6 min" and fmt_time(2 * 3600) == "2 h" and fmt_time(119) == "119 s"
    assert fmt_time(3 * 86400) == "3 d" and fmt_time(0.035) == "35 ms" and fmt_time(-0.5) == "-500 ms"


def test_the_compare_and_goodput_tabs_read_the_url():
    from app_helpers import APP
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / "scale.py"), default_timeout=120)
    at.query_params.update({"a_tp": "4", "b_schedule": "1f1b", "b_zero": "1", "g_gpus": "4096", "g_mtbf": "20000"})
    at.run()
    assert not at.exception
    assert at.select_slider(key="a_tp").value == 4 and at.selectbox(key="b_schedule").value == "1f1b"
    assert at.radio(key="b_zero").value == 1 and at.number_input(key="g_gpus").value == 4096
    assert metrics(at, GOOD)["system MTBF"] == "4.88 h"  # 20,000 h / 4096 GPUs
    bound = {w.key: w.proto.query_param_key for kind in ("select_slider", "selectbox", "radio", "number_input",
                                                          "toggle", "slider") for w in at.get(kind) if w.key}
    assert all(bound[k] == k for k in bound if k[:2] in ("a_", "b_", "g_")), bound


def test_presentation_mode_draws_the_matplotlib_figures_text_larger():
    from matplotlib.text import Text
    from ui import PRESENT_TEXT, enlarge_text

    from simulator import viz

    fig = viz.style.message_figure("a note")
    before = [t.get_fontsize() for t in fig.findobj(Text)]
    after = [t.get_fontsize() for t in enlarge_text(fig).findobj(Text)]
    assert before and after == [PRESENT_TEXT * b for b in before]
