"""Grade one submission of a lesson: run the lesson's check items against it, item by item.

Every `check_*` function of the lesson's check.py, in file order, is one item: it calls the
submission's functions and compares them with parasim's own results, returning an `Outcome`.
By default (`isolate=True`) the submission runs in a `Sandbox` (its own process, limits, a
scratch folder) and the check items run here, in the grader, calling the submission's functions
through the sandbox and getting their return values back as data. A missing TODO
(NotImplementedError), any exception, an endless loop (time limit), a crash and a file that does
not import all become failed items with a one-line message; the other items still count.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ParasimError
from .catalog import LessonInfo, get_lesson, instructor_dir
from .notebook import read_submission
from .outcomes import ItemResult, Outcome
from .runner import error_text, load_module
from .sandbox import SHARED_ROOT, Limits, Sandbox, SandboxCrash, SandboxTimeout, StudentError


@dataclass(frozen=True)
class Report:
    """A graded submission. `status`: "graded", "empty" (no code), "unchanged" (the exercise as
    handed out) or "did not import"; `output` is the tail of what the submission printed."""

    lesson: LessonInfo
    file: Path
    items: tuple[ItemResult, ...]
    status: str = "graded"
    output: str = ""

    @property
    def passed(self) -> int:
        return sum(i.passed for i in self.items)

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def points(self) -> float:
        return round(sum(i.earned for i in self.items), 6)

    @property
    def max_points(self) -> float:
        return round(sum(i.points for i in self.items), 6)

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict:
        """Plain data: lesson number and title, file, status, passed/total and every item."""
        return {"lesson": self.lesson.number, "title": self.lesson.title, "file": str(self.file),
                "status": self.status, "passed": self.passed, "total": self.total, "ok": self.ok,
                "points": self.points, "max_points": self.max_points,
                "items": [i.shown().to_dict() for i in self.items], "output": self.output}

    def format(self) -> str:
        lines = [f"Lesson {self.lesson.number:02d} - {self.lesson.title}", f"graded file: {self.file}"]
        if self.status in ("empty", "unchanged"):
            lines.append(f"  this file is {'empty' if self.status == 'empty' else 'the exercise as handed out'}: "
                         "fill in the TODOs first")
        for i in (x.shown() for x in self.items):
            lines.append(f"  [{' ok ' if i.passed else 'FAIL'}] {i.number}. {i.name}"
                         + (f"  ({i.status}, {i.earned:g}/{i.points:g} points)" if not i.passed else ""))
            if not i.passed:
                lines += [f"         expected: {i.expected}", f"         found:    {i.found}"]
                if i.hint:
                    lines.append(f"         hint:     {i.hint}")
        verdict = "all checks pass" if self.ok else "keep going"
        lines.append(f"score {self.passed}/{self.total} items, {self.points:g}/{self.max_points:g} points: {verdict}")
        return "\n".join(lines)


def check_functions(check_module) -> list[Callable]:
    """The `check_*` functions of a check module, in the order they are written (an item built by
    `items.prediction` and its kin: the line that builds it), then the hidden
    items the instructor's folder adds (`load_checker`)."""
    fns = [v for k, v in vars(check_module).items() if k.startswith("check_") and callable(v)]
    return sorted(fns, key=lambda f: getattr(f, "line", None) or f.__code__.co_firstlineno) + list(getattr(check_module, "HIDDEN_ITEMS", []))


def item_name(fn) -> str:
    return (fn.__doc__ or fn.__name__).strip().splitlines()[0]


_CHECKERS: dict[tuple, object] = {}


def load_checker(lesson: LessonInfo):
    """The lesson's check module, imported once per version of its file (a class is graded with
    the one module `grade_class` loaded before the first submission ran; `checker=` below)."""
    path = (lesson.folder / "check.py").resolve()
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _CHECKERS:
        module = load_module(path, f"_parasim_lesson_check_{lesson.number:02d}")
        module.HIDDEN_ITEMS = hidden_items(lesson)
        _CHECKERS[key] = module
    return _CHECKERS[key]


def hidden_items(lesson: LessonInfo) -> list[Callable]:
    """The instructor's hidden items of a lesson: `check_*` functions of
    <instructor>/<lesson folder>/hidden.py (never shipped to students, never readable by a
    sandbox), graded after the public ones; their feedback shows the status only."""
    path = instructor_dir() / lesson.folder.name / "hidden.py"
    if not path.is_file():
        return []
    fns = check_functions(load_module(path.resolve(), f"_parasim_lesson_hidden_{lesson.number:02d}"))
    for fn in fns:
        fn.hidden = True
    return fns


class OverBudget(SandboxTimeout):
    """A call of `_Student.within(seconds)` that took longer than its seconds (its sandbox was killed)."""


class _Student:
    """What a check item sees as the submission: `student.f(...)` calls f in the sandbox, and
    `student.run_in_sandbox(probe, *args)` runs parasim's `probes.PROBES[probe]` on data (a
    Program the student built, say) in a separate sandbox holding no student code."""

    def __init__(self, box: Sandbox, deadline: float, probes: dict, budget: float | None = None):
        self._box, self._deadline, self._probes, self._budget = box, deadline, probes, budget

    def run_in_sandbox(self, probe: str, *args):
        if self._probes.get("box") is None:
            # it may read (never write) the submission's scratch: the files a check asked it to write there
            self._probes["box"] = Sandbox(None, self._box.limits, readable=[str(self._box.scratch)])
            if not self._probes["box"].loaded:
                raise SandboxCrash(f"the probe sandbox did not start: {self._probes['box'].load_error}")
        return self._probes["box"].call(probe, args, deadline=self._deadline)

    def within(self, seconds: float) -> _Student:
        """The submission with at most `seconds` for each call (inside the item's limit): a hidden
        case whose answer is a formula a student evaluates at once, while simulating it (parasim's
        own solver, under any name) cannot finish. Over it: SandboxTimeout, the item's "timeout"."""
        return _Student(self._box, min(self._deadline, time.monotonic() + seconds), self._probes, seconds)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        box, deadline, budget = self._box, self._deadline, self._budget

        def call(*args, **kwargs):
            try:
                return box.call(name, args, kwargs, deadline=deadline)
            except SandboxTimeout:
                if budget is None:
                    raise
                raise OverBudget(f"{name} gave no answer within {budget:g} s on this case (a formula answers "
                                     "at once; building and simulating it cannot finish); stopped") from None
        return call


class _InProcess:
    """The same for a file imported into this process (`isolate=False`: the student's own machine)."""

    def __init__(self, module):
        self._module = module

    def within(self, seconds: float) -> _InProcess:
        """No per-call limit in this process (a student's own machine): the same submission."""
        return self

    def run_in_sandbox(self, probe: str, *args):
        from .probes import PROBES

        return PROBES[probe](*args)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


def _meta(fn) -> dict:
    return {"points": float(getattr(fn, "points", 1.0)), "hidden": bool(getattr(fn, "hidden", False))}


def _failed(k, fn, found, hint, status, expected="a return value, not an exception") -> ItemResult:
    """A failed item of check function `fn`; `status` is "wrong", "error" or "timeout"."""
    return ItemResult(k, item_name(fn), False, expected, found, hint, status, **_meta(fn))


def _graded(k, fn, outcome) -> ItemResult:
    if not isinstance(outcome, Outcome):
        raise TypeError(f"check item {k} returned {type(outcome).__name__}, not an Outcome")
    meta = _meta(fn)
    return ItemResult(k, item_name(fn), outcome.passed, outcome.expected, outcome.found, outcome.hint,
                      "passed" if outcome.passed else "wrong", earned=round(meta["points"] * outcome.share, 6), **meta)


def _student_failure(k, name, e: StudentError) -> ItemResult:
    hint = "fill in this TODO" if e.not_implemented else "read the error, fix, re-run"
    return _failed(k, name, e.text, hint, "error")


def grade_isolated(lesson: LessonInfo, source: str, limits: Limits | None = None,
                   checker=None, files: dict | None = None) -> tuple[list[ItemResult], str]:
    """The items of `lesson` (of `checker`, default the lesson's check module) against `source`,
    run in sandboxes (a fresh one after a timeout or a crash). Returns the items and the tail of
    the submission's output."""
    limits = limits or Limits()
    fns = check_functions(checker or load_checker(lesson))
    items, box, tail, load_error, load_status, probes = [], None, "", "", "error", {}
    load_hint = "run the file once with python to see the error"
    try:
        for k, fn in enumerate(fns, 1):
            name = fn
            if load_error:
                items.append(_failed(k, name, load_error, load_hint, load_status, "the file imports"))
                continue
            if box is None:
                box = Sandbox(source, limits, files=files, withhold=dict(lesson.withhold))
                if not box.loaded:
                    load_error = f"your file did not run: {box.load_error}"
                    load_status = "timeout" if box.timed_out else "error"
                    tail = box.output_tail()
                    items.append(_failed(k, name, load_error, load_hint, load_status, "the file imports"))
                    continue
            items.append(_item(k, name, fn, box, limits, probes))
            if items[-1].status in ("timeout", "crash"):
                tail = box.output_tail()
                for b in (box, probes.pop("box", None)):
                    if b is not None:
                        b.close()
                box = None
                items[-1] = replace(items[-1], status="error" if items[-1].status == "crash" else "timeout")
        if box is not None:
            tail = box.output_tail()
    finally:
        for b in (box, probes.get("box")):
            if b is not None:
                b.close()
    return items, tail


def _item(k: int, name: str, fn, box: Sandbox, limits: Limits, probes: dict) -> ItemResult:
    """One item against a loaded sandbox ("timeout"/"crash" tell the caller to start a fresh one)."""
    token = SHARED_ROOT.set(str(box.scratch))      # where `shared_folder()` puts what it shares
    try:
        return _graded(k, name, fn(_Student(box, time.monotonic() + limits.timeout_s, probes)))
    except StudentError as e:
        return _student_failure(k, name, e)
    except OverBudget as e:   # a call over its own budget (`_Student.within`)
        return _failed(k, name, str(e), "compute it from the formula, not by building the whole thing", "timeout")
    except SandboxTimeout:
        return _failed(k, name, f"no answer within {limits.timeout_s:g} s; stopped",
                       "an endless loop? a while condition that never turns false?", "timeout")
    except SandboxCrash as e:
        return _failed(k, name, f"your code stopped the process: {e}",
                       "do not exit or kill the process; a MemoryError means too big an array", "crash")
    except Exception as e:  # noqa: BLE001 -- a value the check could not use
        return _failed(k, name, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                       "return the type the TODO asks for", "error")
    finally:
        SHARED_ROOT.reset(token)


def grade_in_process(lesson: LessonInfo, path: Path) -> list[ItemResult]:
    """The items of `lesson` against the file `path`, imported into this process (fast, for a
    student's own machine and the tests of the lessons; trusts the file)."""
    fns = check_functions(load_checker(lesson))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            student = _InProcess(load_module(path, f"_parasim_student_{lesson.number:02d}"))
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        found = f"your file did not run: {error_text(e, path)}"
        return [_failed(k, fn, found, "run the file once with python to see the error", "error",
                        "the file imports") for k, fn in enumerate(fns, 1)]
    items = []
    for k, fn in enumerate(fns, 1):
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                items.append(_graded(k, fn, fn(student)))
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            hint = "fill in this TODO" if isinstance(e, NotImplementedError) else "read the error, fix, re-run"
            items.append(_failed(k, fn, error_text(e, path), hint, "error"))
    return items


def lesson_prediction(lesson: LessonInfo) -> dict | None:
    """The lesson's predict-then-reveal question: its check.py's `prediction()` (question, answer,
    rel_tol, unit, explain), computed by parasim; None when the lesson has none."""
    fn = getattr(load_checker(lesson), "prediction", None)
    return dict(fn()) if callable(fn) else None


def submission_status(lesson: LessonInfo, source: str) -> str:
    """"empty" (no code at all), "unchanged" (the exercise as handed out) or "graded"."""
    code = [ln for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not code:
        return "empty"
    exercise = lesson.folder / "exercise.py"
    if exercise.is_file() and _normalized(exercise.read_text(encoding="utf-8")) == _normalized(source):
        return "unchanged"
    return "graded"


def _normalized(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def grade_source(lesson: LessonInfo, source: str, file: Path | str = "<upload>",
                 limits: Limits | None = None, checker=None, files: dict | None = None) -> Report:
    """Grade the text of a submission (a .py file's text, or a notebook's code cells) in a sandbox."""
    checker = checker or load_checker(lesson)
    status = submission_status(lesson, source)
    if status in ("empty", "unchanged"):  # nothing of the student's to run
        found = "an empty file" if status == "empty" else "the exercise as handed out, unchanged"
        items = [_failed(k, fn, found, "fill in the TODOs, then check again", "error", "your code")
                 for k, fn in enumerate(check_functions(checker), 1)]
        return Report(lesson, Path(file), tuple(items), status)
    items, tail = grade_isolated(lesson, source, limits, checker, files)
    if status == "graded" and items and all(i.expected == "the file imports" for i in items):
        status = "did not import"
    return Report(lesson, Path(file), tuple(items), status, tail)


def run_check(number: int | str, file: str | Path | None = None, root: Path | None = None,
              isolate: bool = True, limits: Limits | None = None) -> Report:
    """Run lesson `number`'s checker against `file` (default: the lesson's exercise.py; a .py or
    an .ipynb). `isolate=False` imports the file into this process instead of a sandbox."""
    lesson = get_lesson(number, root)
    path = Path(file) if file else lesson.folder / "exercise.py"
    if not path.is_file():
        raise ParasimError(f"no file {path} to check")
    path = path.resolve()
    if isolate or path.suffix == ".ipynb":
        return grade_source(lesson, read_submission(path), path, limits)
    return Report(lesson, path, tuple(grade_in_process(lesson, path)),
                  submission_status(lesson, path.read_text(encoding="utf-8")))
