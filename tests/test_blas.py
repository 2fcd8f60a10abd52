"""BLAS on one thread for the processes parasim starts (simulator.blas): the app's server and the
test session; a value the user set is kept."""

import os
from types import SimpleNamespace

import pytest

from simulator.blas import PINNED_BLAS, pinned
from simulator.commands import app as app_cmd


def test_pinned_adds_one_thread_and_keeps_what_the_user_set():
    env = pinned({"OMP_NUM_THREADS": "4", "HOME": "/h"})
    assert env["OMP_NUM_THREADS"] == "4" and env["HOME"] == "/h"
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert set(PINNED_BLAS) <= set(env)


@pytest.mark.parametrize("system", ["posix", "nt"])
def test_parasim_app_starts_its_server_with_blas_pinned(monkeypatch, system):
    """On POSIX the server replaces the process (execve); elsewhere it is a child (subprocess.call):
    both get BLAS on one thread and keep what the user set."""
    seen = {}

    def execve(path, argv, env):
        seen.update(argv=argv, env=env)
        raise SystemExit(0)

    def call(argv, env):
        seen.update(argv=argv, env=env)
        return 0

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    # the command's view of the OS only (the real `os` stays as it is)
    monkeypatch.setattr(app_cmd, "os", SimpleNamespace(name=system, execve=execve, environ=os.environ))
    monkeypatch.setattr(app_cmd.subprocess, "call", call)
    from simulator.cli import build_parser
    args = build_parser().parse_args(["app", "--port", "8599"])
    if system == "posix":
        with pytest.raises(SystemExit):
            app_cmd.run(args)
    else:
        assert app_cmd.run(args) == 0
    assert seen["argv"][1:4] == ["-m", "streamlit", "run"]
    assert seen["env"]["OPENBLAS_NUM_THREADS"] == "1" and seen["env"]["MKL_NUM_THREADS"] == "3"


def test_the_test_session_runs_blas_on_one_thread():
    """tests/conftest.py pins it before numpy is imported (subprocesses and Ray actors inherit it)."""
    assert all(os.environ.get(k) for k in PINNED_BLAS)
