"""What the browser tests share: a `streamlit run app/main.py` server on a free port and the system
Chromium (never a download). Each browser test module starts one server for its tests."""

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


PINNED = "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); os.execvp(sys.argv[2], sys.argv[2:])"


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (sudo apt-get install -y chromium chromium-driver)"
    if importlib.util.find_spec("playwright") is None:
        return "no playwright (pip install -e \".[test]\")"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_path: Path, script: Path = ROOT / "app" / "main.py", env: dict | None = None,
                 cpus: set[int] | None = None):
    """(process, url, log): `script` (the app) served on a free port as `parasim app` serves it (its
    command, simulator.commands.app), once its health check answers, in `env` (default: the
    environment `parasim app` gives its server), on `cpus` (None: the CPUs this process may use;
    set before the command starts, so every thread of the server inherits it)."""
    from types import SimpleNamespace

    from simulator.commands.app import server_env, streamlit_command

    port = free_port()
    log = open(log_path, "w")
    env = dict(server_env(os.environ) if env is None else env, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    cmd = streamlit_command(SimpleNamespace(port=port, host="127.0.0.1", headless=True, address=None), script)
    if cpus is not None:  # os.sched_setaffinity, then exec the command: no taskset binary needed
        cmd = [sys.executable, "-c", PINNED, ",".join(map(str, sorted(cpus))), *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read().strip() == b"ok":
                return proc, url, log
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.close()
            pytest.fail(f"streamlit did not start within 60 s (exit {proc.poll()}); see {log_path}")
        time.sleep(0.2)


def stop_server(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def launch(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def wait_until_idle(page, settle_ms: int = 1500) -> None:
    """The script has run (Streamlit marks stApp notRunning) and the charts had time to draw."""
    page.wait_for_function(
        """() => { const a = document.querySelector('[data-testid="stApp"]');
                   return a && a.getAttribute('data-test-script-state') === 'notRunning'
                          && document.querySelector('[data-testid="stMainBlockContainer"] h1'); }""", timeout=120_000)
    page.wait_for_timeout(settle_ms)
