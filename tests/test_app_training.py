"""App page tests (training): renders without exceptions, key widgets, controls change results."""

from app_helpers import metrics, page

GPT = "tiny GPT (2 blocks, h=32, 4 heads, s=16, V=64)"


def run(at) -> dict:
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, at.error[0].value
    return metrics(at)


def test_training_run_shows_metrics_and_matches_one_device():
    at = page("training")
    assert at.info and "Run training" in at.info[0].value
    assert {"model", "strategy", "devices", "microbatches", "schedule", "v", "batch", "steps", "price_on",
            "mode"} <= {w.key for kind in ("selectbox", "slider", "select_slider", "radio") for w in at.sidebar.get(kind)}
    at.slider(key="microbatches").set_value(8).run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9
    assert "every weight equals the single-device run" in at.success[0].value
    bubble_pp = float(m["bubble"].rstrip("%"))
    assert bubble_pp > 0
    assert len(at.get("imagelist") or at.get("image")) >= 3  # timeline, bubble breakdown, memory over time
    events = at.dataframe[0].value
    assert set(events["device"]) == {1} and len(events) > 10  # the bar details, filtered to device 1
    at.multiselect(key="event_devices").set_value([0, 3]).run()
    assert set(at.dataframe[0].value["device"]) == {0, 3}
    at.selectbox(key="strategy").set_value("dp").run()
    assert float(run(at)["bubble"].rstrip("%")) < bubble_pp  # data parallel has no pipeline bubble


def test_training_degree_widgets_follow_the_strategy():
    at = page("training")
    at.selectbox(key="model").set_value(GPT).run()
    at.selectbox(key="strategy").set_value("hybrid").run()
    assert {"h_dp", "h_pp", "h_tp"} <= {w.key for w in at.sidebar.selectbox}
    at.selectbox(key="h_dp").set_value(1).run()
    at.selectbox(key="h_tp").set_value(2).run()  # dp 1 x pp 2 x tp 2
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "pp=2" in at.caption[0].value and "tp=2" in at.caption[0].value
    at.selectbox(key="strategy").set_value("tp").run()
    assert at.select_slider(key="tp").value == 4
    at.select_slider(key="tp").set_value(2).run()  # tp 2, dp 2
    m = run(at)
    assert "dp=2" in at.caption[0].value and "tp=2" in at.caption[0].value
    at.selectbox(key="strategy").set_value("zero3").run()
    run(at)
    assert "zero=3" in at.caption[0].value


def test_training_simulated_clock_prices_without_running():
    at = page("training")
    at.radio(key="mode").set_value("simulated clock only").run()
    m = run(at)
    assert m["vs one device"] == "not run" and m["peak memory"] == "not run"
    assert float(m["bubble"].rstrip("%")) > 0  # 4 pipeline stages
    assert any("nothing was executed" in i.value for i in at.info)
    one_step = m["simulated time"]
    at.slider(key="devices").set_value(2).run()
    assert run(at)["simulated time"] != one_step


def test_training_refuses_bad_degrees_with_one_line():
    at = page("training")
    at.slider(key="devices").set_value(3).run()
    at.slider(key="microbatches").set_value(5).run()
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "\n" not in at.error[0].value
    at.slider(key="devices").set_value(4).run()
    at.slider(key="microbatches").set_value(4).run()
    at.selectbox(key="strategy").set_value("tp").run()  # the MLP has no transformer layers to cut
    at.button(key="run").click().run()
    assert len(at.error) == 1 and "tensor parallelism" in at.error[0].value


def test_training_refusal_leaves_no_empty_progress_bar():
    at = page("training")
    at.selectbox(key="strategy").set_value("hybrid").run()
    at.selectbox(key="h_tp").set_value(2).run()  # dp 2 x pp 2 x tp 2 = 8 on 4 devices
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "do not multiply to 4 devices" in at.error[0].value
    assert not at.get("progress")  # the bar of a run that never started is gone
    at.selectbox(key="strategy").set_value("tp").run()  # refused while compiling, after the bar appeared
    at.button(key="run").click().run()
    assert len(at.error) == 1 and not at.get("progress")


def test_training_accepts_context_parallel_degrees():
    at = page("training")
    at.selectbox(key="model").set_value(GPT).run()
    at.radio(key="mode").set_value("run in-process").run()
    at.selectbox(key="strategy").set_value("cp").run()
    assert at.select_slider(key="cp").value == 4 and at.radio(key="cp_kind").value == "ring"
    at.slider(key="microbatches").set_value(1).run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "cp=4" in at.caption[0].value
    at.selectbox(key="strategy").set_value("hybrid").run()
    assert "h_cp" in {w.key for w in at.sidebar.selectbox}
    at.selectbox(key="h_dp").set_value(1).run()
    at.selectbox(key="h_pp").set_value(1).run()
    at.selectbox(key="h_tp").set_value(2).run()
    at.selectbox(key="h_cp").set_value(2).run()  # tp 2 x cp 2 on 4 devices
    at.radio(key="cp_kind").set_value("all-to-all").run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "cp=2" in at.caption[0].value
