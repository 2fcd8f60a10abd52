"""The app as a first visit and a lecture meet it, in a real headless Chromium: a cold server's home
page, Ray started only by the pages that run on devices, links that hold every input and name what
they could not use. One server for the module (its first test sees it cold)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from app_helpers import APP  # noqa: F401  (puts app/ on the path: charts)
from browser_helpers import free_port, launch, missing_browser, start_server, stop_server, wait_until_idle

MISSING = missing_browser()  # tests/test_browser.py fails the run on it when CI requires the browser
pytestmark = [pytest.mark.browser, pytest.mark.skipif(MISSING is not None, reason=f"browser tests: {MISSING}")]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(process, url): started by the first test that asks, so that test meets a cold server."""
    proc, url, log = start_server(tmp_path_factory.mktemp("streamlit") / "server.log")
    yield proc, url
    stop_server(proc, log)


def descendants(pid: int) -> list[str]:
    """The command names of every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        child = int(stat.parent.name)
        names[child] = name
        children.setdefault(ppid, []).append(child)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(names[c])
            todo.append(c)
    return out


def first_paint(browser, url: str, ready: str) -> float:
    """Seconds from opening `url` to the element `ready` (a CSS selector) being visible."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    t0 = time.monotonic()
    page.goto(url, wait_until="commit")
    page.locator(ready).first.wait_for(state="visible", timeout=120_000)
    took = time.monotonic() - t0
    page.close()
    return took


def bare_streamlit_first_paint(browser, tmp_path: Path) -> float:
    """The same measure on a cold server of a one-line Streamlit page: what Streamlit itself costs here."""
    (tmp_path / "bare.py").write_text('import streamlit as st\nst.title("bare")\n')
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(tmp_path / "bare.py"),
                             "--server.headless", "true", "--server.port", str(port), "--server.address",
                             "127.0.0.1", "--browser.gatherUsageStats", "false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        return first_paint(browser, f"http://127.0.0.1:{port}/", "h1")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_cold_server_paints_the_home_at_once_and_pricing_pages_never_start_ray(served, browser, tmp_path):
    proc, url = served
    home = first_paint(browser, url + "/", '[data-testid="stMainBlockContainer"] a[href="scale"]')
    bare = bare_streamlit_first_paint(browser, tmp_path)
    # Issue 27 asks for 3 s: bench/bench_app_first_page.py measured the whole page at 2.71 s against
    # 1.58 s for Streamlit's own one-line page at load 2 (docs/app-performance.md); under the test
    # suite's load what holds is that the home never waits on Ray (a cold Ray start took 11 s), so
    # its map paints within 3 s of that bare page.
    assert home <= bare + 3.0, (home, bare)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    for path in ("/", "/collectives", "/pipelines", "/scale"):
        page.goto(url + path, wait_until="domcontentloaded")
        wait_until_idle(page, 200)
        assert page.locator('[data-testid="stException"]').count() == 0, path
    assert not {"raylet", "gcs_server"} & set(descendants(proc.pid))  # no page so far runs on devices
    page.goto(url + "/training", wait_until="domcontentloaded")
    wait_until_idle(page, 200)  # the page renders while Ray starts behind it
    assert page.get_by_text("Ray is starting in the background", exact=False).count() == 1
    deadline = time.monotonic() + 120
    while not {"raylet", "gcs_server"} & set(descendants(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {"raylet", "gcs_server"} & set(descendants(proc.pid))
    page.close()


def test_documented_paths_open_their_page_and_old_root_links_redirect(served, browser):
    _, url = served
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url + "/collectives?kind=all_gather&n=8", wait_until="domcontentloaded")
    wait_until_idle(page, 200)
    assert page.locator("h1").first.inner_text() == "Collectives"
    assert page.get_by_text("Page not found").count() == 0
    page.goto(url + "/?kind=reduce_scatter&n=8", wait_until="domcontentloaded")
    page.wait_for_url("**/collectives?**", timeout=60_000)
    wait_until_idle(page, 200)
    assert page.locator("h1").first.inner_text() == "Collectives" and "kind=reduce_scatter" in page.url
    assert page.get_by_role("slider", name="Ranks n").get_attribute("aria-valuetext") == "8"
    page.close()


# (path, the slider moved, the key pressed on it, the tab to open first): every page whose computations
# take under about a second
LIVE_PAGES = [("/", "Stages p", "ArrowRight", None), ("/collectives", "Ranks n", "ArrowRight", None),
              ("/player", "Ranks n", "ArrowRight", None),
              ("/sharding", "Mesh axis dp", "ArrowLeft", "One tensor on a mesh"),
              ("/pipelines", "Stages p", "ArrowRight", None), ("/context", "Devices c", "ArrowLeft", None),
              ("/scale", "Tensor parallel t", "ArrowLeft", None)]
FIGURE = ('[data-testid="stMainBlockContainer"] [data-testid="stImage"] img, '
          '[data-testid="stMainBlockContainer"] [data-testid="stVegaLiteChart"]')


@pytest.mark.parametrize("path,slider,key,tab", LIVE_PAGES, ids=[p for p, *_ in LIVE_PAGES])
def test_a_live_page_redraws_its_figure_as_a_slider_moves_without_a_click(served, browser, path, slider, key, tab):
    _, url = served
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url + path, wait_until="domcontentloaded")
    wait_until_idle(page)
    if tab:
        page.get_by_role("tab", name=tab).click()
    control = page.get_by_role("slider", name=slider).first
    figure = page.locator(FIGURE).filter(visible=True).first
    figure.scroll_into_view_if_needed()
    before, value = figure.screenshot(), control.get_attribute("aria-valuetext")
    control.focus()
    control.press(key)
    assert control.get_attribute("aria-valuetext") != value
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        page.wait_for_timeout(1000)
        after = page.locator(FIGURE).filter(visible=True).first
        if after.count() and after.screenshot() != before:
            break
    else:
        pytest.fail(f"{path}: the figure did not change within 90 s of moving {slider}")
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


PRESENT_JS = """() => {
  const px = e => parseFloat(getComputedStyle(e).fontSize);
  const shown = e => e.getClientRects().length > 0;
  const cut = e => e.scrollWidth > e.clientWidth + 1;
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const buttons = [...main.querySelectorAll('button')].filter(b => shown(b) && /^(Play|Pause|Step)$/.test(
      b.innerText.replace(/^[a-z_]+\\s*/, '').trim()));
  return {root: px(document.documentElement),
          binds: [...main.querySelectorAll('.vega-bind-name, .vega-bindings select')].filter(shown).map(px),
          axes: [...main.querySelectorAll('[data-testid="stVegaLiteChart"] svg .role-axis-label text')].map(px),
          buttons: buttons.map(b => ({text: b.innerText.replace(/^[a-z_]+\\s*/, '').trim(), px: px(b),
                                      cut: cut(b) || [...b.querySelectorAll('*')].some(cut)}))}; }"""


@pytest.mark.parametrize("path", ["/pipelines?present=true&p=8&m=16", "/player?present=true&n=8"])
def test_presentation_mode_scales_the_vega_controls_the_axes_and_the_play_button_at_1024px(served, browser, path):
    from charts import PRESENT_FONT

    _, url = served
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(url + path, wait_until="domcontentloaded")
    wait_until_idle(page)
    if "pipelines" in path:  # its player is folded under the comparison
        page.get_by_text("Play the schedule, operation by operation").click()
        page.get_by_role("button", name="Play").wait_for(timeout=60_000)
    got = page.evaluate(PRESENT_JS)
    page.close()
    assert got["root"] == 20  # presentation mode: 1 rem = 20 px (app/main.py's PRESENT)
    assert got["axes"] and min(got["axes"]) >= PRESENT_FONT, got["axes"]  # Vega-Lite: charts.spec_style
    assert {b["text"] for b in got["buttons"]} >= {"Play", "Step"}, got["buttons"]
    assert all(b["px"] >= 20 and not b["cut"] for b in got["buttons"]), got["buttons"]  # never "P..."
    if "pipelines" in path:  # the timeline's "highlight micro-batch" menu (a Vega binding)
        assert got["binds"] and min(got["binds"]) >= 17, got["binds"]


def test_five_sessions_pressing_run_at_once_share_one_run_and_see_the_same_numbers(served, browser):
    """Five students press Run training on the same settings at the same time: the server makes
    the run once (app/shared_runs.py) and every page shows its numbers; bench/bench_app_sessions.py
    times it."""
    from urllib.parse import urlencode

    _, url = served
    params = {"strategy": "pp", "run_mode": "run in-process", "steps": "2", "batch": "32"}  # no other test's run
    pages = [browser.new_context(viewport={"width": 1280, "height": 900}).new_page() for _ in range(5)]
    for page in pages:
        page.goto(f"{url}/training?{urlencode(params)}", wait_until="domcontentloaded")
        wait_until_idle(page, 300)
    for page in pages:
        page.get_by_role("button", name="Run training").click()
    seen = []
    for page in pages:
        page.get_by_text("from the click to these results", exact=False).first.wait_for(timeout=120_000)
        wait_until_idle(page, 300)
        assert not page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count()
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="time per step").first.inner_text()
        caption = page.get_by_text("from the click to these results", exact=False).first.inner_text()
        seen.append((metric, "made once on this server for every session asking for these settings" in caption))
        page.context.close()
    assert len({m for m, _ in seen}) == 1, seen  # the same run's numbers on every page
    assert sorted(s for _, s in seen) == [False, True, True, True, True], seen  # made by one session, shared by four


@pytest.mark.parametrize("path,name", [("/collectives?n=16", "all_reduce-ring-16ranks.png"),
                                       ("/context?ctx_c=8", "ring-32tokens-8devices.png")])
def test_a_page_drawn_in_the_browser_still_downloads_its_matplotlib_png(served, browser, path, name):
    """The Collectives and Context pages draw their grids as Vega-Lite; the PNG is made when its
    button is pressed (ui.png_download)."""
    _, url = served
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(url + path, wait_until="domcontentloaded")
    wait_until_idle(page)
    with page.expect_download(timeout=60_000) as got:
        page.get_by_role("button", name="Figure (PNG)").first.click()
    data = Path(got.value.path()).read_bytes()
    context.close()
    assert got.value.suggested_filename == name and data.startswith(b"\x89PNG") and len(data) > 10_000
