"""App page tests (pipelines): renders without exceptions, key widgets, controls change results."""

import json

from app_helpers import page

from simulator import SCHEDULES


def test_pipelines_bubble_follows_p_and_invalid_interleaving_is_one_line():
    at = page("pipelines")
    bubbles = [m.value for m in at.metric if m.label == "bubble"]
    assert bubbles[0] == "27.3%"  # GPipe p=4, m=8: 3/11
    at.slider(key="p").set_value(5).run()
    assert [m.value for m in at.metric if m.label == "bubble"][0] == "33.3%"  # 4/12
    at.slider(key="m").set_value(11).run()  # interleaved issues max(1, 11 // 5) = 2 equal rounds: 11 is odd
    assert not at.exception
    assert any("2 rounds of equal size: m = 11 with p = 5" in e.value for e in at.error)
    assert "\n" not in at.error[0].value


def test_pipelines_show_zb_h2_with_bubble_and_peak_memory():
    from simulator import make_schedule, simulate_schedule

    at = page("pipelines")
    assert "zb-h2" in at.multiselect(key="schedules").value
    names = [m.value for m in at.markdown if m.value.startswith("**")]
    assert names == [f"**{n}**" for n in SCHEDULES]  # every schedule of the registry
    peaks = [m.value for m in at.metric if m.label == "peak activations"]
    expect = {n: max(simulate_schedule(make_schedule(n, 4, 8), 1.0, 1.0, 1.0).peak_in_flight) for n in
              ("gpipe", "1f1b", "zb-h1", "zb-h2")}
    assert peaks[0] == f"{expect['gpipe']:.3g} micro-batches" and peaks[1] == f"{expect['1f1b']:.3g} micro-batches"
    assert peaks[4] == f"{expect['zb-h2']:.3g} micro-batches"  # ZB-H2 holds more than 1F1B's p micro-batches
    assert expect["zb-h2"] > expect["1f1b"]
    at.multiselect(key="schedules").set_value(["1f1b", "zb-h2"]).run()
    assert len([m for m in at.metric if m.label == "bubble"]) == 2


def test_pipelines_bubble_deltas_name_their_baseline():
    at = page("pipelines")  # p=4, m=8: GPipe and 1F1B share the bubble (p-1)/(m+p-1)
    deltas = [m.proto.delta for m in at.metric if m.label == "bubble"]
    assert deltas[:2] == ["same as 1f1b", "baseline"]  # never a red "+0.0%"
    assert all(d.endswith("vs 1f1b") and d.startswith("-") for d in deltas[2:])  # interleaved, ZB-H1, ZB-H2 gain


def test_pipelines_show_dualpipe_beside_the_others():
    from simulator import make_schedule, simulate_schedule

    at = page("pipelines")  # p=4, m=8
    bubbles = dict(zip([m.value.strip("*") for m in at.markdown if m.value.startswith("**")],
                       [m.value for m in at.metric if m.label == "bubble"]))
    want = simulate_schedule(make_schedule("dualpipe", 4, 8), 1.0, 1.0, 1.0)
    assert bubbles["dualpipe"] == f"{want.bubble_fraction:.1%}"
    assert float(bubbles["dualpipe"].rstrip("%")) < float(bubbles["zb-h1"].rstrip("%"))
    names = [m.value.strip("*") for m in at.markdown if m.value.startswith("**")]
    peaks = dict(zip(names, [m.value for m in at.metric if m.label == "peak activations"]))
    assert peaks["dualpipe"] == "5 micro-batches"  # p + 1
    assert any("DualPipe" in c.value for c in at.caption)
    at.slider(key="p").set_value(5).run()
    assert any(e.value.startswith("The dualpipe schedule cannot run these settings: ") and "even number of stages; got 5"
               in e.value and e.value.endswith(".") for e in at.error)


def test_pipelines_open_from_a_link_with_an_interactive_timeline_of_the_chosen_schedule():
    from app_helpers import APP
    from streamlit.testing.v1 import AppTest

    from simulator import make_schedule, simulate_schedule

    at = AppTest.from_file(str(APP / "views" / "pipelines.py"), default_timeout=60)
    at.query_params.update({"p": "8", "m": "16", "schedules": ["gpipe", "1f1b"], "show": "gpipe"})
    at.run()
    assert not at.exception
    assert at.slider(key="p").value == 8 and at.slider(key="m").value == 16
    assert at.multiselect(key="schedules").value == ["gpipe", "1f1b"] and at.selectbox(key="show").value == "gpipe"
    want = simulate_schedule(make_schedule("1f1b", 8, 16), 1.0, 1.0, 1.0).makespan
    assert [m.value for m in at.metric if m.label == "step time"][1] == f"{want:.3g} ms"  # times in ms, with the unit
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(specs) == 2  # the interactive timeline of the shown schedule and the comparison of all
    assert specs[0]["title"]["text"] == "gpipe: p=8, m=16"
    rows = specs[1]["layer"][0]["data"]["values"]  # one idle background row per schedule and stage, to its makespan
    assert [r["row"] for r in rows] == [f"{s} · stage {d}" for s in ("gpipe", "1f1b") for d in range(8)]
    assert rows[-1]["t1"] == want
    at.multiselect(key="schedules").set_value(["1f1b"]).run()  # the shown schedule is no longer chosen
    assert not at.exception and at.selectbox(key="show").value == "1f1b"
