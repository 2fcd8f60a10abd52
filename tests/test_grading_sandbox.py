"""The sandbox protocol both ways as JSON data (no pickle), its limits refused in one line, and
a runner that never outlives its grader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from simulator import ParasimError
from simulator.grading.sandbox import Limits, Sandbox

ROOT = str(Path(__file__).resolve().parents[1])
SOURCE = """
def total(xs, scale=1.0):
    return float(sum(xs)) * scale

def apply(fn, x):
    return fn(x) + 1

def shape_of(a):
    return a.shape

def name_of(make):
    return make().name

def spin():
    while True:
        pass
"""


def test_calls_and_callbacks_travel_as_json_data():
    from simulator.auto.graph import Network

    with Sandbox(SOURCE, Limits(timeout_s=60)) as box:
        assert box.loaded, box.load_error
        assert box.call("total", ([1, 2, 3],), {"scale": 2.0}) == 12.0
        assert box.call("shape_of", (np.zeros((2, 3)),)) == (2, 3)
        assert box.call("apply", (lambda x: x * 10, 4)) == 41       # the lambda runs here, called back
        assert box.call("name_of", (lambda: Network("built by the check"),)) == "built by the check"
        with pytest.raises(TypeError):
            box.call("total", (object(),))                           # not data, not callable


@pytest.mark.parametrize("kw,message", [(dict(timeout_s=0), "--timeout must be"), (dict(timeout_s=-5), "--timeout"),
                                        (dict(timeout_s=float("nan")), "--timeout"),
                                        (dict(timeout_s=float("inf")), "--timeout"),
                                        (dict(memory_mb=0), "--memory-mb must be"), (dict(file_mb=0), "file_mb"),
                                        (dict(import_timeout_s=True), "import_timeout_s")])
def test_limits_that_would_grade_nothing_are_refused(kw, message):
    with pytest.raises(ParasimError, match=message):
        Limits(**kw)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return _gone(pid)


GRADER = """
import os, sys, subprocess
from simulator.grading import sandbox
if sys.argv[1] == "early":      # die as soon as the runner is started, before it set PR_SET_PDEATHSIG
    popen = subprocess.Popen
    def spy(*a, **k):
        p = popen(*a, **k)
        print(p.pid, flush=True)
        os._exit(0)
    sandbox.subprocess.Popen = spy
box = sandbox.Sandbox(sys.argv[2], sandbox.Limits(timeout_s=600))
print(box.proc.pid, flush=True)
box.call("spin")
"""


@pytest.mark.parametrize("when", ["early", "spinning"])
def test_the_runner_dies_with_its_grader(when):
    """SIGKILL the grader while its submission spins (or while the runner starts): the runner,
    in its own session, is gone too (no orphan burning a CPU)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    source = "while True:\n    pass\n" if when == "early" else SOURCE     # early: it spins at import
    grader = subprocess.Popen([sys.executable, "-c", GRADER, when, source], stdout=subprocess.PIPE, text=True, env=env)
    pid = None
    try:
        pid = int(grader.stdout.readline())
        if when == "spinning":
            time.sleep(0.5)
            grader.send_signal(signal.SIGKILL)
        grader.wait(timeout=60)
        assert _wait_gone(pid, 60), f"runner {pid} outlived its grader"
    finally:
        grader.kill()
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
