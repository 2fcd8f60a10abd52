"""What the app page tests share: open a page with Streamlit's AppTest, read its metrics."""

import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app"
sys.path.insert(0, str(APP))  # the pages import app/ui.py as `ui`

import ray_session  # noqa: E402  (from app/, just put on the path)

# The AppTests run the pages in this process: opening the Training page (default "run on Ray actors")
# must not start Ray here. Ray runs of the app are tested on a served page (tests/test_browser_app.py).
ray_session.OFF = "off in the AppTests, which run the pages in-process"


def page(name: str) -> AppTest:
    """Run app/views/<name>.py once and check it rendered without an exception."""
    at = AppTest.from_file(str(APP / "views" / f"{name}.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}
