"""End to end in a real headless Chromium: start `streamlit run app/main.py`, open a page, change a
control, and check the chart and the numbers follow. Uses the system Chromium (never a download)."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("streamlit") / "server.log", "w")
    env = dict(os.environ, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
                             "--server.headless", "true", "--server.port", str(port),
                             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read().strip() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start within 60 s (exit {proc.poll()}); see {log.name}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def metric_values(page, label: str) -> list[str]:
    cards = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return [cards.nth(i).locator('[data-testid="stMetricValue"]').inner_text() for i in range(cards.count())]


def test_pipeline_page_reacts_to_the_stage_slider(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/pipelines", wait_until="domcontentloaded")
    page.get_by_text("Pipeline schedules", exact=False).first.wait_for(timeout=60_000)
    chart = page.locator('[data-testid="stImage"] img, [data-testid="stPyplot"] img').first
    chart.wait_for(state="visible", timeout=60_000)
    page.locator('[data-testid="stMetric"]').first.wait_for(timeout=60_000)
    before = metric_values(page, "bubble")
    assert before[0] == "27.3%"  # GPipe p=4, m=8: (p-1)/(m+p-1) = 3/11
    page.screenshot(path=str(tmp_path / "pipelines-before.png"), full_page=True)

    slider = page.locator('[data-testid="stSlider"]').filter(has_text="Stages p").locator('[role="slider"]')
    slider.focus()
    slider.press("ArrowRight")  # p: 4 -> 5
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                 .some(e => e.innerText.trim() === '33.3%')""", timeout=60_000)
    after = metric_values(page, "bubble")
    assert after[0] == "33.3%"  # p=5, m=8: 4/12
    assert after != before
    chart.wait_for(state="visible", timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    shot = tmp_path / "pipelines-after.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    keep = os.environ.get("PARASIM_SCREENSHOT_DIR")  # optional: keep the pictures to look at
    if keep:
        for f in tmp_path.glob("*.png"):
            (Path(keep) / f.name).write_bytes(f.read_bytes())
    page.close()
