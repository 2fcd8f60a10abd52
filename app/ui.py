"""Small helpers shared by the pages: errors, "show the code", downloads, links, coming-soon notes.

Shareable links: every page's widgets that define its configuration have a short `key` and
`bind="query-params"` (`BIND`), so the URL holds the configuration (`/pipelines?p=8&m=16`) and
follows the widgets; `restore`/`remember` keep them when the user visits another page and comes
back (per page: pages reuse short keys such as `strategy` with different options).
`page_url(page, **params)` builds such a link (lessons use it); app/README.md lists every page's
parameters.

Pages stay thin: widgets, one cached library call, one chart. Everything here is presentation.
"""

from __future__ import annotations

import ast
import inspect
import re
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode

import streamlit as st
from nav import HOME_FILE, HOME_TITLE, PAGE_FILES, PAGES  # noqa: E402,F401  (re-exported)

from simulator import ParasimError, viz

# Streamlit's URL path of each page: the file's name without .py
PAGE_PATHS = {title: file.split("/")[-1].removesuffix(".py") for title, file in PAGE_FILES.items()}
# keyword arguments that bind a configuration widget to the URL (its key is the parameter's name)
BIND = {"bind": "query-params"}


APP_URL = "http://localhost:8501"  # `parasim app`'s default address, as the lessons' READMEs write their links
# [label](http://localhost:8501/<page path>?<configuration>): a README's link to a configuration in the app
DEEP_LINK = re.compile(r"\[([^\]]+)\]\(" + re.escape(APP_URL) + r"/(\w+)\?([^)\s]*)\)")


def deep_links(markdown: str) -> list[tuple[str, str, dict]]:
    """(label, page title, parameters) of every link in `markdown` to a configuration in the app; a
    repeated parameter (a multiselect) becomes a list."""
    titles = {path: title for title, path in PAGE_PATHS.items()}
    out = []
    for label, path, query in DEEP_LINK.findall(markdown):
        if path in titles:
            params: dict = {}
            for k, v in parse_qsl(query):
                params[k] = (params[k] if isinstance(params[k], list) else [params[k]]) + [v] if k in params else v
            out.append((" ".join(label.split()), titles[path], params))
    return out


def url_text(value) -> str | list[str]:
    """A widget's value as the URL holds it (bind="query-params"): booleans true/false, a
    multiselect's options repeated, anything else as shown."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return [str(url_text(v)) for v in value]
    return str(value)


def _same(url: list[str], value, fmt) -> bool:
    """Whether the URL's text `url` (every value of the parameter) is what the widget now holds."""
    held = url_text(fmt(value) if fmt else value)
    held = held if isinstance(held, list) else [held]
    if len(held) != len(url):
        return False
    for a, b in zip(url, held):
        try:
            if float(a) != float(b):
                return False
        except ValueError:
            if a.strip().lower() != b.strip().lower():
                return False
    return True


def restore(page: str) -> None:
    """Before a page's widgets: bring back the settings it had when the user left it (Streamlit
    drops a page's widget values on a page switch); a parameter in the URL wins over them. Also
    notes the URL as it arrived, so `remember` can name a value the page could not use."""
    st.session_state[f"_url_in/{page}"] = {k: st.query_params.get_all(k) for k in st.query_params}
    st.session_state[f"_shared/{page}"] = []
    for key, value in st.session_state.get(f"_kept/{page}", {}).items():
        if key not in st.query_params and key not in st.session_state:
            st.session_state[key] = value


def remember(page: str, *keys: str, formats: dict | None = None) -> None:
    """After a page's widgets: keep their values for `restore` (keys not shown now are kept too),
    and name in a notice every value of the URL that a widget could not take, with the value
    used instead (Streamlit falls back to the default without a word). `formats`: a widget's
    format_func, when the URL holds the option as shown rather than the value."""
    formats = formats or {}
    shared = st.session_state.setdefault(f"_shared/{page}", [])
    shared += [k for k in keys if k not in shared]
    if st.session_state.get("_share_slot") is not None:
        with st.session_state["_share_slot"].container():
            share_link(shared)
    kept = dict(st.session_state.get(f"_kept/{page}", {}))
    kept.update({k: st.session_state[k] for k in keys if k in st.session_state})
    st.session_state[f"_kept/{page}"] = kept
    arrived = st.session_state.get(f"_url_in/{page}", {})
    notices = st.session_state.setdefault(f"_notices/{page}", {})
    for key in keys:
        if key in arrived and key in st.session_state and not _same(arrived[key], st.session_state[key],
                                                                    formats.get(key)):
            fmt = formats.get(key)
            notices[key] = (", ".join(arrived[key]), st.session_state[key],
                            url_text(fmt(st.session_state[key]) if fmt else st.session_state[key]))
    for key, (bad, used, shown) in list(notices.items()):
        if key in keys:
            if key in st.session_state and st.session_state[key] != used:  # the user moved the widget since
                del notices[key]
                continue
            shown = ", ".join(shown) if isinstance(shown, list) else shown
            st.warning(f"The link's {key}={bad} is not a value this page offers for `{key}`: it uses "
                       f"{key}={shown or '(none)'} instead.", icon=":material/link_off:")


def full_link(keys) -> str:
    """The query of a link holding every input of the page as it is now (defaults too, so a
    recipient sees the same numbers whatever the defaults are on their side)."""
    pairs = []
    for key in keys:
        if key in st.session_state:
            text = url_text(st.session_state[key])
            pairs += [(key, t) for t in (text if isinstance(text, list) else [text])]
    return urlencode(pairs)


def page_url(page: str, base: str = "", **params) -> str:
    """The link that opens `page` (its title or its path, e.g. "Pipeline schedules" or "pipelines")
    with the given configuration: page_url("pipelines", p=8, m=16) -> "/pipelines?p=8&m=16".
    Lists repeat the parameter (multiselects); booleans are true/false; `base` is the server
    (e.g. "http://localhost:8501"). The parameter names are the widget keys (app/README.md)."""
    path = PAGE_PATHS.get(page, page)
    if path not in PAGE_PATHS.values():
        raise ValueError(f"unknown page {page!r}; pages: {', '.join(PAGE_PATHS)}")
    pairs = []
    for key, value in params.items():
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            pairs.append((key, str(v).lower() if isinstance(v, bool) else str(v)))
    return f"{base.rstrip('/')}/{path}" + (f"?{urlencode(pairs)}" if pairs else "")


def link_to(page: str, label: str, **params) -> None:
    """A link to another page (its title) opened with a configuration, through the router's
    st.page_link; a page run on its own (AppTest) has no router, so the link is plain markdown."""
    from streamlit.errors import StreamlitAPIException

    try:
        st.page_link(PAGE_FILES[page], label=label, icon=":material/open_in_new:",
                     query_params={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()})
    except StreamlitAPIException:
        st.markdown(f"→ [{label}]({page_url(page, **params)})")


def share_link(keys=()) -> None:
    """A "copy link" popover: the URL of this page holding every one of its inputs as they are now
    (`full_link`; st.code has a copy button). The address bar holds the inputs that differ from
    their defaults."""
    with st.popover("Copy link", icon=":material/link:", help="a link that opens this page with these settings"):
        try:
            url = st.context.url
        except Exception:  # noqa: BLE001  (no browser session, e.g. AppTest)
            url = ""
        query = full_link(list(keys) + (["present"] if st.session_state.get("present") else []))
        link = (url or "").split("?")[0] + (f"?{query}" if query else "")
        st.code(link or f"?{query}", language=None, wrap_lines=True)
        st.caption("Every setting of the page is in this link, the defaults too: whoever opens it sees "
                   "these numbers.")


def chart_font() -> int:
    """The font size (px) of chart text on this page: larger in presentation mode."""
    from charts import FONT, PRESENT_FONT

    return PRESENT_FONT if st.session_state.get("present") else FONT


def interactive(chart, key: str | None = None) -> None:
    """An Altair chart, or a Vega-Lite spec (a dict, e.g. charts.timeline_chart's), at full width
    (hover, zoom and selections run in the browser), its fonts from charts.spec_style: larger in
    presentation mode."""
    from charts import spec_style, styled

    if isinstance(chart, dict):
        st.vega_lite_chart({**chart, **spec_style(chart_font())}, width="stretch", key=key)
    else:
        st.altair_chart(styled(chart, chart_font()), width="stretch", key=key)


CLI_FLAG = re.compile(r"(?<![\w-])--(?=[a-z])")  # "--strategy" in a library message: the command line's spelling


def sentence(err, before: str = "") -> str:
    """A refusal as the page shows it: `before` (what the page was doing) and the library's message
    (it names the rule and the numbers) as one sentence on one line, with a capital and a full
    stop: "tp=3 does not divide 4 heads" -> "Tp=3 does not divide 4 heads." (the first letter only).
    The library writes settings as the command line's flags ("use --strategy dp"); a page has no
    flags, so they are named bare ("use strategy dp"), as the page's widgets and the URL name them."""
    text = " ".join(str(err).split()) or f"{type(err).__name__} (no message)"
    text = before + CLI_FLAG.sub("", text)
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def show_error(err, before: str = "") -> None:
    """st.error of `sentence(err, before)`."""
    st.error(sentence(err, before))


@contextmanager
def friendly_errors():
    """Show a ParasimError as one st.error sentence (never a traceback) and stop the page there."""
    try:
        yield
    except ParasimError as err:
        show_error(err)
        st.stop()


def intro(title: str, teaches: str) -> None:
    top = st.columns([3, 1], vertical_alignment="bottom")  # room for "Copy link" at 1024 px
    top[0].title(title)
    slot = top[1].empty()  # filled by `remember` once the page's widgets hold their values
    st.session_state["_share_slot"] = slot
    with slot.container():
        share_link()
    st.markdown(teaches)


def show_code(*functions, key: str) -> None:
    """A toggle that prints the library functions behind the page."""
    if st.toggle("Show the code", key=key, help="the parasim functions this page calls"):
        for fn in functions:
            st.caption(f"`{fn.__module__}.{fn.__qualname__}`")
            st.code(inspect.getsource(fn), language="python")


PRESENT_TEXT = 1.5  # presentation mode draws every text of a matplotlib figure this much larger


def enlarge_text(fig, factor: float = PRESENT_TEXT):
    """Every text of a matplotlib figure `factor` times larger (presentation mode); returns `fig`."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_fontsize(text.get_fontsize() * factor)
    return fig


def figure(fig, caption: str | None = None, dpi: int = 120, share: tuple | None = None) -> bytes:
    """Render `fig` once to PNG, show it full width, and return the PNG (reused for downloads). In
    presentation mode every text of the figure is drawn 1.5x larger (as the Vega-Lite charts' are).
    `fig` may be a function that draws it; with `share` (a key naming a deterministic result and the
    figure) the PNG is drawn once per server for every session showing that result (shared_runs)."""
    present = bool(st.session_state.get("present"))

    def render() -> bytes:
        drawn = fig() if callable(fig) else fig
        if present:
            enlarge_text(drawn)
        return viz.png_bytes(drawn, dpi=dpi)

    if share is None:
        png = render()
    else:
        from shared_runs import shared

        png, _ = shared(("figure", *share, present, dpi), render)
    st.image(png, width="stretch")
    if caption:
        st.caption(caption)
    return png


def png_download(draw, file_name: str, key: str, source: str) -> None:
    """A "Figure (PNG)" button for a page that draws its figure in the browser: `draw()` makes the
    matplotlib figure `source` names, rendered only when the button is pressed (a live page never
    waits on it)."""
    st.download_button("Figure (PNG)", lambda: viz.png_bytes(draw(), dpi=120), file_name=file_name, mime="image/png",
                       key=key, on_click="ignore", help=f"the same picture drawn by matplotlib ({source}), made when pressed")


def trace_downloads(trace, png, stem: str, key: str) -> None:
    """Chrome trace JSON (open in ui.perfetto.dev), PNG of the figure, CSV of the events. `png`:
    the bytes, or a function that draws them; each file is made only when its button is pressed
    (Streamlit calls the function), so a page that recomputes as a widget moves never waits on them."""
    c1, c2, c3 = st.columns(3)
    c1.download_button("Chrome trace (JSON)", trace.to_chrome_json, file_name=f"{stem}.json",
                       mime="application/json", key=f"{key}-json", on_click="ignore",
                       help="open in ui.perfetto.dev or chrome://tracing")
    c2.download_button("Figure (PNG)", png, file_name=f"{stem}.png", mime="image/png", key=f"{key}-png",
                    on_click="ignore")
    c3.download_button("Events (CSV)", trace.to_csv, file_name=f"{stem}.csv", mime="text/csv", key=f"{key}-csv",
                    on_click="ignore")


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
        show_error(err)
        return None


# help texts of the collective pickers (Collectives and Collective player pages)
KIND_HELP = ("all_reduce: everyone gets the sum; reduce_scatter: rank r gets piece r of the sum; all_gather: "
             "everyone gets every rank's piece; broadcast: the root's array to all; reduce: the sum on the root; "
             "all_to_all: rank r's piece j goes to rank j")
ALGO_HELP = ("ring: neighbours pass chunks round a ring; tree: up and down a binary tree; halving_doubling: "
             "partners at distance n/2, n/4, ... (Rabenseifner); direct: everyone sends to everyone at once")


def predict(question: str, answer: float, unit: str, explain: str, key: str, rel_tol: float = 0.1) -> None:
    """Predict, then reveal: the student types a number before seeing it; the page checks it against
    `answer` (the page's own result: a real run or its formula) within `rel_tol`, and explains."""
    with st.expander(f"Predict, then reveal: {question}", icon=":material/psychology:"):
        guess = st.number_input(f"Your prediction ({unit})", value=None, format="%.6g", key=f"guess_{key}")
        if st.button("Reveal", key=f"reveal_{key}", disabled=guess is None):
            right = abs(guess - answer) <= rel_tol * abs(answer) + 1e-12
            (st.success if right else st.warning)(
                f"{'Right' if right else 'Not quite'}: {answer:.4g} {unit} (you said {guess:.4g}; within "
                f"{rel_tol:.0%} counts). {explain}")
