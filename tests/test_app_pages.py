"""Every app page renders without exceptions, shows its key widgets, and follows its controls."""

import json

from app_helpers import APP, metrics, page
from streamlit.testing.v1 import AppTest


def test_router_lists_every_page():
    from ui import PAGE_FILES

    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()
    assert not at.exception
    assert at.title[0].value == "parasim"  # the home page
    assert {"Collective player", "Context parallelism"} <= set(PAGE_FILES)
    for title, file in PAGE_FILES.items():  # every page the lessons link to is reachable through the router
        at.switch_page(str(APP / file)).run()
        assert not at.exception and at.title[0].value == title


def test_collectives_steps_follow_the_rank_count():
    at = page("collectives")
    assert {"kind", "algo", "n", "size", "hw"} <= {w.key for kind in ("selectbox", "slider", "select_slider")
                                                    for w in at.sidebar.get(kind)}
    assert metrics(at)["steps"] == "6"  # ring all-reduce on 4 ranks: 2(n-1)
    steps = json.loads(at.get("vega_lite_chart")[0].proto.spec)  # the steps grid, drawn by the browser
    assert steps["title"]["text"].startswith("ring all_reduce on 4 ranks") and not at.get("image")
    assert len(steps["layer"][1]["data"]["values"]) == 24  # one sub-cell per transfer: 4 ranks x 6 steps
    assert at.get("download_button")[0].label == "Figure (PNG)"  # matplotlib's grid, made when pressed
    assert [b.key for b in at.button] == ["reveal_bytes"]  # live: the plan runs on numpy devices as the widgets move
    assert at.success[0].value.startswith("Run on numpy devices: 4 ranks executed the ring all_reduce plan")
    at.slider(key="n").set_value(16).run()
    assert metrics(at)["steps"] == "30"
    steps = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert len(steps["layer"][1]["data"]["values"]) == 16 * 30 and len(steps["layer"]) == 3  # 16 ranks: labels in the hover
    at.slider(key="n").set_value(8).run()
    assert metrics(at)["steps"] == "14"
    assert at.success[0].value.startswith("Run on numpy devices: 8 ranks executed the ring all_reduce plan")
    diff = float(at.success[0].value.rsplit(": ", 1)[1])
    assert diff < 1e-12  # float64 sums in another order: rounding only


def test_collectives_bytes_per_rank_name_the_chosen_collective_with_units_and_open_from_a_link():
    import json

    at = AppTest.from_file(str(APP / "views" / "collectives.py"), default_timeout=60)
    at.query_params.update({"kind": "reduce_scatter", "n": "8", "size": "64 kB"})
    at.run()
    assert not at.exception and at.selectbox(key="kind").value == "reduce_scatter" and at.slider(key="n").value == 8
    caption = next(c.value for c in at.caption if "per rank on average" in c.value)
    assert "(n-1)/n·S = 56 kB" in caption and "2(n-1)" not in caption  # reduce-scatter's formula: 7/8 of 64 kB
    assert "every rank sends 56 kB" in caption and "448 kB in all (the sum over ranks)" in caption
    titles = [json.loads(c.proto.spec).get("encoding", {}).get("y", {}).get("title") for c in at.get("vega_lite_chart")]
    assert "bytes sent (kB)" in titles  # the axis in kB beside the caption's kB (never 56,000)
    at.selectbox(key="kind").set_value("all_reduce").run()
    assert any("2(n-1)/n·S = 112 kB" in c.value for c in at.caption)
    assert any("/player?kind=all_reduce&algo=ring&n=8" in m.value for m in at.markdown)  # the player, same plan


def test_collectives_show_the_code_toggle_prints_sources():
    at = page("collectives")
    assert not [c for c in at.code if c.language == "python"]  # (the copy-link popover holds the page's URL)
    at.toggle(key="code").set_value(True).run()
    assert any("def make_plan" in c.value for c in at.code)


def tab_metrics(at, tab: int) -> dict:
    return {m.label: m.value for m in at.tabs[tab].metric}


def test_sharding_explains_a_mindspore_matmul():
    at = page("sharding")
    assert {"net", "device_num", "parallel_mode", "s1", "out1", "M", "K", "N"} <= {
        w.key for kind in ("radio", "number_input", "selectbox", "text_input") for w in at.get(kind)}
    m = tab_metrics(at, 0)
    assert m["device matrix"] == "[2, 4, 1]" and m["collectives inserted"] == "3"  # ((2,4),(4,1)) on 8 devices
    moves = at.tabs[0].table[0].value
    assert list(moves["collective"]) == ["AllReduce"] * 3
    assert list(moves["groups"])[0] == "{0,1,2,3} {4,5,6,7}"  # forward partial sums over k
    assert list(moves["groups"])[2] == "{0,4} {1,5} {2,6} {3,7}"  # the weight's mirror
    assert all(moves["reason"])
    layouts = at.tabs[0].dataframe[1].value
    assert list(layouts["MindSpore"]) == ["(2, 4)", "(4, 1)", "(2, 1)"]
    assert list(layouts["PartitionSpec"])[0] == "P('d0', 'd1')"
    at.text_input(key="out1").input("((8, 1),)").run()  # a*k rows: ReduceScatter instead of AllReduce
    assert list(at.tabs[0].table[0].value["collective"])[0] == "ReduceScatter"
    at.text_input(key="out1").input("").run()
    at.text_input(key="s1").input("((2, 1), (1, 4))").run()
    moves = at.tabs[0].table[0].value  # no contracting cut: nothing in the forward pass
    assert list(moves["phase"]) == ["backward", "parameter gradient"]  # dx partial over the c cut; w's mirror
    assert list(moves["groups"]) == ["{0,1,2,3} {4,5,6,7}", "{0,4} {1,5} {2,6} {3,7}"]


def test_sharding_invalid_strategies_are_one_line_errors():
    at = page("sharding")
    for bad, words in [("((2, 8), (8, 1))", "16 devices"), ("((2, 4), (2, 1))", "must be cut alike"),
                       ("__import__('os')", "tuple of integer tuples"), ("((3, 1), (1, 1))", "cannot cut 3 ways")]:
        at.text_input(key="s1").input(bad).run()
        assert not at.exception
        assert len(at.error) == 1 and words in at.error[0].value and "\n" not in at.error[0].value
        assert at.error[0].value[0].isupper() and at.error[0].value.endswith(".")  # a sentence (ui.sentence)
    assert tab_metrics(at, 1)["textbook"] == "X[I_dp, J_tp]"  # the other tab still renders


def test_sharding_two_layer_network_and_propagation():
    at = page("sharding")
    at.radio(key="net").set_value("2-layer MLP").run()
    ops = at.tabs[0].dataframe[0].value
    assert list(ops["device matrix"]) == ["[2, 1, 4]", "[2, 4]", "[2, 4, 1]"]  # Megatron column then row
    phases = list(at.tabs[0].table[0].value["phase"])
    assert phases.count("forward") == 1 and phases.count("parameter gradient") == 2
    at.text_input(key="s_act").input("").run()  # unset ReLU in semi-auto: data parallel, a moved cut
    moved = list(at.tabs[0].table[0].value["collective"])
    assert "AllToAll" not in moved and "AllGather" in moved  # MindSpore's default: AllGather + Split
    at.checkbox(key="enable_alltoall").check().run()
    assert "AllToAll" in list(at.tabs[0].table[0].value["collective"])  # enable_alltoall: one AllToAll
    at.selectbox(key="parallel_mode").set_value("auto_parallel").run()  # propagation picks ((2, 4),)
    assert "AllToAll" not in list(at.tabs[0].table[0].value["collective"])
    assert list(at.tabs[0].dataframe[0].value["set by"])[1] == "propagation"


def test_sharding_layout_and_uneven_cut():
    at = page("sharding")
    assert tab_metrics(at, 1)["textbook"] == "X[I_dp, J_tp]"
    at.selectbox(key="dim1").set_value("not split").run()
    assert tab_metrics(at, 1)["textbook"] == "X[I_dp, J]"
    assert tab_metrics(at, 1)["copies of each block"] == "4"  # replicated over tp=4
    at.number_input(key="rows").set_value(3).run()
    assert "cannot be split 2 ways" in at.error[0].value


def test_sharding_mindspore_strategy_text_is_parsed_safely():
    at = page("sharding")
    at.radio(key="layout_by").set_value("MindSpore strategy").run()
    assert tab_metrics(at, 1)["MindSpore strategy"] == "(2, 4)"
    at.text_input(key="t_strategy").input("__import__('os')").run()
    assert "write integers" in at.error[0].value


def test_lessons_page_lists_lessons_and_links_their_pages():
    from simulator.grading import list_lessons

    at = page("lessons")
    lessons = list_lessons()
    assert at.selectbox(key="lesson").options == [f"{x.number:02d} · {x.title}" for x in lessons]
    table = at.dataframe[0].value
    assert list(table["#"]) == [x.number for x in lessons]
    assert "Sharding & auto-parallel" in table["app pages"][0]
    at.selectbox(key="lesson").set_value(2).run()
    assert not at.exception and at.subheader[0].value.startswith("02")
    assert any("Collectives" in m.value for m in at.markdown)  # the page it links to (plain outside the router)
    at.button(key="check").click().run()
    assert "items pass" in at.success[0].value


def test_lessons_readme_folds_the_quiz_answers_and_shows_table_figures():
    at = page("lessons")  # lesson 01: two figures in a table row, answers in <details>
    assert not any("<details>" in m.value or "</details>" in m.value for m in at.markdown)
    assert [e.label for e in at.expander] == ["Answers"]
    assert any("5 and 7" in m.value for m in at.expander[0].markdown)  # the answers live inside the fold
    assert not any("![" in m.value for m in at.markdown)  # every figure is an image, none left as markdown
    captions = [img.proto.imgs[0].caption for img in at.get("image")]
    assert {"X split two ways", "W split along tp"} <= set(captions)


def test_lessons_link_through_the_router():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()
    at.switch_page(str(APP / "views" / "lessons.py")).run()
    assert not at.exception
    links = at.get("page_link")
    assert links and links[0].proto.page == "sharding" and links[0].proto.label == "Sharding & auto-parallel"


def test_lessons_page_grades_an_upload_in_a_sandbox_and_reveals_a_prediction():
    from simulator.grading import get_lesson, solution_path

    at = page("lessons")  # lesson 01
    solution = solution_path(get_lesson(1)).read_text(encoding="utf-8")
    wrong = solution.replace("rank = rank * size + c", "rank = rank + c * size").replace('return "b"', 'return "d"')
    at.file_uploader(key="upload-1").upload("exercise.py", wrong.encode(), "text/x-python").run()
    at.button(key="check-mine").click().run()
    assert not at.exception and "7 of 9 items pass" in at.error[0].value
    table = at.dataframe[-1].value
    assert list(table["result"])[:2] == ["wrong", "passed"] and table["hint"][0] and table["expected"][0]
    # the new items: a wrong letter gets the hint of that choice; the prediction and the own layout pass
    assert list(table["result"])[6:] == ["passed", "wrong", "passed"], list(table["result"])
    assert "appended after them" in table["hint"][7] and "your own layout" in table["item"][8]
    notebook = json.dumps({"cells": [{"cell_type": "code", "source": solution.splitlines(keepends=True)}]})
    at.file_uploader(key="upload-1").upload("mine.ipynb", notebook.encode()).run()
    at.button(key="check-mine").click().run()
    assert "9 of 9 items pass" in at.success[0].value
    at.selectbox(key="lesson").set_value(5).run()
    at.number_input(key="guess-5").set_value(0.25).run()
    at.button(key="reveal").click().run()
    assert "Not quite" in at.warning[0].value and "0.272727" in at.warning[0].value
    at.number_input(key="guess-5").set_value(0.27).run()
    at.button(key="reveal").click().run()
    assert "Right" in at.success[0].value


def test_lessons_page_shows_the_graders_verdicts_on_the_new_items():
    """Lesson 05's items of the student's own construction (1F1B with a hidden extra_warmup, checked
    action by action), hidden pipelines and the plot of their own run: the page shows the verdicts
    and feedback `grade_source` (the CLI's grading) gives for the same file."""
    from simulator.grading import get_lesson, grade_source, solution_path

    lesson = get_lesson(5)
    text = solution_path(lesson).read_text(encoding="utf-8").replace(   # ignores extra_warmup
        "warm = min(p - d - 1 + extra_warmup, m)", "warm = min(p - d - 1, m)")
    at = AppTest.from_file(str(APP / "views" / "lessons.py"), default_timeout=120)
    at.query_params["lesson"] = f"05 · {lesson.title}"
    at.run()
    at.file_uploader(key="upload-5").upload("exercise.py", text.encode(), "text/x-python").run()
    at.button(key="check-mine").click().run()
    assert not at.exception
    table = at.dataframe[-1].value
    cli = grade_source(lesson, text).to_dict()["items"]
    assert list(table["result"]) == [i["status"] for i in cli] and list(table["item"]) == [i["name"] for i in cli]
    assert list(table["result"])[3] == "wrong" and "extra_warmup=" in table["hint"][3]
    assert "forwards before the first BW" in table["hint"][3] and "forwards before the first BW" in cli[3]["hint"]
    assert list(table["result"])[7] == "passed" and "the chart of your 1F1B text" in table["item"][7]
    # items 4 and the hidden 10 (4 of its 7 cases: the 3 with extra warm-up fail) -> 8 + 2 x 4/7 points
    assert "8 of 10 items pass, 10.1429 of 12 points" in at.error[0].value


def test_context_page_shows_the_ring_and_a_real_run_equal_to_one_device():
    at = page("context")  # c = 4, s = 32, ring
    m = metrics(at)
    assert float(m["vs one device"]) < 1e-9
    assert m["attention bytes sent"] == m["formula"]
    assert at.metric[1].proto.delta.startswith("4.00x")  # activations shrink as 1/c
    pairs = at.dataframe[0].value
    assert pairs.sum(axis=1).nunique() == 1  # the load-balanced split: equal work per device
    ring = json.loads(at.get("vega_lite_chart")[0].proto.spec)  # the chunks and ring steps, drawn by the browser
    assert ring["title"]["text"] == "32 tokens in 8 chunks: device i holds chunks i and 7-i" and not at.get("image")
    assert at.get("download_button")[0].label == "Figure (PNG)"  # matplotlib's picture, made when pressed
    at.radio(key="attention").set_value("all-to-all").run()
    assert not at.exception and float(metrics(at)["vs one device"]) < 1e-9
    at.select_slider(key="ctx_c").set_value(8).run()  # 8 heads split 8 ways: still fine
    assert not at.exception


def test_a_widget_key_means_one_thing_on_every_page():
    """URL-bound widgets keep their value across page switches by key (Streamlit's bind="query-params"),
    so a key two pages share must be the same widget with the same options (e.g. `kind` on the
    Collectives page and the player); otherwise the other page's value lands in the wrong widget."""
    from ui import PAGE_FILES

    seen: dict[str, dict] = {}
    for file in PAGE_FILES.values():
        at = AppTest.from_file(str(APP / file), default_timeout=120).run()
        for kind in ("selectbox", "slider", "select_slider", "radio", "multiselect", "number_input", "text_input",
                     "toggle", "checkbox"):
            for w in at.get(kind):
                if w.key and not w.key.startswith("$$") and w.key not in ("code", "run"):
                    desc = (kind, tuple(getattr(w, "options", None) or ()), getattr(w, "min", None), getattr(w, "max", None))
                    seen.setdefault(w.key, {}).setdefault(desc, set()).add(file)
    clashes = {k: [sorted(f) for f in d.values()] for k, d in seen.items() if len(d) > 1}
    assert not clashes, clashes


def test_settings_are_kept_across_pages_and_a_page_switch_breaks_nothing():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()  # the home page
    at.switch_page(str(APP / "views" / "collectives.py")).run()
    at.selectbox(key="kind").set_value("reduce_scatter").run()
    at.slider(key="n").set_value(8).run()
    for name in ("faults", "player", "context", "pipelines", "training"):
        at.switch_page(str(APP / "views" / f"{name}.py")).run()
        assert not at.exception, name
    assert at.selectbox(key="strategy").value == "pp"  # the training page's own default, not a value from elsewhere
    at.switch_page(str(APP / "views" / "collectives.py")).run()
    assert at.selectbox(key="kind").value == "reduce_scatter" and at.slider(key="n").value == 8


def test_every_lesson_link_to_the_app_opens_that_configuration():
    """The READMEs link to configurations (http://localhost:8501/pipelines?p=4&m=32...): each opens its
    page with every parameter applied to the widget of that key, and the Lessons page offers it."""
    from ui import PAGE_FILES, deep_links

    from simulator.grading import list_lessons

    links = [(x.number, *link) for x in list_lessons() for link in deep_links((x.folder / "README.md").read_text())]
    assert {n for n, *_ in links} >= {2, 3, 5, 10, 12, 13}
    for number, label, title, params in links:
        at = AppTest.from_file(str(APP / PAGE_FILES[title]), default_timeout=120)
        at.query_params.update(params)
        at.run()
        assert not at.exception, (number, label)
        widgets = {w.key: w for kind in ("selectbox", "slider", "select_slider", "radio", "multiselect", "toggle",
                                         "checkbox", "text_input", "number_input") for w in at.get(kind) if w.key}
        for key, value in params.items():
            got = widgets[key].value  # an unknown key would be a link that configures nothing
            want = value if isinstance(value, list) else [value]
            got = got if isinstance(got, list) else [got]
            assert [str(g).lower() for g in got] == [str(w).lower() for w in want], (number, key)
    at = page("lessons")
    at.selectbox(key="lesson").set_value(5).run()
    assert any("/pipelines?p=4&m=32" in m.value for m in at.markdown)  # the README's link, offered as a link


def test_sharding_gpt_with_megatron_strategies_and_the_parallel_optimizer():
    at = page("sharding")
    at.radio(key="net").set_value("GPT").run()
    assert not at.exception and not at.error
    moves = at.tabs[0].table[0].value
    fwd = moves[moves["phase"] == "forward"]
    assert list(fwd["operator"])[:3] == ["Gather-0", "BatchMatMul-5", "BatchMatMul-7"]  # vocab, Wo, Wproj
    assert set(fwd["collective"]) == {"AllReduce"} and list(fwd["groups"])[0] == "{0,1,2,3} {4,5,6,7}"
    at.checkbox(key="gpt_sp").check().run()  # sequence parallel: AllGather / ReduceScatter pairs
    assert {"AllGather", "ReduceScatter"} <= set(at.tabs[0].table[0].value["collective"])
    at.checkbox(key="enable_parallel_optimizer").check().run()  # weights split over dp: gathered forward, reduce-scattered
    moves = at.tabs[0].table[0].value
    grads = moves[moves["phase"] == "parameter gradient"]
    assert "ReduceScatter" in set(grads["collective"]) and "{0,4}" in list(grads["groups"])[0]


def test_a_link_opens_a_lesson():
    from simulator.grading import get_lesson

    title = f"05 · {get_lesson(5).title}"
    at = AppTest.from_file(str(APP / "views" / "lessons.py"), default_timeout=60)
    at.query_params["lesson"] = title  # the option as shown (app/README.md)
    at.run()
    assert not at.exception and at.selectbox(key="lesson").value == 5 and at.subheader[0].value == title
    assert at.selectbox(key="lesson").proto.query_param_key == "lesson"  # the browser writes it back


def test_every_metric_on_every_page_explains_its_term():
    """The glossary tooltip: every metric has a help text (the ⓘ beside its label)."""
    from ui import PAGE_FILES

    for file in PAGE_FILES.values():
        at = AppTest.from_file(str(APP / file), default_timeout=120).run()
        if any(b.key == "run" for b in at.button) and "collectives" not in file:
            at.button(key="run").click().run()  # the pages whose metrics follow a run
        assert not at.exception, file
        assert not [m.label for m in at.metric if not m.help], file
