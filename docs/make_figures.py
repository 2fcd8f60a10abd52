"""Draw the README's two pictures into docs/:

    python docs/make_figures.py            # both (the screenshot needs Chromium and playwright)
    python docs/make_figures.py timeline   # only the figure

- docs/pipeline_1f1b.png: the timeline of the README tour's real run (4-stage pipeline, 8
  micro-batches, 1F1B, one step, on the fixed `cpu` preset), drawn by `simulator.viz.timeline`.
- docs/app.png: a screenshot of the app's home page (`parasim app --headless` on a
  free port, opened in Debian's headless Chromium through playwright).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def tour_run(steps: int = 3):
    """The README tour's run, as the README writes it (`steps` of it)."""
    from simulator import GPTConfig, TrainConfig, train

    gpt = GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32)
    return train(TrainConfig(gpt, strategy="pp", devices=4, microbatches=8, global_batch=16, schedule="1f1b", steps=steps))


def draw_timeline(path: Path = HERE / "pipeline_1f1b.png") -> Path:
    from simulator import viz

    fig = viz.timeline(tour_run(steps=1).trace, title="pp = 4, 8 micro-batches, 1F1B", labels=False, width=10.0)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def screenshot_app(path: Path = HERE / "app.png", page: str = "") -> Path:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    server = subprocess.Popen([sys.executable, "-m", "simulator", "app", "--headless", "--port", str(port)],
                              cwd=HERE.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the app did not start")
            time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1280, "height": 860})
            tab.goto(f"http://127.0.0.1:{port}/{page}", timeout=120_000)
            tab.locator('[data-testid="stSidebar"]').first.wait_for(timeout=600_000)
            tab.wait_for_timeout(20_000)   # the page's charts
            tab.screenshot(path=str(path))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return path


def main(argv: list[str]) -> int:
    print(draw_timeline())
    if "timeline" not in argv:
        print(screenshot_app())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
