"""Long work shows progress on stderr (issue 28); short work off a terminal prints none."""

import io

from simulator import progress as progress_module
from simulator import sweep
from simulator.progress import Progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_off_a_terminal_short_work_is_silent_and_long_work_reports(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    quiet, out = io.StringIO(), io.StringIO()
    p = Progress("training", "steps", stream=quiet)
    for k in range(1, 4):
        p(k, 3)
    assert quiet.getvalue() == ""                          # done before QUIET_S: nothing
    p = Progress("training", "steps", stream=out)
    for k in range(1, 11):                                 # one step every 2 s
        clock.now += 2.0
        p(k, 10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "training: 3/10 steps" and lines[-1] == "training: 10/10 steps"
    assert lines == ["training: 3/10 steps", "training: 6/10 steps", "training: 9/10 steps", "training: 10/10 steps"]


def test_on_a_terminal_one_line_is_redrawn():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = Progress("search", "layouts", stream=out)
    p(1, 2)
    p(2, 2, note="done")
    assert out.getvalue() == ("\rsearch [" + "#" * 15 + "." * 15 + "] 1/2 layouts"
                              "\rsearch [" + "#" * 30 + "] 2/2 layouts (done)\n")


def test_sweep_reports_each_point():
    seen = []
    sweep("schedule", {"p": 4}, schedule=["gpipe", "1f1b"], m=[2, 8], progress=lambda *a: seen.append(a))
    assert [s[:2] for s in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert seen[0][2] == "schedule=gpipe, m=2"


def test_search_reports_each_layout():
    from simulator.cost.search import search_training

    seen = []
    res = search_training("gpt3-1.3b", "a100-80gb", 8, 16, top=1, progress=lambda *a: seen.append(a))
    assert seen and [s[0] for s in seen] == list(range(1, seen[-1][1] + 1)) and res.top
    assert seen[-1][2] == f"{res.evaluated:,} priced of {res.considered:,} configurations"  # the bound skips some
