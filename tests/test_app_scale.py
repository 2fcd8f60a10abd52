"""App page tests (scale): renders without exceptions, key widgets, controls change results."""

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


def test_scale_explorer_memory_follows_tensor_parallelism():
    at = page("scale")
    gb = float(metrics(at)["memory per GPU"].split()[0])
    at.select_slider(key="tp").set_value(4).run()
    assert float(metrics(at)["memory per GPU"].split()[0]) > gb  # fewer shards per layer, more bytes
    at.radio(key="zero").set_value(3).run()
    assert not at.exception
