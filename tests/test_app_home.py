"""The home page: what parasim is, the map of the pages, the lecture path, and the live bubble figure;
old links to "/" (the Collectives page was the landing page) open the Collectives page."""

from app_helpers import APP, metrics, page
from streamlit.testing.v1 import AppTest


def test_home_maps_every_page_and_the_lessons_path():
    from nav import PAGES

    from simulator import list_lessons

    at = page("home")
    assert at.title[0].value == "parasim"
    captions = [c.value for c in at.caption]
    for title, (*_rest, concept) in PAGES.items():  # every page with its concept
        assert concept in captions, title
    table = next(md.value for md in at.markdown if md.value.startswith("| # | lesson |"))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert [int(r[0]) for r in rows] == [info.number for info in list_lessons()]
    assert rows[4][2] == "Pipeline schedules → Training playground"  # lesson 05
    assert not at.dataframe  # a dataframe would import pandas and pyarrow on the first page


def test_home_bubble_follows_the_sliders_without_a_button():
    at = page("home")
    assert not at.button  # live: no Run button
    m = metrics(at)
    assert m["bubble (simulated)"] == m["(p-1)/(m+p-1)"] == "42.9%"  # 1F1B, p=4, m=4: 3/7
    at.slider(key="home_m").set_value(12).run()
    m = metrics(at)
    assert m["bubble (simulated)"] == m["(p-1)/(m+p-1)"] == "20.0%"  # 3/15
    at.slider(key="home_p").set_value(8).run()
    assert metrics(at)["bubble (simulated)"] == "36.8%"  # 7/19
    assert len(at.get("vega_lite_chart")) == 1


def test_the_router_opens_home_at_the_root_and_old_root_links_at_collectives():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()
    assert not at.exception and at.title[0].value == "parasim"
    old = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    old.query_params.update({"kind": "reduce_scatter", "n": "8"})
    old.run()
    assert not old.exception and old.title[0].value == "Collectives"
    assert old.selectbox(key="kind").value == "reduce_scatter" and old.slider(key="n").value == 8


def test_the_home_page_imports_no_plotting_or_dataframe_library_and_no_ray():
    """A cold server's first page waits for every module it imports: the home page's live figure is a
    Vega-Lite spec and its lecture path a Markdown table, so matplotlib, pandas, pyarrow, altair and
    ray stay unimported (simulator.viz loads its modules on first use, app/charts.py imports altair
    and pandas inside the functions that need them). The page itself is run, in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, 'tests'); from app_helpers import page\n"
            "at = page('home'); assert at.get('vega_lite_chart')\n"
            "print(sorted(m for m in ('matplotlib', 'pandas', 'altair', 'ray', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=APP.parent, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
