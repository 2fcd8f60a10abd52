"""The items that grade understanding, one home for every lesson's check.py: a prediction (the
number before the run), an explanation (a choice, a hint per wrong letter) and the student's own
plot (their figure compared with parasim's drawing of the same run).

Each builds one check item, a function of the submission `s` named by its first argument:

    check_prediction = prediction_item("prediction: the bytes one device sends, before the run (within 2 %)",
                                       answer=lambda: float(train(cfg).bytes_sent_per_device[0]),
                                       ask="predicted_bytes_dp8", hint="a ring all-reduce sends 2 (n-1)/n ...")
    check_explanation = explanation_item("explanation: why ... (a choice)", ask="why_same_weights", right="b",
                                         hints={"a": "...", "c": "...", "d": "..."})
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

from .outcomes import Outcome, choice, compare, same_figure


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


def explanation_item(name: str, ask: str, right: str, hints: dict[str, str]):
    """An explanation item: the submission's function `ask` returns one letter; `right` passes and
    each wrong letter gets its hint (why that choice does not match what the student measured)."""
    def check(s) -> Outcome:
        return choice(getattr(s, ask)(), right, hints)
    return _named(check, name, "explanation")


def own_plot_item(name: str, ask: str, run: Callable[..., Any], draw: Callable[[Any], Any], what: str | Callable[..., str],
                  hint: str, measure: Callable[[Any], Any] | None = None, measured: str = "",
                  case: Callable[[], tuple] | None = None, rtol: float = 1e-9, given: Callable[[Any], Any] | None = None):
    """A plot item: the submission's function `ask` returns the figure of its own run, which must
    show the bars and lines of `draw(run())`, parasim's drawing of the same run. With `measure`,
    `ask` returns (figure, value) and the value must be `measure(run())` (`measured` says what:
    what the student reads off their own figure). With `case`, the run's arguments are drawn when
    grading: `ask(*case())` against `draw(run(*case()))`, and `what(*case())` names them. With
    `given`, the run is of the student's own construction: `run(given(s), *args)` (a configuration
    the submission returned, rebuilt as data and rerun here by parasim, never its reported numbers)."""
    def check(s) -> Outcome:
        args = tuple(case()) if case is not None else ()
        done = run(given(s), *args) if given is not None else run(*args)
        got = getattr(s, ask)(*args)
        fig, value = (got[0], got[1]) if measure and isinstance(got, (tuple, list)) and len(got) == 2 else (got, None)
        drawn = same_figure(fig, draw(done), what(*args) if callable(what) else what, hint)
        if measure is None or not drawn.passed:
            return drawn
        return compare(measure(done), value, measured, rtol=rtol)
    return _named(check, name, "plot")
