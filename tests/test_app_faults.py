"""App page tests (faults): inject a failure, see the recovery; bad faults are one-line errors."""

from app_helpers import metrics, page


def test_faults_kill_is_recovered_from_a_replica_then_from_a_checkpoint():
    at = page("faults")
    assert {"f_model", "f_strategy", "f_steps", "ckpt", "fault", "device", "fault_step"} <= {
        w.key for kind in ("selectbox", "slider") for w in at.sidebar.get(kind)}
    at.button(key="run").click().run()
    assert not at.exception
    m = metrics(at)
    assert m["fault"] == "kill device 1 before step 3" and m["recovered"] == "1 of 1" and m["replayed steps"] == "1"
    assert float(m["vs one device"]) < 1e-9
    assert "device 1 restarted, state copied from a data-parallel replica" in at.success[0].value
    assert "any call" not in at.error[0].value and "killed before step 3" in at.error[0].value
    assert len(at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")) == 1  # the interactive timeline
    events = at.dataframe[0].value
    assert set(events["phase"]) == {"failure", "recovery"}
    at.selectbox(key="f_strategy").set_value("pp").run()  # no replicas: back to the checkpoint at step 2
    at.button(key="run").click().run()
    m = metrics(at)
    assert m["replayed steps"] == "2" and "restored from the checkpoint taken before step 2" in at.success[0].value
    assert float(m["vs one device"]) < 1e-9


def test_faults_refuse_a_fault_that_cannot_fire():
    at = page("faults")
    assert at.slider(key="fault_step").max == at.slider(key="f_steps").value - 1  # only steps that run
    at.number_input(key="ins").set_value(10_000).run()
    at.button(key="run").click().run()
    assert not at.exception
    err = at.error[0].value
    assert len(at.error) == 1 and "instructions (indices 0.." in err and "\n" not in err
    assert err.startswith("Kill device 1 before step 3, at instruction #10000") and "kill:" not in err
    at.number_input(key="ins").set_value(-1).run()
    at.button(key="run").click().run()
    before = metrics(at)
    at.number_input(key="ins").set_value(10_000).run()
    at.button(key="run").click().run()  # the error is shown beside the last run that worked
    assert any("instructions" in e.value for e in at.error) and metrics(at) == before
    assert any("the last run that worked" in c.value for c in at.caption)


def test_faults_step_slider_follows_the_number_of_steps():
    at = page("faults")
    at.slider(key="fault_step").set_value(5).run()
    at.slider(key="f_steps").set_value(3).run()
    assert not at.exception
    assert at.slider(key="fault_step").max == 2 and at.slider(key="fault_step").value == 2


def test_faults_straggler_and_lost_message_are_worded_as_what_happened():
    from app_helpers import APP
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / "faults.py"), default_timeout=60)
    at.query_params.update({"f_strategy": "pp", "fault": "drop", "f_steps": "4", "ckpt": "0"})  # a link opens this fault
    at.run()
    assert at.selectbox(key="f_strategy").value == "pp" and at.slider(key="f_steps").value == 4
    at.button(key="run").click().run()
    m = metrics(at)
    assert m["fault"] == "drop a message of device 1 in step 3" and m["recovered"] == "1 of 1"
    assert "no device lost its state: every device retried step 3" in at.success[0].value  # pp has no replicas
    assert "replicas" not in at.success[0].value and "[]" not in at.success[0].value
    at.selectbox(key="fault").set_value("slow").run()
    at.button(key="run").click().run()
    m = metrics(at)
    assert m["recovered"] == "nothing failed" and m["replayed steps"] == "0" and not at.success


def test_faults_offer_only_faults_that_can_fire_on_the_chosen_strategy():
    at = page("faults")
    for strategy, drop in (("dp", False), ("zero1", False), ("pp", True), ("hybrid", True)):
        at.selectbox(key="f_strategy").set_value(strategy).run()
        assert ("drop" in at.selectbox(key="fault").options) == drop, strategy
    at.selectbox(key="fault").set_value("drop").run()  # on hybrid
    at.selectbox(key="f_strategy").set_value("dp").run()  # no sends: back to the first kind, no refusal
    assert not at.exception and at.selectbox(key="fault").value == "kill"
    at.button(key="run").click().run()
    assert not any("no Send" in e.value for e in at.error) and metrics(at)
