"""App page tests (faults): inject a failure, see the recovery; bad faults are one-line errors."""

import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app"
sys.path.insert(0, str(APP))  # the pages import app/ui.py as `ui`


def page(name: str) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / f"{name}.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


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
