"""app/shared_runs.py: a deterministic result computed once per key for every session asking at
once; sessions asking for different keys never wait for each other."""

import threading
import time

import pytest
from app_helpers import APP  # noqa: F401  (puts app/ on the path)
from shared_runs import clear, shared


@pytest.fixture(autouse=True)
def empty():
    clear()
    yield
    clear()


def in_threads(n, target):
    out = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, target(i))) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_five_sessions_asking_for_the_same_run_compute_it_once_and_the_others_wait():
    calls, waits = [], []

    def compute():
        calls.append(1)
        time.sleep(0.5)  # the others arrive while it runs
        return {"losses": [1.0, 0.5]}

    out = in_threads(5, lambda i: shared(("run", "pp", 4), compute, wait=lambda: waits.append(i)))
    assert len(calls) == 1
    assert sorted(reused for _, reused in out) == [False, True, True, True, True]
    assert all(value is out[0][0] for value, _ in out)  # the one result, not five copies
    assert waits  # the waiting sessions were told (their page shows it)
    assert shared(("run", "pp", 4), compute) == (out[0][0], True) and len(calls) == 1


def test_different_runs_from_different_sessions_compute_at_the_same_time():
    both_inside = threading.Barrier(2, timeout=10)  # broken (an error) if one key waited behind the other

    def compute(i):
        both_inside.wait()
        return i

    out = in_threads(2, lambda i: shared(("run", i), lambda: compute(i)))
    assert out == [(0, False), (1, False)]


def test_a_refused_run_keeps_nothing_and_the_next_request_computes():
    def refuse():
        raise ValueError("tp=3 does not divide 4 heads")

    with pytest.raises(ValueError):
        shared(("run", "tp", 3), refuse)
    assert shared(("run", "tp", 3), lambda: "ran") == ("ran", False)
