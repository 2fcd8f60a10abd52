"""Results shared across the sessions of one server, keyed by everything that determines them.

An in-process training run is deterministic (the same configuration gives the same losses, weights
and simulated trace; tests/test_runtime_equivalence.py), and so are the figures drawn from it: when
five students press Run on the lesson's settings at once, the first session computes, the others
wait for its result instead of competing for the same two cores (`bench/bench_app_sessions.py`
measures it). Each key has its own gate, so sessions asking for *different* runs never wait for
each other; the table's own lock is held only to look a key up. A Ray run is never shared (its
actors belong to the run). No Streamlit import: a waiting session's `wait` callback shows the wait
on its page (and lets Streamlit stop that session's script if its user moves on).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

MAX_RESULTS = 32  # results kept (the least recently used is dropped first)
WAIT_POLL_S = 0.25  # a waiting session calls its `wait` callback this often
_table_lock = threading.Lock()
_results: OrderedDict = OrderedDict()
_gates: dict = {}


def shared(key, compute: Callable[[], object], wait: Callable[[], None] | None = None) -> tuple[object, bool]:
    """(value, reused): `compute()` at most once per `key` however many sessions ask at once (until
    the result is dropped); `reused` is True when this call did not compute it. While another call
    computes the same key, this one calls `wait()` every WAIT_POLL_S seconds. If `compute` raises,
    nothing is kept and the next caller computes."""
    with _table_lock:
        if key in _results:
            _results.move_to_end(key)
            return _results[key], True
        gate = _gates.setdefault(key, threading.Lock())
    while not gate.acquire(timeout=WAIT_POLL_S):
        if wait is not None:
            wait()
    try:
        with _table_lock:
            if key in _results:
                return _results[key], True
        value = compute()
        with _table_lock:
            _results[key] = value
            while len(_results) > MAX_RESULTS:
                _results.popitem(last=False)
        return value, False
    finally:
        with _table_lock:
            if _gates.get(key) is gate:
                del _gates[key]
        gate.release()


def clear() -> None:
    """Forget every kept result."""
    with _table_lock:
        _results.clear()
