"""`parasim app`: start the Streamlit web app (device actors on an embedded local Ray)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..errors import ParasimError


def app_path() -> Path:
    return Path(__file__).resolve().parents[2] / "app" / "main.py"


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="open the web app (Streamlit)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument("--headless", action="store_true", help="do not open a browser window")
    p.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 1 <= args.port <= 65535:
        raise ParasimError(f"--port must be a TCP port between 1 and 65535, got {args.port}")
    path = app_path()
    if not path.exists():
        raise ParasimError(f"the app is not found at {path}: install parasim from its source tree (pip install -e .)")
    cmd = [sys.executable, "-m", "streamlit", "run", str(path), "--server.port", str(args.port),
           "--browser.gatherUsageStats", "false"]
    if args.headless:
        cmd += ["--server.headless", "true"]
    if args.address:
        cmd += ["--", "--address", args.address]
    return subprocess.call(cmd)
