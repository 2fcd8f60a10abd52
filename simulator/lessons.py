"""The lessons autograder: discover lessons/NN_topic/ folders, run a check module against a file.

A lesson folder holds README.md, exercise.py (TODOs), solution.py and check.py. check.py declares

    LESSON = {"title": ..., "goals": [...], "app_pages": [...], "requires": [...], "minutes": 45,
              "prerequisites": [...]}          # a literal, read with ast (no import needed)

    def check_ring_bytes(student):
        "ring bytes per rank equal 2(n-1)/n x S"     # the item's name (first docstring line)
        return compare(expected, student.ring_bytes(4, 1024), hint="...")

Every `check_*` function, in file order, is one item: it calls the student's functions and compares
them with parasim's own results, returning an `Outcome` (pass/fail, expected, found, hint). The
runner never lets a student's error escape: a missing TODO (NotImplementedError), any exception and
a file that does not import all become failed items with a one-line message.

`requires` names what the lesson needs from parasim: "search_configs" (a public name of
`simulator`), "strategy:tp" (a training strategy that compiles), "module:simulator.faults".
A lesson whose requirements are missing is listed with status "waiting for ...".
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import ParasimError

_FOLDER = re.compile(r"^(\d\d)_[a-z0-9_]+$")


# ---- outcomes of one check item -------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What one check item found. `expected` and `found` are short printable texts."""

    passed: bool
    expected: str = ""
    found: str = ""
    hint: str = ""


@dataclass(frozen=True)
class ItemResult:
    number: int
    name: str
    passed: bool
    expected: str
    found: str
    hint: str

    def to_dict(self) -> dict:
        return {"number": self.number, "name": self.name, "passed": self.passed, "expected": self.expected,
                "found": self.found, "hint": self.hint}


def _short(value: Any, limit: int = 160) -> str:
    if isinstance(value, np.ndarray):
        text = f"array{value.shape} " + np.array2string(value.ravel()[:6], precision=4, separator=", ")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and not _numeric(a):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b))
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.dtype == object or y.dtype == object:
            return a == b
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=rtol, atol=atol))
    except (TypeError, ValueError):
        return a == b


def _numeric(seq) -> bool:
    try:
        return np.asarray(seq).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def compare(expected: Any, found: Any, hint: str = "", rtol: float = 1e-9, atol: float = 1e-12) -> Outcome:
    """Pass when `found` equals `expected` (numbers and arrays: allclose with rtol, atol;
    sequences and dicts element by element; anything else ==)."""
    if found is None:
        return Outcome(False, _short(expected), "None (did the function forget to return?)", hint)
    return Outcome(_close(expected, found, rtol, atol), _short(expected), _short(found), hint)


def ok(found: str = "as expected") -> Outcome:
    """A passed item (for checks that loop over many cases and return early on the first miss)."""
    return Outcome(True, "", found, "")


def expect(condition: bool, expected: str, found: Any, hint: str = "") -> Outcome:
    """Pass when `condition` holds; `expected` describes the rule in words."""
    return Outcome(bool(condition), expected, _short(found) if not isinstance(found, str) else found, hint)


# ---- lessons on disk ------------------------------------------------------------------------
@dataclass(frozen=True)
class LessonInfo:
    number: int
    slug: str
    title: str
    folder: Path
    goals: tuple[str, ...] = ()
    app_pages: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    minutes: int = 45
    prerequisites: tuple[int, ...] = ()
    missing: tuple[str, ...] = field(default=())

    @property
    def status(self) -> str:
        return "ready" if not self.missing else "waiting for " + ", ".join(self.missing)

    def to_dict(self) -> dict:
        return {"number": self.number, "slug": self.slug, "title": self.title, "folder": str(self.folder),
                "goals": list(self.goals), "app_pages": list(self.app_pages), "requires": list(self.requires),
                "minutes": self.minutes, "prerequisites": list(self.prerequisites), "status": self.status}


def lessons_dir() -> Path:
    """The lessons/ folder: $PARASIM_LESSONS, else next to the simulator package (the repository)."""
    env = os.environ.get("PARASIM_LESSONS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "lessons"


def missing_requirements(requires) -> tuple[str, ...]:
    """The entries of `requires` that this parasim does not provide yet."""
    import simulator

    missing = []
    for req in requires:
        if req.startswith("strategy:"):
            from .parallel.strategies import COMPILERS

            ok = req.split(":", 1)[1] in COMPILERS
        elif req.startswith("module:"):
            try:
                ok = importlib.util.find_spec(req.split(":", 1)[1]) is not None
            except ModuleNotFoundError:
                ok = False
        else:
            ok = hasattr(simulator, req)
        if not ok:
            missing.append(req)
    return tuple(missing)


def _read_meta(check_py: Path) -> dict:
    """The LESSON = {...} literal of a check.py, without importing it."""
    tree = ast.parse(check_py.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LESSON" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def list_lessons(root: Path | None = None) -> list[LessonInfo]:
    """Every lessons/NN_topic/ folder with a check.py, in order: number, title, folder, goals,
    the app pages it uses, and whether parasim already has the API it needs."""
    root = Path(root) if root else lessons_dir()
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and _FOLDER.match(p.name)) if root.is_dir() else []:
        check_py = folder / "check.py"
        if not check_py.is_file():
            continue
        meta = _read_meta(check_py)
        requires = tuple(meta.get("requires", ()))
        out.append(LessonInfo(int(folder.name[:2]), folder.name[3:], meta.get("title", folder.name[3:]), folder,
                              tuple(meta.get("goals", ())), tuple(meta.get("app_pages", ())), requires,
                              int(meta.get("minutes", 45)), tuple(meta.get("prerequisites", ())),
                              missing_requirements(requires)))
    return out


def get_lesson(number: int | str, root: Path | None = None) -> LessonInfo:
    """Lesson by number ("2", "02") or folder name ("02_collectives")."""
    lessons = list_lessons(root)
    text = str(number).strip()
    for lesson in lessons:
        if text == lesson.folder.name or (text.isdigit() and int(text) == lesson.number):
            return lesson
    known = ", ".join(f"{x.number:02d}" for x in lessons) or "none"
    raise ParasimError(f"no lesson {number!r}; known lessons: {known}")


# ---- running the checker --------------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    lesson: LessonInfo
    file: Path
    items: tuple[ItemResult, ...]

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
        return {"lesson": self.lesson.number, "title": self.lesson.title, "file": str(self.file),
                "passed": self.passed, "total": self.total, "ok": self.ok,
                "items": [i.to_dict() for i in self.items]}

    def format(self) -> str:
        lines = [f"Lesson {self.lesson.number:02d} - {self.lesson.title}: {self.file}"]
        for i in self.items:
            lines.append(f"  [{' ok ' if i.passed else 'FAIL'}] {i.number}. {i.name}")
            if not i.passed:
                lines += [f"         expected: {i.expected}", f"         found:    {i.found}"]
                if i.hint:
                    lines.append(f"         hint:     {i.hint}")
        verdict = "all checks pass" if self.ok else "keep going"
        lines.append(f"score {self.passed}/{self.total}: {verdict}")
        return "\n".join(lines)


def load_file(path: Path, name: str):
    """Import a Python file as module `name` (the lesson's own check.py or a student's file:
    running the student's code is what an autograder is for)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ParasimError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def check_functions(check_module) -> list[Callable]:
    """The `check_*` functions of a check module, in the order they are written."""
    fns = [v for k, v in vars(check_module).items() if k.startswith("check_") and callable(v)]
    return sorted(fns, key=lambda f: f.__code__.co_firstlineno)


def _error_text(e: BaseException, student_file: Path) -> str:
    if isinstance(e, NotImplementedError):
        return f"not implemented yet ({e})" if str(e) else "not implemented yet"
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if Path(frame.filename).resolve() == student_file:
            where = f" (your line {frame.lineno}: {(frame.line or '').strip()})"
            break
    message = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {message}{where}"


def run_check(number: int | str, file: str | Path | None = None, root: Path | None = None) -> Report:
    """Run lesson `number`'s checker against `file` (default: the lesson's exercise.py)."""
    lesson = get_lesson(number, root)
    path = Path(file) if file else lesson.folder / "exercise.py"
    if not path.is_file():
        raise ParasimError(f"no file {path} to check")
    path = path.resolve()
    checker = load_file(lesson.folder / "check.py", f"_parasim_lesson_check_{lesson.number:02d}")
    fns = check_functions(checker)
    out = io.StringIO()
    student, load_error = None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            student = load_file(path, f"_parasim_student_{lesson.number:02d}")
    except BaseException as e:  # noqa: BLE001 -- a student's file may raise anything at import
        if isinstance(e, KeyboardInterrupt):
            raise
        load_error = f"your file did not run: {_error_text(e, path)}"
    items = []
    for k, fn in enumerate(fns, 1):
        name = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
        if load_error:
            items.append(ItemResult(k, name, False, "the file imports", load_error,
                                    "run the file once with python to see the error"))
            continue
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                outcome = fn(student)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"check {fn.__name__} returned {type(outcome).__name__}, not an Outcome")
        except BaseException as e:  # noqa: BLE001 -- the student's error becomes a failed item
            if isinstance(e, KeyboardInterrupt):
                raise
            hint = "fill in this TODO" if isinstance(e, NotImplementedError) else "read the error, fix, re-run"
            outcome = Outcome(False, "a return value, not an exception", _error_text(e, path), hint)
        items.append(ItemResult(k, name, outcome.passed, outcome.expected, outcome.found, outcome.hint))
    return Report(lesson, path, tuple(items))
