"""Predict, then reveal: beside the key figures a question the page checks against its own result."""

from app_helpers import page


def reveal(at, key: str, guess: float) -> str:
    at.number_input(key=f"guess_{key}").set_value(guess).run()
    at.button(key=f"reveal_{key}").click().run()
    return next(m.value for m in [*at.success, *at.warning] if "you said" in m.value)


def test_the_bubble_question_checks_the_prediction_against_the_run():
    at = page("pipelines")
    assert at.button(key="reveal_bubble").disabled  # nothing to check before a prediction
    said = reveal(at, "bubble", 27.0)  # 1F1B, p=4, m=8: 3/11 = 27.3 %
    assert said.startswith("Right: 27.27 %") and "(p-1)/(m+p-1) = 3/11" in said
    assert reveal(at, "bubble", 50.0).startswith("Not quite: 27.27 %")


def test_the_allreduce_bytes_question_uses_the_plan():
    at = page("collectives")  # ring all-reduce of 16 MB over 4 ranks: 2 (n-1)/n S = 24 MB per rank
    assert reveal(at, "bytes", 24.0).startswith("Right: 24 MB")
    assert reveal(at, "bytes", 16.0).startswith("Not quite")


def test_the_pipeline_plays_step_by_step_to_the_whole_schedule():
    from simulator import make_schedule, simulate_schedule, viz

    ops = len(viz.schedule_trace(simulate_schedule(make_schedule("1f1b", 4, 8), 1.0, 1.0, 1.0, 0.0)).events)
    at = page("pipelines")
    chart = at.get("vega_lite_chart")
    n = len(chart)
    at.button(key="pipe_step").click().run()
    assert at.slider(key="tick").value == 1
    assert any(f"1 of {ops} operations done" in c.value for c in at.caption)  # the first forward, at 1 ms
    at.slider(key="tick").set_value(at.slider(key="tick").max).run()
    assert any(f"{ops} of {ops} operations done" in c.value for c in at.caption)
    assert len(at.get("vega_lite_chart")) == n + 1 and not at.exception  # the played timeline


def test_a_refusal_is_shown_as_one_sentence_naming_what_the_page_was_doing():
    from ui import sentence

    from simulator import ParasimError

    assert sentence(ParasimError("tp=3 does not divide\n 4 heads")) == "Tp=3 does not divide 4 heads."
    assert (sentence(ParasimError("m=0 micro-batches: at least 1"), "The gpipe schedule cannot run these settings: ")
            == "The gpipe schedule cannot run these settings: m=0 micro-batches: at least 1.")
    assert sentence(ParasimError("Refused.")) == "Refused."
    assert (sentence(ParasimError("the MLP model has none, use --strategy dp or pp"))  # no flags on a page
            == "The MLP model has none, use strategy dp or pp.")
    assert sentence(ParasimError("bucket of -1 MB; sizes > 0")) == "Bucket of -1 MB; sizes > 0."
