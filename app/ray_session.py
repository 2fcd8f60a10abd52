"""Ray for the app's real-device runs, started in the background the first time a page that runs on
devices needs it (never when the server starts, never by a page that only prices or draws).

`streamlit run app/main.py -- --address ray://host:10001` (or `parasim app --address ...`)
connects to an existing cluster; otherwise an embedded local Ray starts with 2 CPUs and no
dashboard. While Ray is starting, a run asked for "on Ray actors" runs on the in-process runtime,
which gives the same results (the runtimes are tested equal), and says so. `ray` is imported here
lazily, never at page import time. `OFF` set to a reason keeps Ray off in this process (the AppTests
set it: they run the pages in-process and must not start a 2 GB Ray by opening the Training page,
whose default is "run on Ray actors"); served pages leave it None.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import streamlit as st

OFF: str | None = None  # a one-line reason Ray stays off in this process; None: started on demand


def cli_address(argv: list[str] | None = None) -> str | None:
    """The `--address` given after `--` on the streamlit command line (None if absent)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--address", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args.address


class RayStart:
    """One background start of Ray per server: `ready`, `error` (a one-line message) and how long
    the start took. `ensure_ray` parks Ray's head in a long-lived thread of its own (a Streamlit
    script thread ends after each run, and Ray's processes would die with it)."""

    def __init__(self, address: str | None, off: str | None = None):
        self.address, self.off, self.error, self.started_at, self.took_s = address, off, off, time.monotonic(), None
        self.done = threading.Event()
        if off:  # never started: the page says why, and runs go in-process
            self.took_s = 0.0
            self.done.set()
            return
        threading.Thread(target=self._start, name="parasim-ray-start", daemon=True).start()

    def _start(self) -> None:
        try:
            from simulator import ensure_ray

            ensure_ray(self.address)
        except Exception as err:  # noqa: BLE001  (shown to the user as one line, the run goes on in-process)
            self.error = " ".join(str(err).split())[:300] or type(err).__name__
        self.took_s = time.monotonic() - self.started_at
        self.done.set()

    @property
    def ready(self) -> bool:
        return self.done.is_set() and self.error is None

    def status(self) -> str:
        """Where the start is, in words for the page."""
        if self.off:
            return f"Ray is {self.off}: runs go on the in-process runtime"
        if self.error:
            return f"Ray could not start ({self.error}): runs go on the in-process runtime"
        if self.ready:
            return f"Ray is ready (it started in {self.took_s:.1f} s)"
        return (f"Ray is starting in the background ({time.monotonic() - self.started_at:.0f} s so far): until "
                "it is ready, runs go on the in-process runtime, which gives the same results")


@st.cache_resource(show_spinner=False)
def _ray_start(address: str | None, off: str | None) -> RayStart:
    return RayStart(address, off)


def start_ray() -> RayStart:
    """Start Ray in the background (once per server) and return its state at once."""
    return _ray_start(cli_address(), OFF)
