"""App page tests (training): renders without exceptions, key widgets, controls change results."""

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


def test_training_run_shows_metrics_and_matches_one_device():
    at = page("training")
    assert at.info and "Run training" in at.info[0].value
    at.slider(key="microbatches").set_value(8).run()
    at.button(key="run").click().run()
    assert not at.exception
    m = metrics(at)
    assert float(m["vs one device"]) < 1e-9
    bubble_pp = float(m["bubble"].rstrip("%"))
    assert bubble_pp > 0
    at.selectbox(key="strategy").set_value("dp").run()
    at.button(key="run").click().run()
    assert float(metrics(at)["bubble"].rstrip("%")) < bubble_pp  # data parallel has no pipeline bubble


def test_training_refuses_bad_degrees_with_one_line():
    at = page("training")
    at.slider(key="devices").set_value(3).run()
    at.slider(key="microbatches").set_value(5).run()
    at.button(key="run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "\n" not in at.error[0].value
