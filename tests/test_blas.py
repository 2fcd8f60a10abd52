"""BLAS on one thread for the processes parasim starts (simulator.blas): the app's server and the
test session; a value the user set is kept."""

import os

import pytest

from simulator.blas import PINNED_BLAS, pinned
from simulator.commands import app as app_cmd


def test_pinned_adds_one_thread_and_keeps_what_the_user_set():
    env = pinned({"OMP_NUM_THREADS": "4", "HOME": "/h"})
    assert env["OMP_NUM_THREADS"] == "4" and env["HOME"] == "/h"
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert set(PINNED_BLAS) <= set(env)


def test_parasim_app_starts_its_server_with_blas_pinned(monkeypatch):
    seen = {}

    def execve(path, argv, env):
        seen.update(path=path, argv=argv, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    from simulator.cli import build_parser
    args = build_parser().parse_args(["app", "--port", "8599"])
    if os.name != "posix":
        pytest.skip("the server replaces the process only on POSIX")
    with pytest.raises(SystemExit):
        app_cmd.run(args)
    assert seen["argv"][1:4] == ["-m", "streamlit", "run"]
    assert seen["env"]["OPENBLAS_NUM_THREADS"] == "1" and seen["env"]["MKL_NUM_THREADS"] == "3"


def test_the_test_session_runs_blas_on_one_thread():
    """tests/conftest.py pins it before numpy is imported (subprocesses and Ray actors inherit it)."""
    assert all(os.environ.get(k) for k in PINNED_BLAS)
