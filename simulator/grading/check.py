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
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParasimError
from .catalog import LessonInfo, get_lesson
from .notebook import read_submission
from .outcomes import ItemResult, Outcome
from .runner import error_text, load_module
from .sandbox import Limits, Sandbox, SandboxCrash, SandboxTimeout, StudentError


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
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict:
        """Plain data: lesson number and title, file, status, passed/total and every item."""
        return {"lesson": self.lesson.number, "title": self.lesson.title, "file": str(self.file),
                "status": self.status, "passed": self.passed, "total": self.total, "ok": self.ok,
                "items": [i.to_dict() for i in self.items], "output": self.output}

    def format(self) -> str:
        lines = [f"Lesson {self.lesson.number:02d} - {self.lesson.title}", f"graded file: {self.file}"]
        if self.status in ("empty", "unchanged"):
            lines.append(f"  this file is {'empty' if self.status == 'empty' else 'the exercise as handed out'}: "
                         "fill in the TODOs first")
        for i in self.items:
            lines.append(f"  [{' ok ' if i.passed else 'FAIL'}] {i.number}. {i.name}")
            if not i.passed:
                lines += [f"         expected: {i.expected}", f"         found:    {i.found}"]
                if i.hint:
                    lines.append(f"         hint:     {i.hint}")
        verdict = "all checks pass" if self.ok else "keep going"
        lines.append(f"score {self.passed}/{self.total}: {verdict}")
        return "\n".join(lines)


def check_functions(check_module) -> list[Callable]:
    """The `check_*` functions of a check module, in the order they are written."""
    fns = [v for k, v in vars(check_module).items() if k.startswith("check_") and callable(v)]
    return sorted(fns, key=lambda f: f.__code__.co_firstlineno)


def item_name(fn) -> str:
    return (fn.__doc__ or fn.__name__).strip().splitlines()[0]


def load_checker(lesson: LessonInfo):
    return load_module(lesson.folder / "check.py", f"_parasim_lesson_check_{lesson.number:02d}")


class _Student:
    """What a check item sees as the submission: `student.f(...)` calls f in the sandbox."""

    def __init__(self, box: Sandbox, deadline: float):
        self._box, self._deadline = box, deadline

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        box, deadline = self._box, self._deadline
        return lambda *args, **kwargs: box.call(name, args, kwargs, deadline=deadline)


def _failed(k, name, found, hint, status, expected="a return value, not an exception") -> ItemResult:
    return ItemResult(k, name, False, expected, found, hint, status)


def _graded(k, name, outcome) -> ItemResult:
    if not isinstance(outcome, Outcome):
        raise TypeError(f"check item {k} returned {type(outcome).__name__}, not an Outcome")
    return ItemResult(k, name, outcome.passed, outcome.expected, outcome.found, outcome.hint,
                      "pass" if outcome.passed else "fail")


def _student_failure(k, name, e: StudentError) -> ItemResult:
    hint = "fill in this TODO" if e.not_implemented else "read the error, fix, re-run"
    return _failed(k, name, e.text, hint, "fail")


def grade_isolated(lesson: LessonInfo, source: str,
                   limits: Limits | None = None) -> tuple[list[ItemResult], str]:
    """The items of `lesson` against `source`, run in sandboxes (a fresh one after a timeout or
    a crash). Returns the items and the tail of the submission's output."""
    limits = limits or Limits()
    fns = check_functions(load_checker(lesson))
    items, box, tail, load_error = [], None, "", ""
    try:
        for k, fn in enumerate(fns, 1):
            name = item_name(fn)
            if load_error:
                items.append(_failed(k, name, load_error, "run the file once with python to see the error",
                                     "fail", "the file imports"))
                continue
            if box is None:
                box = Sandbox(source, limits)
                if not box.loaded:
                    load_error = f"your file did not run: {box.load_error}"
                    tail = box.output_tail()
                    items.append(_failed(k, name, load_error, "run the file once with python to see the error",
                                         "fail", "the file imports"))
                    continue
            try:
                items.append(_graded(k, name, fn(_Student(box, time.monotonic() + limits.timeout_s))))
            except StudentError as e:
                items.append(_student_failure(k, name, e))
            except SandboxTimeout:
                tail = box.output_tail()
                items.append(_failed(k, name, f"no answer within {limits.timeout_s:g} s; stopped",
                                     "an endless loop? a while condition that never turns false?", "timeout"))
                box.close()
                box = None
            except SandboxCrash as e:
                tail = box.output_tail()
                items.append(_failed(k, name, f"your code stopped the process: {e}",
                                     "do not exit or kill the process; a MemoryError means too big an array",
                                     "crash"))
                box.close()
                box = None
            except Exception as e:  # noqa: BLE001 -- a value the check could not use
                items.append(_failed(k, name, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                                     "return the type the TODO asks for", "fail"))
        if box is not None:
            tail = box.output_tail()
    finally:
        if box is not None:
            box.close()
    return items, tail


def grade_in_process(lesson: LessonInfo, path: Path) -> list[ItemResult]:
    """The items of `lesson` against the file `path`, imported into this process (fast, for a
    student's own machine and the tests of the lessons; trusts the file)."""
    fns = check_functions(load_checker(lesson))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            student = load_module(path, f"_parasim_student_{lesson.number:02d}")
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        found = f"your file did not run: {error_text(e, path)}"
        return [_failed(k, item_name(fn), found, "run the file once with python to see the error", "fail",
                        "the file imports") for k, fn in enumerate(fns, 1)]
    items = []
    for k, fn in enumerate(fns, 1):
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                items.append(_graded(k, item_name(fn), fn(student)))
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            hint = "fill in this TODO" if isinstance(e, NotImplementedError) else "read the error, fix, re-run"
            items.append(_failed(k, item_name(fn), error_text(e, path), hint, "fail"))
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
                 limits: Limits | None = None) -> Report:
    """Grade the text of a submission (a .py file's text, or a notebook's code cells) in a sandbox."""
    status = submission_status(lesson, source)
    if status in ("empty", "unchanged"):  # nothing of the student's to run
        found = "an empty file" if status == "empty" else "the exercise as handed out, unchanged"
        items = [_failed(k, item_name(fn), found, "fill in the TODOs, then check again", "fail", "your code")
                 for k, fn in enumerate(check_functions(load_checker(lesson)), 1)]
        return Report(lesson, Path(file), tuple(items), status)
    items, tail = grade_isolated(lesson, source, limits)
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
