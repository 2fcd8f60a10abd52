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


def charts(page):
    return page.locator('[data-testid="stImage"] img')


def wait_for_metric_value(page, value: str) -> None:
    page.wait_for_function(
        """v => [...document.querySelectorAll('[data-testid="stMetricValue"]')].some(e => e.innerText.trim() === v)""",
        arg=value, timeout=60_000)


def keep(tmp_path: Path) -> None:
    """Copy the screenshots to $PARASIM_SCREENSHOT_DIR when set (to look at them)."""
    dest = os.environ.get("PARASIM_SCREENSHOT_DIR")
    if dest:
        for f in tmp_path.glob("*.png"):
            (Path(dest) / f.name).write_bytes(f.read_bytes())


def test_pipeline_page_reacts_to_the_stage_slider(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/pipelines", wait_until="domcontentloaded")
    page.locator('[data-testid="stMetric"]').first.wait_for(timeout=60_000)
    charts(page).first.wait_for(state="visible", timeout=60_000)
    before = metric_values(page, "bubble")
    assert before[0] == "27.3%"  # GPipe p=4, m=8: (p-1)/(m+p-1) = 3/11
    page.screenshot(path=str(tmp_path / "pipelines-before.png"), full_page=True)

    slider = page.get_by_role("slider", name="Stages p")
    slider.focus()
    slider.press("ArrowRight")  # p: 4 -> 5
    wait_for_metric_value(page, "33.3%")  # p=5, m=8: 4/12
    after = metric_values(page, "bubble")
    assert after[0] == "33.3%" and after != before
    charts(page).first.wait_for(state="visible", timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    shot = tmp_path / "pipelines-after.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    keep(tmp_path)
    page.close()


def test_training_playground_runs_and_draws_the_timeline(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/training", wait_until="domcontentloaded")
    page.get_by_text("press Run training", exact=False).first.wait_for(timeout=60_000)
    slider = page.get_by_role("slider", name="Micro-batches")
    slider.focus()
    for _ in range(4):  # 4 -> 8 micro-batches
        slider.press("ArrowRight")
    page.get_by_role("slider", name="Micro-batches").and_(page.locator('[aria-valuetext="8"]')).wait_for(
        state="attached", timeout=30_000)
    page.get_by_role("button", name="Run training").click()
    page.locator('[data-testid="stMetric"]').filter(has_text="bubble").wait_for(timeout=120_000)
    charts(page).nth(1).wait_for(state="visible", timeout=60_000)  # timeline and bubble figure
    bubble = metric_values(page, "bubble")[0]
    assert bubble.endswith("%") and 0.0 < float(bubble[:-1]) < 100.0  # 4 stages always leave a bubble
    assert float(metric_values(page, "vs one device")[0]) < 1e-9  # same math as one device
    assert charts(page).count() >= 2
    assert page.get_by_role("button", name="Chrome trace (JSON)").count() == 1
    assert page.locator('[data-testid="stProgress"]').count() == 1  # the run's progress bar, completed
    assert page.get_by_text("checked against one device", exact=True).count() == 1
    assert page.locator('[data-testid="stException"]').count() == 0
    shot = tmp_path / "training.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    keep(tmp_path)
    page.close()


def test_collective_player_plays_to_the_last_step_and_equals_numpy(server, browser):
    import numpy as np

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/player?n=8&algo=halving_doubling", wait_until="domcontentloaded")
    page.get_by_role("button", name="Play").wait_for(timeout=60_000)
    assert page.get_by_role("slider", name="Ranks n").get_attribute("aria-valuetext") == "8"
    page.get_by_role("button", name="Play").click()  # halving-doubling on 8 ranks: 2 log2(8) = 6 steps
    page.get_by_text("every rank's buffer equals numpy's all_reduce", exact=False).wait_for(timeout=60_000)
    assert page.get_by_role("slider", name="Step").get_attribute("aria-valuetext") == "6"
    assert "step=6" in page.url  # the URL follows the slider the player moved
    want = sum(100.0 * r + np.arange(16) for r in range(8))
    cells = page.locator('[data-testid="stTable"] tbody tr')
    assert cells.count() == 8
    for i in range(8):
        row = [c.inner_text().strip() for c in cells.nth(i).locator("td").all()]
        assert row[0] == " ".join(f"{v:g}" for v in want[:8]) + " … (16 numbers)" == row[1]
        assert row[2:] == ["0", "yes"]
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
