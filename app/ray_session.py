"""One Ray session per app server, started when the server starts (app/main.py).

`streamlit run app/main.py -- --address ray://host:10001` (or `parasim app --address ...`)
connects to an existing cluster; otherwise an embedded local Ray starts with 2 CPUs and no
dashboard. `ray` is imported here lazily, never at page import time.
"""

from __future__ import annotations

import argparse
import sys

import streamlit as st


def cli_address(argv: list[str] | None = None) -> str | None:
    """The `--address` given after `--` on the streamlit command line (None if absent)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--address", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args.address


@st.cache_resource(show_spinner="Starting Ray ...")
def ray_session(address: str | None = None):
    """Initialise Ray once per server process and return the module (cached across reruns).
    `ensure_ray` starts it from a long-lived thread: a Streamlit script thread ends after each
    run, and Ray's head processes would die with the thread that started them."""
    import ray

    from simulator import ensure_ray

    ensure_ray(address)
    return ray


def get_ray():
    """Ray for a real run: connects to --address if one was given, else embedded local Ray."""
    return ray_session(cli_address())
