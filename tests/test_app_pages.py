"""Every app page renders without exceptions, shows its key widgets, and follows its controls."""

import sys
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[1] / "app"
sys.path.insert(0, str(APP))  # the pages import app/ui.py as `ui`


def page(name: str) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / f"{name}.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def test_router_lists_every_page():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()
    assert not at.exception
    assert at.title[0].value == "Collectives"  # the default page
    for name, title in [("pipelines", "Pipeline schedules"), ("training", "Training playground"),
                        ("scale", "Scale explorer"), ("sharding", "Sharding & auto-parallel")]:
        at.switch_page(str(APP / "views" / f"{name}.py")).run()
        assert not at.exception and at.title[0].value == title


def test_collectives_steps_follow_the_rank_count():
    at = page("collectives")
    assert {"kind", "algo", "n", "size", "hw"} <= {w.key for kind in ("selectbox", "slider", "select_slider")
                                                    for w in at.sidebar.get(kind)}
    assert metrics(at)["steps"] == "6"  # ring all-reduce on 4 ranks: 2(n-1)
    assert len(at.get("image")) == 3  # the steps picture and the two sweeps render (st.pyplot)
    at.slider(key="n").set_value(8).run()
    assert metrics(at)["steps"] == "14"
    at.button(key="run").click().run()
    assert "max difference from the numpy reference" in at.success[0].value


def test_collectives_show_the_code_toggle_prints_sources():
    at = page("collectives")
    assert len(at.code) == 0
    at.toggle(key="code").set_value(True).run()
    assert any("def make_plan" in c.value for c in at.code)


def test_sharding_layout_and_uneven_cut():
    at = page("sharding")
    assert metrics(at)["textbook"] == "X[I_dp, J_tp]"
    at.selectbox(key="dim1").set_value("not split").run()
    assert metrics(at)["textbook"] == "X[I_dp, J]"
    assert metrics(at)["copies of each block"] == "4"  # replicated over tp=4
    at.number_input(key="rows").set_value(3).run()
    assert "cannot be split 2 ways" in at.error[0].value


def test_sharding_mindspore_strategy_text_is_parsed_safely():
    at = page("sharding")
    at.radio(key="mode").set_value("MindSpore strategy").run()
    assert metrics(at)["MindSpore strategy"] == "(2, 4)"
    at.text_input(key="strategy").input("__import__('os')").run()
    assert "write integers" in at.error[0].value


def test_faults_page_says_what_it_waits_for_or_renders():
    import importlib.util
    at = page("faults")
    assert at.title[0].value == "Fault tolerance"
    if importlib.util.find_spec("simulator.faults") is None:
        assert "Coming soon" in at.info[0].value and "simulator.faults" in at.info[0].value


def test_lessons_page_lists_the_lesson_folders():
    at = page("lessons")
    folders = sorted(p.name for p in (APP.parent / "lessons").glob("[0-9]*_*") if p.is_dir())
    if not folders:
        assert "Coming soon" in at.info[0].value
        return
    assert at.selectbox(key="lesson").options == folders
    at.selectbox(key="lesson").set_value(folders[-1]).run()
    assert not at.exception and at.markdown
