"""`parasim app`: serve the web app installed with parasim (package `parasim_app`, from app/).

The command replaces itself with the Streamlit server (exec), so stopping `parasim app` (Ctrl-C,
SIGTERM) stops the server: no child process is left behind. The server binds 127.0.0.1 unless
--host says otherwise and hides Streamlit's deploy button (client.toolbarMode = minimal). It never
asks a question: Streamlit's first-run "Email:" prompt is off (server.showEmailPrompt, Streamlit
>= 1.59 as pyproject.toml requires) and so is its usage-statistics gathering.

The server's environment (`server_env`): BLAS on one thread (simulator.blas), and bytecode kept. An
environment that forbids writing bytecode beside the sources (PYTHONDONTWRITEBYTECODE) makes every
cold server compile the ~170 modules the home page imports, again at each start (0.5 s of the
home page's first paint, docs/app-performance.md); the server then writes and reads its bytecode
under the user's cache folder instead (PYTHONPYCACHEPREFIX, Python >= 3.8): nothing is written
beside the sources, and from the second start on nothing is compiled. A PYTHONPYCACHEPREFIX the
user set is kept as it is.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ..blas import pinned
from ..errors import ParasimError


def app_path() -> Path:
    """main.py of the installed app package; for an editable install made before the app was
    packaged, the app/ folder of the source tree this simulator package comes from."""
    spec = importlib.util.find_spec("parasim_app")
    if spec is not None and spec.origin:
        return Path(spec.origin).resolve().parent / "main.py"
    return Path(__file__).resolve().parents[2] / "app" / "main.py"


# Serving the installed app, not developing it: no watching of its sources for edits (Streamlit's
# watcher lists every imported module's file after each run of a page), and no full garbage
# collection after each run (Streamlit's runner.postScriptGC: 0.49 s of a cold home page's run, by
# py-spy, during which no other session's script runs; Python's own collector still runs)
SERVING = ["--server.fileWatcherType", "none", "--server.runOnSave", "false", "--runner.postScriptGC", "false"]


def bytecode_cache(env) -> Path:
    """Where the server keeps its bytecode when it may not write it beside the sources: parasim's
    folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache, as the XDG base directory spec)."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "parasim" / "pycache"


def server_env(environ) -> dict:
    """The environment `parasim app` gives its server: `environ` with BLAS pinned to one thread and,
    where `environ` forbids bytecode beside the sources and names no PYTHONPYCACHEPREFIX, bytecode
    written and read under `bytecode_cache` instead of compiled again at every start."""
    env = pinned(environ)
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache(env))
    return env


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="open the web app (Streamlit)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--headless", action="store_true", help="do not open a browser window")
    p.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    p.set_defaults(func=run)


def streamlit_command(args, path: Path) -> list[str]:
    if not 0 < args.port < 65536:
        raise ParasimError(f"--port {args.port}: a port is a number from 1 to 65535")
    cmd = [sys.executable, "-m", "streamlit", "run", str(path), "--server.port", str(args.port),
           "--server.address", args.host, "--browser.gatherUsageStats", "false", "--server.showEmailPrompt", "false",
           "--client.toolbarMode", "minimal", *SERVING]
    if args.headless:
        cmd += ["--server.headless", "true"]
    if args.address:
        cmd += ["--", "--address", args.address]
    return cmd


def run(args) -> int:
    path = app_path()
    if not path.exists():
        raise ParasimError(f"the app is not found at {path}: reinstall parasim (pip install .)")
    cmd = streamlit_command(args, path)
    sys.stdout.flush()
    sys.stderr.flush()
    env = server_env(os.environ)  # BLAS on one thread, bytecode kept (the module's docstring)
    if os.name == "posix":
        os.execve(cmd[0], cmd, env)  # the server takes this process's place: stopping it stops the server
    return subprocess.call(cmd, env=env)
