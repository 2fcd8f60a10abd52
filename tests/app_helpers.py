"""What the app page tests share: open a page with Streamlit's AppTest, read its metrics."""

import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app"
sys.path.insert(0, str(APP))  # the pages import app/ui.py as `ui`


def page(name: str) -> AppTest:
    """Run app/views/<name>.py once and check it rendered without an exception."""
    at = AppTest.from_file(str(APP / "views" / f"{name}.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}
