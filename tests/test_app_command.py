"""`parasim app`: the app ships inside the distribution, the server binds 127.0.0.1 and hides the
deploy button, and stopping the command stops the server (no orphan child)."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_distribution_ships_every_app_file():
    """setup.py's packages cover app/ and simulator/ (read by running setup.py with setuptools.setup
    recorded: public API only, on every Python from 3.10; setuptools comes with the [test] extra)."""
    import runpy
    from types import SimpleNamespace
    from unittest import mock

    import setuptools

    with mock.patch.object(setuptools, "setup") as setup:
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            runpy.run_path(str(ROOT / "setup.py"))
        finally:
            os.chdir(cwd)
    dist = SimpleNamespace(**{"package_dir": {}, **setup.call_args.kwargs})
    dirs = {ROOT / dist.package_dir.get(p.split(".")[0], p.split(".")[0]) / Path(*p.split(".")[1:])
            for p in dist.packages}
    app_files = sorted((ROOT / "app").rglob("*.py"))
    assert ROOT / "app" / "main.py" in app_files and len(app_files) >= 9
    missing = [f for f in app_files if f.parent not in dirs]
    assert not missing, f"not packaged: {missing}"
    sim_dirs = {p.parent for p in (ROOT / "simulator").rglob("__init__.py")}
    assert sim_dirs <= dirs


def test_app_path_is_the_packaged_main():
    from simulator.commands.app import app_path

    path = app_path()
    assert path.name == "main.py" and (path.parent / "views" / "training.py").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmdline_of(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def test_stopping_parasim_app_stops_the_server(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "app", "--headless", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"streamlit" in cmdline  # the command became the server (exec): one process to stop
        args = [a.decode() for a in cmdline]
        assert args[args.index("--server.address") + 1] == "127.0.0.1"
        assert args[args.index("--client.toolbarMode") + 1] == "minimal"
        config = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/host-config", timeout=5).read()
        assert config  # the server answers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) is not None
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
        assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(port).encode() in cmdline_of(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_on_a_desktop_the_first_start_asks_nothing_and_opens_the_browser(tmp_path):
    """A desktop (DISPLAY set), a new user (no ~/.streamlit/credentials.toml) and an open terminal
    (stdin open, never answered): Streamlit's first run would stop at its "Email:" prompt; parasim
    app serves at once and opens the browser (a stand-in xdg-open records the address)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    opened = tmp_path / "opened.txt"
    (bin_dir / "xdg-open").write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    (bin_dir / "xdg-open").chmod(0o755)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp_path), DISPLAY=":0",
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "app", "--port", str(port)], cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not opened.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start and open a browser"
            time.sleep(0.5)
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read() == b"ok"
        assert opened.read_text().strip() == f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        out = proc.communicate()[0].decode()
    assert "Email" not in out and not (tmp_path / ".streamlit" / "credentials.toml").exists()


def test_page_url_builds_the_links_lessons_use():
    sys.path.insert(0, str(ROOT / "app"))
    from ui import page_url

    assert page_url("Training playground", strategy="dp", bucket=True, bucket_mb=0.05) == \
        "/training?strategy=dp&bucket=true&bucket_mb=0.05"
    assert page_url("pipelines", base="http://localhost:8501/", schedules=["gpipe", "1f1b"]) == \
        "http://localhost:8501/pipelines?schedules=gpipe&schedules=1f1b"
    with pytest.raises(ValueError, match="unknown page"):
        page_url("nowhere")


def test_host_chooses_the_bound_address_and_a_bad_port_is_one_line():
    import argparse

    from simulator.commands.app import add_parser, streamlit_command
    from simulator.errors import ParasimError

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    for argv, host in ((["app"], "127.0.0.1"), (["app", "--host", "0.0.0.0"], "0.0.0.0")):
        cmd = streamlit_command(parser.parse_args(argv), Path("main.py"))
        assert cmd[cmd.index("--server.address") + 1] == host
        assert cmd[cmd.index("--client.toolbarMode") + 1] == "minimal"  # no Deploy button
    with pytest.raises(ParasimError, match="--port 0: a port is a number from 1 to 65535"):
        streamlit_command(parser.parse_args(["app", "--port", "0"]), Path("main.py"))


def test_the_server_keeps_its_bytecode_in_the_cache_when_the_environment_forbids_it_beside_the_sources(tmp_path):
    """PYTHONDONTWRITEBYTECODE=1 (as on the project's machine) made every cold server compile the
    home page's modules again: `parasim app` gives its server a bytecode folder under the user's cache
    instead, writes nothing beside the sources, and keeps a PYTHONPYCACHEPREFIX the user set."""
    from simulator.commands.app import server_env

    env = server_env({"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(tmp_path), "HOME": "/nowhere"})
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "parasim" / "pycache")
    assert server_env({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/mine"})["PYTHONPYCACHEPREFIX"] == "/mine"
    assert "PYTHONPYCACHEPREFIX" not in server_env({"HOME": "/h"})  # bytecode beside the sources, as Python does

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("X = 1\n")
    run_env = dict(server_env(dict(os.environ, PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / "cache"))),
                   PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", "import pkg; print(pkg.X)"], env=run_env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    cached = list((tmp_path / "cache" / "parasim" / "pycache").rglob("pkg/__init__.*.pyc"))
    assert len(cached) == 1 and not (src / "pkg" / "__pycache__").exists()


def test_parasim_app_serves_without_watching_its_sources_or_collecting_after_each_run():
    from types import SimpleNamespace

    from simulator.commands.app import SERVING, streamlit_command

    cmd = streamlit_command(SimpleNamespace(port=8599, host="127.0.0.1", headless=True, address=None), Path("m.py"))
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert flags["--server.fileWatcherType"] == "none" and flags["--runner.postScriptGC"] == "false"
    assert all(flag in cmd for flag in SERVING[::2])
