"""Runs shared across the sessions of one server: an in-process training run is deterministic (the
same configuration gives the same losses, weights and simulated trace), so sessions asking for the
same one share it: the first computes it, the others wait for it instead of competing for the CPU
(five students pressing Run on the lesson's settings at once). The Ray runtime is never shared (its
actors belong to the run). `bench/bench_app_sessions.py` measures the effect."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

MAX_RUNS = 16  # results kept (the oldest is dropped first)
_lock = threading.Lock()
_runs: OrderedDict = OrderedDict()
_computing: dict = {}


def shared(key, compute: Callable[[], object]) -> tuple[object, bool]:
    """(value, shared): `compute()` once per `key` however many sessions ask at once; `shared` is
    True when the value was computed for another request."""
    with _lock:
        if key in _runs:
            _runs.move_to_end(key)
            return _runs[key], True
        gate = _computing.setdefault(key, threading.Lock())
    with gate:
        with _lock:
            if key in _runs:
                return _runs[key], True
        value = compute()  # a ParasimError propagates and nothing is kept
        with _lock:
            _runs[key] = value
            while len(_runs) > MAX_RUNS:
                _runs.popitem(last=False)
            _computing.pop(key, None)
        return value, False


def clear() -> None:
    """Forget every kept run (the benchmark times a fresh run)."""
    with _lock:
        _runs.clear()
