"""App page tests (training): renders without exceptions, key widgets, controls change results."""

import json

import pyarrow as pa
import pytest
from app_helpers import metrics, page

GPT = "tiny GPT"


def summary(at) -> str:
    return next(c.value for c in at.caption if " on " in c.value and "dp=" in c.value)


def run(at) -> dict:
    if at.radio(key="run_mode").value == "run on Ray actors":  # Ray runs are tested under the ray marker
        at.radio(key="run_mode").set_value("run in-process").run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, at.error[0].value
    return metrics(at)


def test_training_run_shows_metrics_and_matches_one_device():
    at = page("training")
    assert at.info and "Run training" in at.info[0].value
    assert {"net_model", "strategy", "devices", "microbatches", "pp_schedule", "v", "batch", "steps", "price_on",
            "run_mode"} <= {w.key for kind in ("selectbox", "slider", "select_slider", "radio") for w in at.sidebar.get(kind)}
    at.slider(key="microbatches").set_value(8).run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9
    assert "every weight equals the single-device run" in at.success[0].value
    bubble_pp = float(m["pipeline bubble"].rstrip("%"))
    assert bubble_pp > 0
    assert len(at.get("imagelist") or at.get("image")) >= 2  # step breakdown, memory over time
    timeline, loss = at.get("vega_lite_chart")  # the interactive timeline and the loss curve
    spec, rows = json.loads(loss.proto.spec), pa.ipc.open_stream(loss.proto.data.data).read_pandas()  # the inline data
    runs = at.session_state["train_run"][1]
    drawn = {name: list(rows.loss[rows.run == name]) for name in ("this run", "one device")}
    assert drawn == {"this run": runs["losses"], "one device": runs["reference"]} and len(runs["losses"]) == 1
    assert spec["encoding"]["strokeDash"]["scale"]["range"] == [[1, 0], [6, 4]]  # one device dashed over this run
    assert any("One device's curve is dashed" in c.value and "They coincide" in c.value for c in at.caption)
    events = at.dataframe[0].value
    assert set(events["device"]) == {1} and len(events) > 10  # the bar details, filtered to device 1
    at.multiselect(key="event_devices").set_value([0, 3]).run()
    assert set(at.dataframe[0].value["device"]) == {0, 3}
    at.selectbox(key="strategy").set_value("dp").run()
    m = run(at)
    assert m["pipeline bubble"] == "0.0%" and float(m["exposed communication"].rstrip("%")) > 0  # it waits for the all-reduce
    assert sum(float(m[k].rstrip("%")) for k in ("compute", "exposed communication", "pipeline bubble", "other idle",
                                                  "optimizer")) == pytest.approx(100, abs=0.3)


def test_training_degree_widgets_follow_the_strategy():
    at = page("training")
    at.selectbox(key="net_model").set_value(GPT).run()
    at.selectbox(key="strategy").set_value("hybrid").run()
    assert {"h_dp", "h_pp", "h_tp"} <= {w.key for w in at.sidebar.selectbox}
    at.selectbox(key="h_dp").set_value(1).run()
    at.selectbox(key="h_tp").set_value(2).run()  # dp 1 x pp 2 x tp 2
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "pp=2" in summary(at) and "tp=2" in summary(at)
    at.selectbox(key="strategy").set_value("tp").run()
    assert at.select_slider(key="tp_degree").value == 4
    at.select_slider(key="tp_degree").set_value(2).run()  # tp 2, dp 2
    m = run(at)
    assert "dp=2" in summary(at) and "tp=2" in summary(at)
    at.selectbox(key="strategy").set_value("zero3").run()
    run(at)
    assert "zero_stage=3" in summary(at)


def test_training_simulated_clock_prices_without_running():
    at = page("training")
    at.radio(key="run_mode").set_value("simulated clock only").run()
    m = run(at)
    assert m["vs one device"] == "not run" and m["peak memory per device"] == "not run"
    assert float(m["pipeline bubble"].rstrip("%")) > 0  # 4 pipeline stages
    assert any("nothing was executed" in i.value for i in at.info)
    one_step = m["time per step"]
    at.slider(key="devices").set_value(2).run()
    assert run(at)["time per step"] != one_step


def test_training_refuses_bad_degrees_with_one_line():
    at = page("training")
    at.slider(key="devices").set_value(3).run()
    at.slider(key="microbatches").set_value(5).run()
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "\n" not in at.error[0].value
    assert at.error[0].value[0].isupper() and at.error[0].value.endswith(".")  # a sentence (ui.sentence)
    at.slider(key="devices").set_value(4).run()
    at.slider(key="microbatches").set_value(4).run()
    at.selectbox(key="net_model").set_value("MLP").run()
    at.selectbox(key="strategy").set_value("tp").run()  # the MLP has no transformer layers to cut
    at.button(key="run").click().run()
    assert len(at.error) == 1 and at.error[0].value.startswith("Tensor parallelism shards transformer layers")
    assert "--" not in at.error[0].value and at.error[0].value.endswith("use strategy dp or pp.")


def test_training_refusal_leaves_no_empty_progress_bar():
    at = page("training")
    at.selectbox(key="net_model").set_value("MLP").run()  # the MLP: tp is refused while compiling
    at.selectbox(key="strategy").set_value("hybrid").run()
    at.selectbox(key="h_tp").set_value(2).run()  # dp 2 x pp 2 x tp 2 = 8 on 4 devices
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "do not multiply to 4 devices" in at.error[0].value
    assert not at.get("progress")  # the bar of a run that never started is gone
    at.selectbox(key="strategy").set_value("tp").run()  # refused while compiling, after the bar appeared
    at.button(key="run").click().run()
    assert len(at.error) == 1 and not at.get("progress")


def test_training_run_and_clock_only_agree_and_single_defaults_to_one_device():
    at = page("training")
    at.radio(key="run_mode").set_value("run in-process").run()
    ran = run(at)
    at.radio(key="run_mode").set_value("simulated clock only").run()
    priced = run(at)
    assert ran["time per step"] == priced["time per step"] and ran["pipeline bubble"] == priced["pipeline bubble"]
    at.selectbox(key="strategy").set_value("single").run()
    assert at.slider(key="devices").disabled
    assert "single on 1 device" in summary(at) or run(at) and "single on 1 device" in summary(at)


def test_overlap_lab_small_buckets_start_early_and_pay_latencies():
    # off: the default 25 MB bucket (the whole model) reduced after the backward, one message; small
    # overlapped buckets start under the backward but each pays the teaching clock's latency, so
    # here they expose more communication, and a bucket as large as the model is the default again
    at = page("training")
    at.selectbox(key="strategy").set_value("dp").run()
    at.radio(key="run_mode").set_value("simulated clock only").run()
    assert at.selectbox(key="price_on").value == "teaching"
    plain = float(run(at)["exposed communication"].rstrip("%"))
    assert at.select_slider(key="bucket_mb").disabled
    at.toggle(key="bucket").set_value(True).run()
    at.select_slider(key="bucket_mb").set_value(0.05).run()
    small = float(run(at)["exposed communication"].rstrip("%"))
    assert "gradient buckets of 0.05 MB" in summary(at)
    at.select_slider(key="bucket_mb").set_value(4.0).run()
    whole = float(run(at)["exposed communication"].rstrip("%"))
    assert plain < small and whole == plain


def test_training_reads_its_configuration_from_the_url_and_keeps_results_beside_an_error():
    from app_helpers import APP
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / "training.py"), default_timeout=60)
    at.query_params.update({"strategy": "tp", "net_model": "tiny GPT", "devices": "8", "run_mode": "simulated clock only"})
    at.run()
    assert at.selectbox(key="strategy").value == "tp" and at.slider(key="devices").value == 8
    assert at.select_slider(key="tp_degree").value == 4  # 4 heads: the largest valid degree is the default
    first = run(at)
    at.selectbox(key="strategy").set_value("hybrid").run()
    at.selectbox(key="h_dp").set_value(8).run()  # dp 8 x pp 2 x tp 1 != 8 devices
    at.button(key="run").click().run()
    assert len(at.error) == 1 and "\n" not in at.error[0].value
    assert metrics(at)["time per step"] == first["time per step"]  # the last good run stays on the page


def test_training_accepts_context_parallel_degrees():
    at = page("training")
    at.selectbox(key="net_model").set_value(GPT).run()
    at.radio(key="run_mode").set_value("run in-process").run()
    at.selectbox(key="strategy").set_value("cp").run()
    assert at.select_slider(key="cp_degree").value == 4 and at.radio(key="attention").value == "ring"
    at.slider(key="microbatches").set_value(1).run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "cp=4" in summary(at)
    at.selectbox(key="strategy").set_value("hybrid").run()
    assert "h_cp" in {w.key for w in at.sidebar.selectbox}
    at.selectbox(key="h_dp").set_value(1).run()
    at.selectbox(key="h_pp").set_value(1).run()
    at.selectbox(key="h_tp").set_value(2).run()
    at.selectbox(key="h_cp").set_value(2).run()  # tp 2 x cp 2 on 4 devices
    at.radio(key="attention").set_value("all-to-all").run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "cp=2" in summary(at)


def test_training_hybrid_exposes_expert_parallelism_for_the_moe_model():
    at = page("training")
    at.selectbox(key="net_model").set_value("tiny MoE GPT").run()
    at.radio(key="run_mode").set_value("run in-process").run()
    at.selectbox(key="strategy").set_value("hybrid").run()
    assert "h_ep" in {w.key for w in at.sidebar.selectbox}
    for key, value in (("h_dp", 2), ("h_pp", 1), ("h_tp", 1), ("h_cp", 2), ("h_ep", 4)):  # ep 4 of dp x cp = 4
        at.selectbox(key=key).set_value(value).run()
    at.slider(key="microbatches").set_value(1).run()
    m = run(at)
    assert float(m["vs one device"]) < 1e-9 and "ep=4" in summary(at) and "cp=2" in summary(at)
    at.selectbox(key="net_model").set_value(GPT).run()
    assert "h_ep" not in {w.key for w in at.sidebar.selectbox}


def test_training_defaults_always_give_a_valid_run():
    at = page("training")
    at.radio(key="run_mode").set_value("simulated clock only").run()
    at.selectbox(key="strategy").set_value("single").run()  # the default 4 devices would be refused: 1 is used
    assert at.slider(key="devices").disabled and at.slider(key="microbatches").disabled
    at.button(key="run").click().run()
    assert not at.error and "single on 1 device" in summary(at)
    at.selectbox(key="strategy").set_value("layer").run()  # layer-wise passes the whole batch: no micro-batches
    assert at.slider(key="microbatches").disabled and not at.slider(key="devices").disabled
    at.selectbox(key="net_model").set_value(GPT).run()
    at.slider(key="devices").set_value(8).run()
    at.selectbox(key="strategy").set_value("tp").run()
    assert at.select_slider(key="tp_degree").value == 4  # 4 heads: never the invalid 8
    at.button(key="run").click().run()
    assert not at.error and "tp=4" in summary(at)
    table = next(d.value for d in at.dataframe if "bytes per step, sum over devices" in d.value.columns)
    assert "per device" in table.columns  # the total says it is a total, beside the share of one device


def test_float16_gradients_are_shown_as_measured_not_as_equal():
    """The page judged with its own rule (a warning past 1e-9); it now shows the run's verdict."""
    at = page("training")
    at.selectbox(key="strategy").set_value("dp").run()
    at.selectbox(key="grad_dtype").set_value("float16").run()
    m = run(at)
    assert float(m["vs one device"]) > 1e-9 and not at.success
    assert "measured only: float16 gradients on the wire round by design" in at.info[-1].value


def test_two_sessions_asking_for_the_same_in_process_run_share_it_and_a_different_run_is_its_own():
    from shared_runs import clear

    clear()
    first = page("training")
    first.slider(key="steps").set_value(2).run()
    a = run(first)
    assert "made once on this server" not in summary(first)
    second = page("training")  # another session (its own session state), the same settings
    second.slider(key="steps").set_value(2).run()
    b = run(second)
    assert a == b and "made once on this server for every session asking for these settings" in summary(second)
    second.slider(key="steps").set_value(1).run()  # other settings: its own run
    c = run(second)
    assert "made once on this server" not in summary(second) and c["time per step"] == a["time per step"]
    clear()


def test_the_training_page_defaults_to_ray_yet_an_apptest_never_starts_it():
    """Users get "run on Ray actors" with Ray started in the background (ray_session.OFF is None in a
    fresh process); the AppTests keep Ray off, and the page says the run goes in-process."""
    import subprocess
    import sys
    import threading

    from app_helpers import APP

    fresh = subprocess.run([sys.executable, "-c", "import ray_session; print(ray_session.OFF)"], cwd=APP,
                           capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "None"
    at = page("training")
    assert at.radio(key="run_mode").value == "run on Ray actors"
    assert any("runs go on the in-process runtime" in c.value and "AppTests" in c.value for c in at.caption)
    assert "parasim-ray-start" not in {t.name for t in threading.enumerate()}
    import ray_session

    assert not ray_session.start_ray().ready
