"""End to end in a real headless Chromium: start `streamlit run app/main.py`, open a page, change a
control, and check the chart and the numbers follow. Uses the system Chromium (never a download).

Without Chromium (Debian's `chromium` package) or playwright these tests are skipped, and the run's
summary names them with the reason (pytest -rs). CI sets PARASIM_REQUIRE_BROWSER=1: there a
missing browser fails the run instead (.ci/run)."""

import os
import sys
from pathlib import Path

import pytest
from browser_helpers import ARGS, CHROMIUM, ROOT, missing_browser, start_server, stop_server

MISSING = missing_browser()
if MISSING and os.environ.get("PARASIM_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"PARASIM_REQUIRE_BROWSER=1 but the browser tests cannot run: {MISSING}")
pytestmark = [pytest.mark.browser, pytest.mark.skipif(MISSING is not None, reason=f"browser tests: {MISSING}")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url, log = start_server(tmp_path_factory.mktemp("streamlit") / "server.log")
    yield url
    stop_server(proc, log)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def metric_values(page, label: str) -> list[str]:
    cards = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return [cards.nth(i).locator('[data-testid="stMetricValue"]').inner_text() for i in range(cards.count())]


def charts(page):
    return page.locator('[data-testid="stImage"] img')


def wait_for_metric_value(page, value: str) -> None:
    page.wait_for_function(
        """v => [...document.querySelectorAll('[data-testid="stMetricValue"]')].some(e => e.innerText.trim() === v)""",
        arg=value, timeout=60_000)


def keep(tmp_path: Path) -> None:
    """Copy the screenshots to $PARASIM_SCREENSHOT_DIR when set (to look at them)."""
    dest = os.environ.get("PARASIM_SCREENSHOT_DIR")
    if dest:
        for f in tmp_path.glob("*.png"):
            (Path(dest) / f.name).write_bytes(f.read_bytes())


def test_pipeline_page_reacts_to_the_stage_slider(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/pipelines", wait_until="domcontentloaded")
    page.locator('[data-testid="stMetric"]').first.wait_for(timeout=60_000)
    vega = page.locator('[data-testid="stVegaLiteChart"]')
    vega.nth(1).wait_for(state="visible", timeout=60_000)  # the timeline and the comparison of the schedules
    before = metric_values(page, "bubble")
    assert before[0] == "27.3%"  # GPipe p=4, m=8: (p-1)/(m+p-1) = 3/11
    page.screenshot(path=str(tmp_path / "pipelines-before.png"), full_page=True)

    slider = page.get_by_role("slider", name="Stages p")
    slider.focus()
    slider.press("ArrowRight")  # p: 4 -> 5
    wait_for_metric_value(page, "33.3%")  # p=5, m=8: 4/12
    after = metric_values(page, "bubble")
    assert after[0] == "33.3%" and after != before
    vega.nth(1).wait_for(state="visible", timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    shot = tmp_path / "pipelines-after.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    keep(tmp_path)
    page.close()


def test_training_playground_runs_and_draws_the_timeline(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/training", wait_until="domcontentloaded")
    page.get_by_text("press Run training", exact=False).first.wait_for(timeout=60_000)
    slider = page.get_by_role("slider", name="Micro-batches")
    slider.focus()
    for _ in range(4):  # 4 -> 8 micro-batches
        slider.press("ArrowRight")
    page.get_by_role("slider", name="Micro-batches").and_(page.locator('[aria-valuetext="8"]')).wait_for(
        state="attached", timeout=30_000)
    page.get_by_role("button", name="Run training").click()
    page.locator('[data-testid="stMetric"]').filter(has_text="bubble").wait_for(timeout=120_000)
    charts(page).nth(1).wait_for(state="visible", timeout=60_000)  # timeline and bubble figure
    bubble = metric_values(page, "bubble")[0]
    assert bubble.endswith("%") and 0.0 < float(bubble[:-1]) < 100.0  # 4 stages always leave a bubble
    assert float(metric_values(page, "vs one device")[0]) < 1e-9  # same math as one device
    assert charts(page).count() >= 2
    assert page.get_by_role("button", name="Chrome trace (JSON)").count() == 1
    assert page.locator('[data-testid="stProgress"]').count() == 1  # the run's progress bar, completed
    assert page.get_by_text("checked against one device", exact=True).count() == 1
    assert page.locator('[data-testid="stException"]').count() == 0
    shot = tmp_path / "training.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    keep(tmp_path)
    page.close()


def test_collective_player_plays_to_the_last_step_and_equals_numpy(server, browser):
    import numpy as np

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/player?n=8&algo=halving_doubling", wait_until="domcontentloaded")
    page.get_by_role("button", name="Play").wait_for(timeout=60_000)
    assert page.get_by_role("slider", name="Ranks n").get_attribute("aria-valuetext") == "8"
    page.get_by_role("button", name="Play").click()  # halving-doubling on 8 ranks: 2 log2(8) = 6 steps
    page.get_by_text("every rank's buffer equals numpy's all_reduce", exact=False).wait_for(timeout=60_000)
    assert page.get_by_role("slider", name="Step").get_attribute("aria-valuetext") == "6"
    assert "step=6" in page.url  # the URL follows the slider the player moved
    want = sum(100.0 * r + np.arange(16) for r in range(8))
    cells = page.locator('[data-testid="stTable"] tbody tr')
    cells.nth(7).wait_for(timeout=30_000)  # the table follows the success line
    assert cells.count() == 8
    for i in range(8):
        row = [c.inner_text().strip() for c in cells.nth(i).locator("td").all()]
        assert row[0] == " ".join(f"{v:g}" for v in want[:8]) + " … (16 numbers)" == row[1]
        assert row[2:] == ["0", "yes"]
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def wait_until_idle(page) -> None:
    """The script has run (Streamlit marks stApp notRunning) and the charts had time to draw."""
    page.wait_for_function(
        """() => { const a = document.querySelector('[data-testid="stApp"]');
                   return a && a.getAttribute('data-test-script-state') === 'notRunning'
                          && document.querySelector('[data-testid="stMainBlockContainer"] h1'); }""", timeout=120_000)
    page.wait_for_timeout(1500)


# Elements of the main area that stick out of their parent's box or cut their text with an ellipsis,
# outside scrollable regions (tables, code blocks scroll by design) and Streamlit's floating toolbars.
OVERFLOW_JS = """() => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const out = [];
  for (const el of main.querySelectorAll('*')) {
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden' || cs.position === 'fixed' || cs.position === 'absolute'
        || el.tagName === 'INPUT') continue;
    const r = el.getBoundingClientRect();
    if (r.width < 4 || r.height < 4) continue;
    let a = el.parentElement, scrolls = false;
    while (a && a !== main.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') { scrolls = true; break; }
      a = a.parentElement;
    }
    if (scrolls) continue;
    const pr = el.parentElement.getBoundingClientRect();
    if (pr.width < 2) continue;
    const spill = cs.display !== 'inline' && (r.right > pr.right + 3 || r.left < pr.left - 3);
    const cut = cs.textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1;
    if (spill || cut) out.push(`${el.tagName} ${el.getAttribute('data-testid') || ''} ${spill ? 'sticks out' : 'cut'}: `
                               + `${(el.innerText || '').slice(0, 40)}`);
  }
  return out;
}"""


# Words that the browser broke across two lines (a label wrapped inside a word: "Ov/erl/ap", "batche/s"),
# in the main area and the sidebar: each run of letters and digits is measured as a Range; its boxes on
# more than one line mean a break inside it. Code blocks scroll instead of wrapping and are left out.
BROKEN_WORDS_JS = """() => {
  const out = [];
  for (const root of document.querySelectorAll('[data-testid="stMainBlockContainer"], [data-testid="stSidebar"]')) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const host = node.parentElement;
      if (!host || host.closest('pre, code, svg, canvas, [data-testid="stCode"]') || !host.getClientRects().length) continue;
      for (const m of node.textContent.matchAll(/[\\p{L}\\p{N}]{2,}/gu)) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const tops = [...r.getClientRects()].filter(b => b.width > 0).map(b => b.top);
        if (Math.max(...tops) - Math.min(...tops) > 4) out.push(`${m[0]} in "${node.textContent.trim().slice(0, 50)}"`);
      }
    }
  }
  return out;
}"""


def test_nothing_overflows_or_breaks_inside_a_word_at_1024x768_on_any_page(server, browser):
    sys.path.insert(0, str(ROOT / "app"))
    from ui import PAGE_PATHS

    page = browser.new_page(viewport={"width": 1024, "height": 768})
    # every page as it opens and in presentation mode (a projector: 1 rem = 20 px), two of them with their widest settings
    # (the Training playground in-process: by then Ray is up, and starting its actors under load takes minutes)
    visits = ([f"/{p}" for p in PAGE_PATHS.values()]
              + [f"/{p}?present=true" + ("&run_mode=run%20in-process" if p == "training" else "") for p in PAGE_PATHS.values()]
              + ["/pipelines?present=true&p=8&m=16", "/player?present=true&n=16&kind=all_to_all&step=15"])
    bad = {}
    for path in visits:
        page.goto(server + path, wait_until="domcontentloaded")
        wait_until_idle(page)
        if path.split("?")[0] in ("/training", "/faults"):  # the pages with a run button: check their results too
            page.locator('[data-testid="stMainBlockContainer"] button[kind="primary"]').first.click()
            page.locator('[data-testid="stMetric"]').first.wait_for(timeout=120_000)
            wait_until_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, path
        found = page.evaluate(OVERFLOW_JS) + [f"broken word: {w}" for w in page.evaluate(BROKEN_WORDS_JS)]
        if found:
            bad[path] = found[:5]
    page.close()
    assert not bad, bad


def test_a_link_opens_its_configuration_and_the_url_follows_the_widgets(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/pipelines?p=8&m=16&schedules=gpipe&schedules=1f1b", wait_until="domcontentloaded")
    wait_until_idle(page)
    assert page.get_by_role("slider", name="Stages p").get_attribute("aria-valuetext") == "8"
    assert metric_values(page, "bubble")[:2] == ["30.4%", "30.4%"]  # (p-1)/(m+p-1) = 7/23
    slider = page.get_by_role("slider", name="Micro-batches m")
    slider.focus()
    slider.press("ArrowRight")  # m: 16 -> 17
    page.wait_for_url("**m=17**", timeout=30_000)
    wait_for_metric_value(page, "29.2%")  # 7/24
    assert "p=8" in page.url and "schedules=gpipe" in page.url
    page.close()


def test_hovering_a_timeline_bar_shows_its_event(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/pipelines?schedules=1f1b", wait_until="domcontentloaded")
    wait_until_idle(page)
    chart = page.locator('[data-testid="stVegaLiteChart"]').first.locator("svg, canvas").first
    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    tip = page.locator("#vg-tooltip-element")
    text = ""
    for fy in (0.3, 0.4, 0.5, 0.6):  # sweep across the rows until the pointer is over an F or B bar
        for fx in (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6):
            page.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
            page.wait_for_timeout(150)
            if tip.count() and tip.is_visible() and "micro-batch" in tip.inner_text():
                text = tip.inner_text()
                break
        if text:
            break
    assert text, "no tooltip with an event appeared over the timeline"
    for field in ("device", "lane", "op", "micro-batch", "stage", "start", "duration"):
        assert field in text
    page.close()


def test_the_sharding_page_opens_from_a_link_and_writes_its_widgets_back(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/sharding?net=2-layer+MLP&enable_alltoall=true&s_act=", wait_until="domcontentloaded")
    wait_until_idle(page)
    assert page.get_by_role("radio", name="2-layer MLP").is_checked()
    assert page.get_by_role("checkbox", name="enable_alltoall").is_checked()
    page.get_by_text("AllToAll", exact=True).first.wait_for(timeout=60_000)  # the unset ReLU's moved cut: one AllToAll
    page.locator('[data-testid="stCheckbox"]').filter(has_text="gradients_mean").get_by_text("gradients_mean").click()
    page.wait_for_url("**gradients_mean=true**", timeout=30_000)
    box = page.get_by_label("device_num")
    box.fill("16")
    box.press("Enter")
    page.wait_for_url("**device_num=16**", timeout=30_000)
    assert "enable_alltoall=true" in page.url and "net=2-layer" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
