"""`parasim app`: serve the web app installed with parasim (package `parasim_app`, from app/).

The command replaces itself with the Streamlit server (exec), so stopping `parasim app` (Ctrl-C,
SIGTERM) stops the server: no child process is left behind. The server binds 127.0.0.1 unless
--host says otherwise and hides Streamlit's deploy button (client.toolbarMode = minimal). It never
asks a question: Streamlit's first-run "Email:" prompt is off (server.showEmailPrompt, Streamlit
>= 1.59 as pyproject.toml requires) and so is its usage-statistics gathering.
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
           "--client.toolbarMode", "minimal"]
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
    env = pinned(os.environ)  # the emulated devices' tiny products on one BLAS thread (simulator.blas)
    if os.name == "posix":
        os.execve(cmd[0], cmd, env)  # the server takes this process's place: stopping it stops the server
    return subprocess.call(cmd, env=env)
