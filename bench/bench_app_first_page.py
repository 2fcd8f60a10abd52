"""A cold server's first page: the app's home page beside Streamlit's own one-line page, in one run.

    python bench/bench_app_first_page.py              # 3 rounds, the server as `parasim app` starts it
    python bench/bench_app_first_page.py --rounds 5 --json
    python bench/bench_app_first_page.py --env as-is  # the server in this environment, unchanged

Each round starts, one after the other, a cold `streamlit run app/main.py` and a cold `streamlit
run` of a one-line page (`st.title`), and opens each once in a fresh browser context of the system
Chromium (tests/browser_helpers.py). A server is cold when it has served nothing yet: its process
is new, so its first page imports every module the page needs. Timed from `goto` to, on the home
page, the title (h1), the map of the pages (the link to the Scale explorer) and the live figure
(its Vega-Lite chart drawn); on the one-line page, its title. The two servers of a round are
started in alternating order so that neither is always the first after a quiet moment.

`--env parasim` (the default) gives both servers the environment `parasim app` gives its own
(simulator.commands.app.server_env: where PYTHONDONTWRITEBYTECODE forbids bytecode beside the
sources, it is kept under the user's cache folder instead); `--env as-is` keeps this process's
environment (with PYTHONDONTWRITEBYTECODE=1, every module compiled at every start). Target (issue 27):
the first page of a cold server renders within 3 s. The load average is printed beside the figures:
on a shared machine they say as much about the others as about the app.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# what the home page shows, in order of arrival (CSS selectors)
HOME_MARKS = {"title": '[data-testid="stMainBlockContainer"] h1',
              "map": '[data-testid="stMainBlockContainer"] a[href="scale"]',
              "figure": '[data-testid="stMainBlockContainer"] [data-testid="stVegaLiteChart"] svg, '
                        '[data-testid="stMainBlockContainer"] [data-testid="stVegaLiteChart"] canvas'}
BARE_MARKS = {"title": "h1"}
BARE_PAGE = 'import streamlit as st\nst.title("bare")\n'


def visit(browser, url: str, marks: dict) -> dict:
    """Seconds from opening `url` in a fresh browser context to each of `marks` being visible."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    t0 = time.monotonic()
    page.goto(url, wait_until="commit")
    took = {}
    for name, selector in marks.items():
        page.locator(selector).first.wait_for(state="visible", timeout=120_000)
        took[name] = time.monotonic() - t0
    context.close()
    return took


def cold_visit(browser, script: Path, marks: dict, env: dict, log: Path) -> dict:
    """A fresh server of `script` (started and health-checked, nothing served yet), visited once."""
    from browser_helpers import start_server, stop_server

    proc, url, out = start_server(log, script=script, env=env)
    try:
        return visit(browser, url + "/", marks)
    finally:
        stop_server(proc, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--env", choices=["parasim", "as-is"], default="parasim")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    from browser_helpers import launch, missing_browser
    from playwright.sync_api import sync_playwright

    from simulator.commands.app import server_env

    if missing_browser():
        raise SystemExit(f"the bench needs the browser: {missing_browser()}")
    env = server_env(os.environ) if args.env == "parasim" else dict(os.environ)
    tmp = Path(tempfile.mkdtemp(prefix="bench_app_first_page_"))
    (tmp / "bare.py").write_text(BARE_PAGE)
    home_runs, bare_runs, loads = [], [], []
    with sync_playwright() as pw:
        browser = launch(pw)
        for r in range(args.rounds):
            order = ["home", "bare"] if r % 2 == 0 else ["bare", "home"]
            got = {}
            for which in order:
                script, marks = ((ROOT / "app" / "main.py", HOME_MARKS) if which == "home"
                                 else (tmp / "bare.py", BARE_MARKS))
                got[which] = cold_visit(browser, script, marks, env, tmp / f"{which}{r}.log")
            home_runs.append(got["home"])
            bare_runs.append(got["bare"])
            loads.append(os.getloadavg()[0])
        browser.close()
    median = {k: statistics.median(h[k] for h in home_runs) for k in HOME_MARKS}
    bare_median = statistics.median(b["title"] for b in bare_runs)
    if args.json:
        print(json.dumps({"home_s": home_runs, "bare_s": bare_runs, "load_1min": loads, "env": args.env,
                          "pycache_prefix": env.get("PYTHONPYCACHEPREFIX"), "cpus": os.cpu_count()}))
        return 0
    print(f"server environment: {args.env} (PYTHONDONTWRITEBYTECODE={env.get('PYTHONDONTWRITEBYTECODE')}, "
          f"PYTHONPYCACHEPREFIX={env.get('PYTHONPYCACHEPREFIX')}); {os.cpu_count()} CPUs")
    print(f"{'round':>5} {'load':>5} {'home title':>11} {'home map':>9} {'home figure':>12} {'one-line page':>14}"
          f" {'map - one-line':>15}")
    for r, (h, b, load) in enumerate(zip(home_runs, bare_runs, loads)):
        print(f"{r:>5} {load:>5.1f} {h['title']:>11.2f} {h['map']:>9.2f} {h['figure']:>12.2f} {b['title']:>14.2f}"
              f" {h['map'] - b['title']:>15.2f}")
    print(f"median: home title {median['title']:.2f} s, map {median['map']:.2f} s, figure {median['figure']:.2f} s; "
          f"one-line page {bare_median:.2f} s (target: the first page within 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
