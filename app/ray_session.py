"""One Ray session per app server, started only when a page asks for a real run.

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
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--address", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args.address


@st.cache_resource(show_spinner="Starting Ray ...")
def ray_session(address: str | None = None):
    """Initialise Ray once per server process and return the module (cached across reruns)."""
    import ray

    if not ray.is_initialized():
        if address:
            ray.init(address=address)
        else:
            ray.init(num_cpus=2, include_dashboard=False)
    return ray


def get_ray():
    """Ray for a real run: connects to --address if one was given, else embedded local Ray."""
    return ray_session(cli_address())
