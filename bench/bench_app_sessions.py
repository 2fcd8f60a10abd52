"""The app under several students at once: the same Training playground run in 1 browser session,
then in N browser sessions at the same time on one server, each session's time beside the single one's.

    python bench/bench_app_sessions.py               # 5 concurrent sessions, pp on 4 devices, in-process
    python bench/bench_app_sessions.py --sessions 3 --strategy dp
    python bench/bench_app_sessions.py --distinct    # each session a different run (steps 1, 2, ...)
    python bench/bench_app_sessions.py --json

Each session is a real browser session (a page of its own browser context in the system Chromium,
as tests/browser_helpers.py launches it) on `streamlit run app/main.py`: one server process, one
script thread per session, as students meet it. The time is from the click on "Run training" to
the page having drawn its results (the "time per step" metric shown and the script finished),
polled every 50 ms. Each phase has a fresh server (a server keeps the runs it made:
app/shared_runs.py), warmed by one run of other settings (imports and caches, as on a server
that has served a page). Target (issue 27): each of 5 concurrent sessions within 1.5x of one
session's time for the same run. The machine's load average is printed with the figures: on a
shared machine they say as much about the others as about the app.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SERVER_S = re.compile(r"([0-9.]+) (ms|s) from the click to these results")
SCRIPT_S = re.compile(r"training script finished ([0-9.]+) s after the click")  # app/views/training.py, to stderr


def seconds(caption: str) -> float | None:
    """The server's time from the click to the run's results, read off the page's caption."""
    m = SERVER_S.search(caption)
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0}[m.group(2)] if m else None


DONE_JS = """() => { const a = document.querySelector('[data-testid="stApp"]');
  return a && a.getAttribute('data-test-script-state') === 'notRunning'
    && [...document.querySelectorAll('[data-testid="stMetricLabel"]')].some(e => e.innerText.includes('time per step')); }"""


def open_session(browser, url: str, params: dict):
    """A new browser session on the Training playground with `params` in its URL, its page drawn."""
    from browser_helpers import wait_until_idle

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{url}/training?{urlencode(params)}", wait_until="domcontentloaded")
    wait_until_idle(page, 300)
    return page


def run_sessions(browser, url: str, runs: list[dict], timeout_s: float = 900.0) -> list[tuple[float, str]]:
    """Open one session per entry of `runs`, press Run training in each (one after the other, a few
    ms apart), and return for each session the seconds from its click to its results drawn, and the
    page's caption of the run (where it ran, whether it was shared, the server's time to the results)."""
    pages = [open_session(browser, url, params) for params in runs]
    clicked = []
    for page in pages:
        page.get_by_role("button", name="Run training").click()
        clicked.append(time.monotonic())
    took: list[float | None] = [None] * len(pages)
    deadline = time.monotonic() + timeout_s
    while None in took:
        if time.monotonic() > deadline:
            raise SystemExit(f"sessions not done within {timeout_s:.0f} s: {took}")
        for i, page in enumerate(pages):
            if took[i] is None and page.evaluate(DONE_JS):
                took[i] = time.monotonic() - clicked[i]
                if page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count():
                    raise SystemExit(f"session {i} failed: {page.locator('[data-testid=stMain]').inner_text()[:300]}")
        time.sleep(0.05)
    captions = [page.get_by_text("from the click to these results", exact=False).first.inner_text() for page in pages]
    for page in pages:
        page.context.close()
    return list(zip(took, captions))


def phase(browser, runs: list[dict], warm: dict) -> tuple[list[tuple[float, str]], list[float]]:
    """`runs` at once on a fresh server warmed by one run of `warm`; with the server's script times
    (each session's script from the click to finished, in the order they finished, off the server's log)."""
    from browser_helpers import start_server, stop_server

    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_app_sessions_{os.getpid()}.log"
    proc, url, out = start_server(log)
    try:
        run_sessions(browser, url, [warm])
        before = log.stat().st_size
        took = run_sessions(browser, url, runs)
        time.sleep(0.2)  # the last lines reach the log
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(before)
            return took, [float(m.group(1)) for m in SCRIPT_S.finditer(f.read())]
    finally:
        stop_server(proc, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--strategy", default="pp")
    ap.add_argument("--mode", default="run in-process", choices=["run in-process", "simulated clock only"])
    ap.add_argument("--distinct", action="store_true", help="session i runs steps=i+1 (all different runs)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.sessions <= 6:
        ap.error(f"--sessions must be from 1 to 6 (the steps slider's range), got {args.sessions}")
    from browser_helpers import launch, missing_browser
    from playwright.sync_api import sync_playwright

    if missing_browser():
        raise SystemExit(f"the bench needs the browser: {missing_browser()}")
    params = {"strategy": args.strategy, "run_mode": args.mode, "steps": "3"}
    warm = dict(params, steps="1", batch="16")  # other settings: the measured run is not yet on the server
    runs = ([dict(params, steps=str(i + 1)) for i in range(args.sessions)] if args.distinct
            else [params] * args.sessions)
    with sync_playwright() as pw:
        browser = launch(pw)
        singles = [phase(browser, [r], warm) for r in runs[:1 if not args.distinct else len(runs)]]
        single_runs, script_alone = [p[0][0] for p in singles], [s for p in singles for s in p[1]]
        load_single = os.getloadavg()[0]
        many_runs, script_many = phase(browser, runs, warm)
        load_many = os.getloadavg()[0]
        browser.close()
    single, many = [t for t, _ in single_runs], [t for t, _ in many_runs]
    server_s = [seconds(c) for _, c in many_runs]
    shared = ["made once on this server" in c for _, c in many_runs]
    alone = single if args.distinct else single * args.sessions
    ratios = [t / a for t, a in zip(many, alone)]
    if args.json:
        print(json.dumps({"alone_s": alone, "concurrent_s": many, "ratios": ratios, "server_s": server_s,
                          "script_alone_s": script_alone, "script_concurrent_s": script_many, "shared": shared, "load_1min": [load_single, load_many],
                          "cpus": os.cpu_count(), "runs": runs}))
    else:
        print(f"{args.strategy}, {args.mode}, {'distinct runs' if args.distinct else 'the same run'}; load average "
              f"{load_single:.1f} (alone) and {load_many:.1f} (concurrent) on {os.cpu_count()} CPUs")
        print(f"{'session':>8} {'steps':>6} {'alone (s)':>10} {'concurrent (s)':>15} {'ratio':>6} "
              f"{'run done (s)':>13} shared")
        for i, (a, t, r) in enumerate(zip(alone, many, ratios)):
            done = "-" if server_s[i] is None else f"{server_s[i]:.2f}"
            print(f"{i:>8} {runs[i]['steps']:>6} {a:>10.2f} {t:>15.2f} {r:>6.2f} {done:>13} {shared[i]}")
        alone_done = seconds(single_runs[0][1])
        done_ratios = [d / alone_done for d in server_s if d is not None and alone_done]
        print("run done: the server's time from the click to the run's results (the page's caption), before the "
              f"page is drawn; alone: {alone_done}; worst ratio {max(done_ratios, default=float('nan')):.2f}")
        print("script done: each session's script on the server from the click to finished (off the server's "
              f"log, in the order they finished): alone {', '.join(f'{t:.2f}' for t in script_alone) or '-'}; "
              f"concurrent {', '.join(f'{t:.2f}' for t in script_many) or '-'}")
        print(f"worst ratio {max(ratios):.2f} (target <= 1.5 for the same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
