"""The app under several students at once: the same Training playground run in 1 session, then in
N sessions at the same time, each session's time beside the single one's.

    python bench/bench_app_sessions.py               # 5 concurrent sessions, pp on 4 devices, in-process
    python bench/bench_app_sessions.py --sessions 3 --strategy dp
    python bench/bench_app_sessions.py --json

Each session is Streamlit's AppTest of app/views/training.py (the script runs in its own thread,
as a server runs each browser session's script), set to the run's settings, then "Run training"
pressed; the time is from the press to the page having drawn its results. Target (issue 27): each
of 5 concurrent sessions within 1.5x of one session's time. The machine's load average is printed
with the figures: on a shared machine they say as much about the others as about the app.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))


def session(params: dict) -> float:
    """Seconds from pressing Run training to the results drawn, in one AppTest session."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "views" / "training.py"), default_timeout=600)
    at.query_params.update(params)
    at.run()
    t0 = time.perf_counter()
    at.button(key="run").click().run()
    took = time.perf_counter() - t0
    if at.exception or not at.metric:
        raise SystemExit(f"the run failed: {at.exception}")
    return took


def concurrent(n: int, params: dict) -> list[float]:
    out: list[float] = [0.0] * n

    def one(i: int) -> None:
        out[i] = session(params)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--strategy", default="pp")
    ap.add_argument("--mode", default="run in-process", choices=["run in-process", "simulated clock only"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.sessions < 1:
        ap.error(f"--sessions must be >= 1, got {args.sessions}")
    params = {"strategy": args.strategy, "run_mode": args.mode}
    session(params)  # imports and caches warm, as on a server that has served a page
    single = session(params)
    many = concurrent(args.sessions, params)
    ratios = [t / single for t in many]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"single_s": single, "concurrent_s": many, "ratios": ratios, "load_1min": load,
                          "cpus": os.cpu_count(), "params": params}))
    else:
        print(f"{args.strategy}, {args.mode}; load average {load:.1f} on {os.cpu_count()} CPUs")
        print(f"{'session':>8} {'alone (s)':>10} {'concurrent (s)':>15} {'ratio':>6}")
        for i, (t, r) in enumerate(zip(many, ratios)):
            print(f"{i:>8} {single:>10.2f} {t:>15.2f} {r:>6.2f}")
        print(f"worst ratio {max(ratios):.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
