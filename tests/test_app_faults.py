"""App page tests (faults): inject a failure, see the recovery; bad faults are one-line errors."""

from app_helpers import metrics, page


def test_faults_kill_is_recovered_from_a_replica_then_from_a_checkpoint():
    at = page("faults")
    assert {"model", "strategy", "steps", "ckpt", "kind", "device", "fault_step"} <= {
        w.key for kind in ("selectbox", "slider") for w in at.sidebar.get(kind)}
    at.button(key="run").click().run()
    assert not at.exception
    m = metrics(at)
    assert m["fault"] == "kill:1@3" and m["recovered"] == "1 of 1" and m["replayed steps"] == "1"
    assert float(m["vs one device"]) < 1e-9
    assert "restored from replicas" in at.success[0].value
    events = at.dataframe[0].value
    assert set(events["phase"]) == {"failure", "recovery"}
    at.selectbox(key="strategy").set_value("pp").run()  # no replicas: back to the checkpoint at step 2
    at.button(key="run").click().run()
    m = metrics(at)
    assert m["replayed steps"] == "2" and "restored from checkpoint" in at.success[0].value
    assert float(m["vs one device"]) < 1e-9


def test_faults_refuse_a_fault_that_cannot_fire():
    at = page("faults")
    at.slider(key="fault_step").set_value(7).run()
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "never run" in at.error[0].value and "\n" not in at.error[0].value
