"""The app under several students at once: the same Training playground run in 1 browser session,
then in N browser sessions at the same time on one server, each session's time beside the single one's.

    python bench/bench_app_sessions.py               # 5 concurrent sessions, pp on 4 devices, in-process
    python bench/bench_app_sessions.py --sessions 3 --strategy dp
    python bench/bench_app_sessions.py --distinct    # each session a different run (steps 1, 2, ...)
    python bench/bench_app_sessions.py --json

Each session is a real browser session (a page of its own browser context in the system Chromium,
as tests/browser_helpers.py launches it) on `streamlit run app/main.py`: one server process, one
script thread per session, as students meet it. Each phase has a fresh server (a server keeps the
runs it made: app/shared_runs.py), warmed by one run of other settings (imports and caches, as on a
server that has served a page). Two times per session, from its click on "Run training":

- *server*: to the session's script finished on the server, its whole page sent (the Training
  page writes it to the server's log; the log does not say which session, so the concurrent times
  are listed in the order the scripts finished);
- *page*: to the page drawn in the browser (the "time per step" metric shown and the script
  finished), polled every 50 ms.

Both are measured in two layouts, one after the other in the same run:

- *lecture*: the server on CPU 0, the browsers on CPU 1. In a lecture hall every student's browser
  draws on the student's own machine, so the server's CPU is not shared with the pages it serves.
  The server loses little by having one CPU: its sessions' scripts take turns on one interpreter
  lock, and BLAS runs on one thread (simulator/blas.py).
- *one machine*: the server and all the browsers on every CPU, as in a single-machine demo. Here
  five browsers drawing their pages compete with the server for the same CPUs, and with each
  other.

Target (issue 27): each of 5 concurrent sessions within 1.5x of one session's time for the same
run. It is judged on the server's time in the lecture layout, which is what the server gives each
student. The browser's own drawing time does not grow with the number of students when each
student has a machine. The other figures are printed beside it. The machine's load average is
printed with the figures: on a shared machine they say as much about the others as about the app.
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

SERVER_S = re.compile(r"([0-9.]+) (ns|µs|ms|s) from the click to these results")  # simulator.units.fmt_time
SCRIPT_S = re.compile(r"training script finished ([0-9.]+) s after the click")  # app/views/training.py, to stderr


def seconds(caption: str) -> float | None:
    """The server's time from the click to the run's results, read off the page's caption."""
    m = SERVER_S.search(caption)
    return float(m.group(1)) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)] if m else None


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


def phase(browser, runs: list[dict], warm: dict, cpus: set[int] | None) -> tuple[list[tuple[float, str]], list[float]]:
    """`runs` at once on a fresh server (on `cpus`; None: every CPU) warmed by one run of `warm`;
    with the server's script times (each session's script from the click to finished, in the order
    they finished, off the server's log)."""
    from browser_helpers import start_server, stop_server

    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_app_sessions_{os.getpid()}.log"
    proc, url, out = start_server(log, cpus=cpus)
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


def layouts() -> dict:
    """name -> (the server's CPUs, the browsers' CPUs); None: every CPU (module docstring)."""
    every = sorted(os.sched_getaffinity(0))
    out = {"lecture": ({every[0]}, set(every[1:]))} if len(every) >= 2 else {}
    return {**out, "one machine": (None, None)}


def measure(runs: list[dict], warm: dict, distinct: bool, server_cpus, browser_cpus) -> dict:
    """Alone and concurrent phases in one layout: the browsers (and the Playwright driver that
    starts them) on `browser_cpus`, the server on `server_cpus` (None: every CPU)."""
    from browser_helpers import launch
    from playwright.sync_api import sync_playwright

    every = os.sched_getaffinity(0)
    os.sched_setaffinity(0, browser_cpus or every)  # inherited by the driver and the browsers it starts
    try:
        with sync_playwright() as pw:
            browser = launch(pw)
            singles = [phase(browser, [r], warm, server_cpus) for r in runs[:len(runs) if distinct else 1]]
            load_single = os.getloadavg()[0]
            many, script_many = phase(browser, runs, warm, server_cpus)
            load_many = os.getloadavg()[0]
            browser.close()
    finally:
        os.sched_setaffinity(0, every)
    page_alone = [p[0][0][0] for p in singles]
    page_alone = page_alone if distinct else page_alone * len(runs)
    script_alone = [s for p in singles for s in p[1]]
    page_many = [t for t, _ in many]
    return {"page_alone_s": page_alone, "page_concurrent_s": page_many,
            "page_ratios": [t / a for t, a in zip(page_many, page_alone)],
            "server_alone_s": script_alone, "server_concurrent_s": script_many,
            "server_worst_ratio": max(script_many) / max(script_alone) if script_many and script_alone else None,
            "run_done_s": [seconds(c) for _, c in many], "run_done_alone_s": seconds(singles[0][0][0][1]),
            "shared": ["made once on this server" in c for _, c in many], "load_1min": [load_single, load_many],
            "server_cpus": sorted(server_cpus) if server_cpus else "every",
            "browser_cpus": sorted(browser_cpus) if browser_cpus else "every"}


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
    from browser_helpers import missing_browser

    if missing_browser():
        raise SystemExit(f"the bench needs the browser: {missing_browser()}")
    params = {"strategy": args.strategy, "run_mode": args.mode, "steps": "3"}
    warm = dict(params, steps="1", batch="16")  # other settings: the measured run is not yet on the server
    runs = ([dict(params, steps=str(i + 1)) for i in range(args.sessions)] if args.distinct
            else [params] * args.sessions)
    results = {name: measure(runs, warm, args.distinct, *cpus) for name, cpus in layouts().items()}
    if args.json:
        print(json.dumps({"layouts": results, "cpus": os.cpu_count(), "runs": runs}))
        return 0
    print(f"{args.strategy}, {args.mode}, {'distinct runs' if args.distinct else 'the same run'}, "
          f"{args.sessions} sessions, {os.cpu_count()} CPUs")
    for name, r in results.items():
        print(f"\n{name}: server on CPUs {r['server_cpus']}, browsers on CPUs {r['browser_cpus']}; load average "
              f"{r['load_1min'][0]:.1f} (alone) and {r['load_1min'][1]:.1f} (concurrent)")
        print(f"{'session':>8} {'steps':>6} {'page alone (s)':>15} {'page concurrent (s)':>20} {'ratio':>6} "
              f"{'run done (s)':>13} shared")
        for i, (a, t, q) in enumerate(zip(r["page_alone_s"], r["page_concurrent_s"], r["page_ratios"])):
            done = "-" if r["run_done_s"][i] is None else f"{r['run_done_s'][i]:.2f}"
            print(f"{i:>8} {runs[i]['steps']:>6} {a:>15.2f} {t:>20.2f} {q:>6.2f} {done:>13} {r['shared'][i]}")
        print(f"server: alone {', '.join(f'{t:.2f}' for t in r['server_alone_s'])} s; "
              f"concurrent {', '.join(f'{t:.2f}' for t in r['server_concurrent_s'])} s (in the order they finished); "
              f"worst ratio {r['server_worst_ratio']:.2f}; page worst ratio {max(r['page_ratios']):.2f}")
    judged = results.get("lecture")
    if judged is not None and judged["server_worst_ratio"] is not None:
        q = judged["server_worst_ratio"]
        print(f"\ntarget: each session's server time in the lecture layout within 1.5x of one session's: "
              f"{'met' if q <= 1.5 else 'NOT met'} (worst {q:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
