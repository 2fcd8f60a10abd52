"""Small helpers shared by the pages: errors, "show the code", downloads, coming-soon notes.

Pages stay thin: widgets, one cached library call, one chart. Everything here is presentation.
"""

from __future__ import annotations

import ast
import inspect
from contextlib import contextmanager

import streamlit as st

from simulator import ParasimError, viz

# Page titles (as main.py registers them, and as lessons name them in `app_pages`) -> files
PAGE_FILES = {"Collectives": "views/collectives.py", "Sharding & auto-parallel": "views/sharding.py",
              "Training playground": "views/training.py", "Pipeline schedules": "views/pipelines.py",
              "Scale explorer": "views/scale.py", "Fault tolerance": "views/faults.py", "Lessons": "views/lessons.py"}


@contextmanager
def friendly_errors():
    """Show a ParasimError as one st.error line (never a traceback) and stop the page there."""
    try:
        yield
    except ParasimError as err:
        st.error(str(err))
        st.stop()


def intro(title: str, teaches: str) -> None:
    st.title(title)
    st.markdown(teaches)


def show_code(*functions, key: str) -> None:
    """A toggle that prints the library functions behind the page."""
    if st.toggle("Show the code", key=key, help="the parasim functions this page calls"):
        for fn in functions:
            st.caption(f"`{fn.__module__}.{fn.__qualname__}`")
            st.code(inspect.getsource(fn), language="python")


def figure(fig, caption: str | None = None, dpi: int = 120) -> bytes:
    """Render `fig` once to PNG, show it full width, and return the PNG (reused for downloads)."""
    png = viz.png_bytes(fig, dpi=dpi)
    st.image(png, width="stretch")
    if caption:
        st.caption(caption)
    return png


def trace_downloads(trace, png: bytes, stem: str, key: str) -> None:
    """Chrome trace JSON (open in ui.perfetto.dev), PNG of the figure, CSV of the events."""
    c1, c2, c3 = st.columns(3)
    c1.download_button("Chrome trace (JSON)", trace.to_chrome_json(), file_name=f"{stem}.json",
                       mime="application/json", key=f"{key}-json", on_click="ignore",
                       help="open in ui.perfetto.dev or chrome://tracing")
    c2.download_button("Figure (PNG)", png, file_name=f"{stem}.png", mime="image/png", key=f"{key}-png",
                    on_click="ignore")
    c3.download_button("Events (CSV)", trace.to_csv(), file_name=f"{stem}.csv", mime="text/csv", key=f"{key}-csv",
                    on_click="ignore")


def coming_soon(what: str, needs: str) -> None:
    st.info(f"**Coming soon.** {what} This page appears when `{needs}` lands in the library.")


def parse_strategy(text: str, what: str = "strategy") -> tuple | None:
    """'((2, 4), (4, 1))' -> ((2, 4), (4, 1)) with ast.literal_eval (literals only, never eval);
    an empty text -> None (no strategy: the library chooses). Refuses anything else in one line."""
    text = (text or "").strip()
    if not text:
        return None
    example = "e.g. ((2, 4), (4, 1))"
    if len(text) > 200:
        raise ParasimError(f"{what}: at most 200 characters, {example}")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ParasimError(f"{what} {text!r}: write a tuple of integer tuples, {example}") from None
    if not isinstance(value, (tuple, list)) or not value or not all(
            isinstance(t, (tuple, list)) and t and all(isinstance(v, int) and not isinstance(v, bool) for v in t)
            for t in value):
        raise ParasimError(f"{what} {text!r}: write a tuple of integer tuples, one per input, {example}")
    return tuple(tuple(t) for t in value)


def or_error(fn, *args, **kwargs):
    """fn(*args) or, on a ParasimError, its one-line st.error and None (the rest of the page goes on)."""
    try:
        return fn(*args, **kwargs)
    except ParasimError as err:
        st.error(str(err))
        return None
