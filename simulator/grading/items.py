"""The items that grade understanding, one home for every lesson's check.py: a prediction (the
number before the run), an explanation (a choice, a hint per wrong letter) and the student's own
plot (their figure compared with parasim's drawing of the same run).

Each builds one check item, a function of the submission `s` named by its first argument:

    check_prediction = prediction_item("prediction: the bytes one device sends, before the run (within 2 %)",
                                       answer=lambda: float(train(cfg).bytes_sent_per_device[0]),
                                       ask="predicted_bytes_dp8", hint="a ring all-reduce sends 2 (n-1)/n ...")
    check_explanation = explanation_item("explanation: why ... (a choice)", ask="why_same_weights", right="b",
                                         hints={"a": "...", "c": "...", "d": "..."}, case=drawn_case,
                                         answer=lambda n: ..., reason="what the right reason gives")
    check_plot_of_your_run = own_plot_item("your own run: its timeline, bar by bar", ask="plot_my_run",
                                       run=lambda: train(cfg).trace, draw=viz.timeline,
                                       what="the README's run", hint="return viz.timeline(r.trace) of that run")

The answer, the run and parasim's drawing are computed here, in the grader, at grading time, never
read from the submission. An item keeps its place among the `def check_*` items by the line that
builds it (`check.check_functions`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .outcomes import Outcome, choice, compare, expect, same_figure


def _named(fn, name: str, kind: str):
    """`fn` as a check item: its name (docstring), kind and the line of the lesson's check.py that built it."""
    fn.__doc__, fn.__name__, fn.kind = name, f"check_{kind}", kind
    fn.line = sys._getframe(2).f_lineno
    return fn


def prediction_item(name: str, answer: Callable[..., Any], ask: str, hint: str | Callable[..., str],
               rtol: float = 0.02, atol: float = 0.0, case: Callable[[], tuple] | None = None):
    """A prediction item: the submission's function `ask` returns the number before any run, and it
    is compared with `answer()` (parasim's run, at grading time) within `rtol`/`atol`. With `case`,
    the arguments are drawn when grading (`hidden_random`): `ask(*case())` against `answer(*case())`,
    and `hint(*case())` names them when `hint` is a function."""
    def check(s) -> Outcome:
        args = tuple(case()) if case is not None else ()
        got = getattr(s, ask)(*args)
        why = hint(*args) if callable(hint) else hint
        return compare(answer(*args), got, why, rtol=rtol, atol=atol)
    return _named(check, name, "prediction")


def explanation_item(name: str, ask: str, right: str, hints: dict[str, str], case: Callable[[], tuple],
                     answer: Callable[..., Any], reason: str | Callable[..., str] = "",
                     rtol: float = 1e-9, atol: float = 0.0):
    """An explanation item: the submission's function `ask(*case())` returns (a letter, a number):
    the choice that explains what the student measured, and what that reason gives on a case drawn
    when grading (`case`), compared with `answer(*case())` within `rtol`/`atol`. A wrong letter
    gets its hint (why that choice does not match the measurement); a right letter with a wrong
    number gets `reason` (named by the case when it is a function). The item passes only on both:
    a letter alone is a guess that wins 1 time in 4, a number of a case drawn when grading is not."""
    def check(s) -> Outcome:
        args = tuple(case())
        got = getattr(s, ask)(*args)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            return expect(False, "(a letter, the number your reason gives on this case)", got,
                          "return a pair: the letter of your choice and the number it predicts for the arguments")
        picked = choice(got[0], right, hints)
        if not picked.passed:
            return picked
        why = reason(*args) if callable(reason) else reason
        return compare(answer(*args), got[1], "your letter is right; " + why, rtol=rtol, atol=atol)
    return _named(check, name, "explanation")


def own_plot_item(name: str, ask: str, what: str | Callable[..., str], hint: str,
                  run: Callable[..., Any] | None = None, draw: Callable[[Any], Any] | None = None,
                  measure: Callable[[Any], Any] | None = None, measured: str = "",
                  case: Callable[[], tuple] | None = None, rtol: float = 1e-9,
                  given: Callable[..., Any] | None = None, probe: str | None = None):
    """A plot item: the submission's function `ask` returns the figure of its own run, which must
    show the bars and lines of `draw(run())`, parasim's drawing of the same run. With `measure`,
    `ask` returns (figure, value) and the value must be `measure(run())` (`measured` says what:
    what the student reads off their own figure). With `case`, the run's arguments are drawn when
    grading: `ask(*case())` against `draw(run(*case()))`, and `what(*case())` names them. With
    `given`, the run is of the student's own construction: `run(given(s, *args), *args)` (a
    configuration, a schedule the submission built, rebuilt as data and rerun here by parasim,
    never its reported numbers). With `probe`, the construction is run and drawn by parasim in a
    probe sandbox holding no student code (`probes.PROBES[probe]`, which returns the figure): a
    Program the student built never runs in the grader."""
    def check(s) -> Outcome:
        args = tuple(case()) if case is not None else ()
        built = given(s, *args) if given is not None else None
        if probe is not None:
            done = want = s.run_in_sandbox(probe, built)
        else:
            done = run(built, *args) if given is not None else run(*args)
            want = draw(done)
        got = getattr(s, ask)(*args)
        fig, value = (got[0], got[1]) if measure and isinstance(got, (tuple, list)) and len(got) == 2 else (got, None)
        drawn = same_figure(fig, want, what(*args) if callable(what) else what, hint)
        if measure is None or not drawn.passed:
            return drawn
        return compare(measure(done), value, measured, rtol=rtol)
    return _named(check, name, "plot")
