"""Grade a class: every submission of a folder, in sandboxes, into a CSV, feedback files, a summary
per item and (optionally) an export a learning-management system imports.

A submission is a file `NAME.py` or `NAME.ipynb` in the folder (the student is NAME), or a
subfolder `NAME/` graded by its entry point: exercise.py / exercise.ipynb, else NAME.py, else
main.py, else its only .py or .ipynb file (its other .py files are copied next to it, so it may
import them). Every submission's text is read before grading starts, so a submission that rewrites
another's file changes nothing; one that cannot be read (an .ipynb that does not parse, two
submissions of one student, a folder without an entry point) is a row with status "error" and
never stops the class. Rows are appended to the CSV as each submission is graded (a crash of the
grader loses none of them); at the end the CSV is rewritten in student order. Grading some
students into an existing CSV (`students=`, `--student`) merges: the other students' rows stay.
Only the grader writes these files (sandboxes cannot: `confine.py`); no file is opened through a
planted FIFO or link (`export.write_file`); every cell is escaped (`export.cell`).
"""

from __future__ import annotations

import csv
import json
import os
import stat
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import ParasimError
from . import export
from .catalog import LessonInfo
from .check import Report, check_functions, grade_source, item_name, load_checker
from .confine import require_confinement
from .notebook import SUFFIXES, read_submission
from .sandbox import Limits

BASE_FIELDS = ("student", "file", "status", "passed", "total", "points", "max_points", "score", "failed_items",
               "error")
MAX_SIBLING_BYTES = 2 * 2**20     # other .py files of a folder submission copied into its sandbox


@dataclass(frozen=True)
class Submission:
    student: str
    path: Path
    source: str | None            # None: it could not be read (`error` says why)
    error: str = ""
    files: dict = field(default_factory=dict)   # sibling .py files of a folder submission: name -> text


def entry_point(folder: Path) -> tuple[Path | None, str]:
    """The file a folder submission is graded by, or (None, why not)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES and not p.name.startswith("."))
    for stem in ("exercise", folder.name, "main"):
        named = [p for p in files if p.stem == stem]
        if named:
            return (sorted(named, key=lambda p: p.suffix != ".py")[0], "")
    if len(files) == 1:
        return files[0], ""
    if not files:
        return None, "no .py or .ipynb file in the folder"
    return None, f"{len(files)} files and none named exercise.py, {folder.name}.py or main.py: which one is it?"


def _read(student: str, path: Path, folder: Path | None = None) -> Submission:
    try:
        files = {}
        if folder is not None:
            for p in sorted(folder.glob("*.py")):
                if p != path and p.is_file() and not p.is_symlink() and p.stat().st_size <= MAX_SIBLING_BYTES:
                    files[p.name] = p.read_text(encoding="utf-8", errors="replace")
        return Submission(student, path, read_submission(path), files=files)
    except (ParasimError, OSError) as e:
        return Submission(student, path, None, f"cannot read {path.name}: {e}")


def find_submissions(folder: Path) -> list[Submission]:
    """Every submission of `folder` (files and per-student subfolders), read now."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ParasimError(f"{folder} is not a folder of submissions")
    found: dict[str, list[Submission]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_file() and entry.suffix in SUFFIXES:
            found.setdefault(entry.stem, []).append(_read(entry.stem, entry))
        elif entry.is_dir():
            path, why = entry_point(entry)
            sub = _read(entry.name, path, entry) if path else Submission(entry.name, entry, None, why)
            found.setdefault(entry.name, []).append(sub)
    out = []
    for name, subs in sorted(found.items()):
        if len(subs) > 1:
            out.append(Submission(name, subs[0].path, None, "more than one submission (a file and a folder, "
                                  "or .py and .ipynb): keep one"))
        else:
            out.append(subs[0])
    return out


def check_outputs(folder: Path, csv_path: Path, feedback: Path) -> None:
    """Refuse, before grading, outputs that cannot be written or that sit among the submissions."""
    folder = Path(folder).resolve()
    for what, path in (("CSV", Path(csv_path)), ("feedback folder", Path(feedback))):
        path = path.resolve()
        if path == folder or folder in path.parents:
            raise ParasimError(f"the {what} {path} is inside the submissions folder {folder}; write it elsewhere")
    csv_path = Path(csv_path)
    if csv_path.is_dir():
        raise ParasimError(f"the CSV {csv_path} is a folder; give a file name")
    if csv_path.exists() and not stat.S_ISREG(os.lstat(csv_path).st_mode):
        raise ParasimError(f"the CSV {csv_path} is not a regular file (a FIFO or a device?)")
    if csv_path.resolve().parent == Path(feedback).resolve() and csv_path.name == "summary.csv":
        raise ParasimError(f"the CSV {csv_path} would be overwritten by the per-item summary; name it otherwise")
    parent = csv_path.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ParasimError(f"cannot write the CSV into {parent}: no such folder or not writable")
    if Path(feedback).exists() and not Path(feedback).is_dir():
        raise ParasimError(f"the feedback folder {feedback} is a file")


def item_fields(n_items: int) -> tuple[str, ...]:
    return tuple(f for k in range(1, n_items + 1) for f in (f"item_{k}", f"item_{k}_status"))


def _num(x: float):
    """A number as a spreadsheet shows it: 1, not 1.0."""
    return int(x) if float(x).is_integer() else x


def row_of(sub: Submission, report: Report) -> dict:
    """One CSV row: the totals, then per item the points earned and its status."""
    load = [i.found for i in report.items if i.expected == "the file imports"]
    row = {"student": sub.student, "file": str(sub.path), "status": report.status, "passed": report.passed,
           "total": report.total, "points": _num(report.points), "max_points": _num(report.max_points),
           "score": round(report.points / max(report.max_points, 1e-12), 4),
           "failed_items": " ".join(str(i.number) for i in report.items if not i.passed),
           "error": (sub.error or (load[0] if load else ""))[:200]}
    for i in report.items:
        row[f"item_{i.number}"], row[f"item_{i.number}_status"] = _num(i.earned), i.status
    return row


def feedback_markdown(sub: Submission, report: Report) -> str:
    """The feedback a student reads: per item its status and points, what was expected, found, and
    a hint (hidden items: the status only). Student text is escaped (`export`)."""
    lines = [f"# Lesson {report.lesson.number:02d} - {report.lesson.title}", "",
             f"Student: **{export.plain(sub.student)}** - file {export.code(sub.path.name)} - "
             f"**{report.points:g}/{report.max_points:g} points**, {report.passed}/{report.total} items"
             f" ({report.status})", ""]
    if sub.error:
        lines += [f"Not graded: {export.code(sub.error)}", ""]
    for i in (x.shown() for x in report.items):
        lines.append(f"## {i.number}. {i.name} - {i.status} ({i.earned:g}/{i.points:g})")
        if i.hidden:
            lines += ["", "- a hidden test: its cases, expected values and hints are not shown"]
        elif not i.passed:
            lines += ["", f"- expected: {export.code(i.expected)}", f"- found: {export.code(i.found)}"] + \
                     ([f"- hint: {export.code(i.hint)}"] if i.hint else [])
        lines.append("")
    if report.output:
        lines += ["## Your program's last output", "", export.fenced(report.output), ""]
    return "\n".join(lines)


def summary_rows(lesson: LessonInfo, reports: list, checker=None) -> list[dict]:
    """Per item, for the instructor: how many passed, wrong, error, timeout, and the most common
    wrong answer. `reports`: Reports, or the item lists of feedback JSON files (merged students)."""
    names = [item_name(fn) for fn in check_functions(checker or load_checker(lesson))]
    graded = [[i.to_dict() for i in r.items] if isinstance(r, Report) else r for r in reports]
    out = []
    for k, name in enumerate(names, 1):
        items = [i for r in graded for i in r if i.get("number") == k]
        wrong = Counter(str(i.get("found", "")) for i in items if not i.get("passed"))
        common, count = wrong.most_common(1)[0] if wrong else ("", 0)
        passed = sum(bool(i.get("passed")) for i in items)
        out.append({"item": k, "name": name, "passed": passed, "graded": len(items),
                    "pass_rate": round(passed / max(len(items), 1), 4),
                    **{s: sum(i.get("status") == s for i in items) for s in ("wrong", "error", "timeout")},
                    "most_common_failure": common[:160], "students_with_it": count})
    return out


def _feedback_items(feedback: Path, student: str) -> list[dict]:
    """The items of a student graded in an earlier run, from the feedback JSON the grader wrote."""
    try:
        data = json.loads((feedback / f"{student}.json").read_text(encoding="utf-8"))
        return [i for i in data.get("items", []) if isinstance(i, dict)]
    except (OSError, ValueError, AttributeError):
        return []


class _RowWriter:
    """Appends CSV rows as they come (flushed to disk), under a lock, after the rows it keeps from
    an earlier run; rewrites them all sorted at the end."""

    def __init__(self, path: Path, fields: tuple[str, ...], kept: list[dict]):
        self.path, self.fields, self.rows, self.kept, self.lock = Path(path), fields, [], kept, threading.Lock()
        export.write_file(self.path, export.csv_text(kept, fields))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ParasimError(f"the CSV {path} is not a regular file")
        self.fd = fd

    def add(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)
            data = export.csv_text([row], self.fields).split("\n", 1)[1].encode("utf-8")
            while data:
                data = data[os.write(self.fd, data):]
            os.fsync(self.fd)

    def close(self) -> list[dict]:
        os.close(self.fd)
        graded = {r["student"] for r in self.rows}
        rows = sorted([r for r in self.kept if r["student"] not in graded] + self.rows, key=lambda r: r["student"])
        export.write_file(self.path, export.csv_text(rows, self.fields))
        return rows


def _kept_rows(csv_path: Path, fields: tuple[str, ...], graded: set[str]) -> list[dict]:
    """The rows of an earlier run of the same lesson that this run does not regrade."""
    if not csv_path.is_file():
        return []
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != fields:
            raise ParasimError(f"{csv_path} holds another gradebook (its columns differ from lesson's); "
                               "give a new --csv or remove it")
        rows = list(reader)
    return [{k: (v[1:] if v.startswith("'") and v[1:].startswith(export.FORMULA_START) else v)
             for k, v in r.items()} for r in rows if r["student"] not in graded]


def grade_class(lesson: LessonInfo, folder: Path, csv_path: Path, feedback: Path | None = None,
                limits: Limits | None = None, jobs: int = 1, on_row=None, students=None,
                lms: str | None = None) -> tuple[list[dict], list[dict]]:
    """Grade every submission of `folder` (or only `students`, merged into an existing CSV); write
    the CSV, `feedback/<student>.md` and `.json`, `feedback/summary.csv`, and with `lms` ("canvas"
    or "moodle") `<csv>_<lms>.csv`. Returns (rows, summary). `on_row(row)` is called as each is graded."""
    limits = limits or Limits()
    csv_path = Path(csv_path)
    feedback = Path(feedback) if feedback else csv_path.with_name(csv_path.stem + "_feedback")
    check_outputs(folder, csv_path, feedback)
    if jobs < 1:
        raise ParasimError(f"--jobs must be at least 1, got {jobs}")
    if lms is not None and lms not in export.LMS_FORMATS:
        raise ParasimError(f"--lms must be one of {', '.join(export.LMS_FORMATS)}, got {lms!r}")
    require_confinement(limits.unconfined_ok)
    checker = load_checker(lesson)  # once, before any submission runs; every submission is graded by it
    subs = find_submissions(folder)  # every text read before the first submission runs
    if students:
        missing = sorted(set(students) - {s.student for s in subs})
        if missing:
            raise ParasimError(f"no submission of {', '.join(missing)} in {folder}")
        subs = [s for s in subs if s.student in set(students)]
    feedback.mkdir(parents=True, exist_ok=True)
    fields = BASE_FIELDS + item_fields(len(check_functions(checker)))
    writer = _RowWriter(csv_path, fields, _kept_rows(csv_path, fields, {s.student for s in subs}))
    reports: dict[str, Report] = {}

    def one(sub: Submission) -> None:
        if sub.source is None:
            report = grade_source(lesson, "", sub.path, limits, checker)     # every item an error
            report = Report(lesson, sub.path, tuple(replace(i, found=sub.error, expected="a submission the grader "
                                                            "can read", status="error") for i in report.items), "error")
        else:
            report = grade_source(lesson, sub.source, sub.path, limits, checker, files=sub.files)
        row = row_of(sub, report)
        writer.add(row)
        export.write_file(feedback / f"{sub.student}.md", feedback_markdown(sub, report))
        export.write_file(feedback / f"{sub.student}.json",
                          json.dumps({"student": sub.student, **report.to_dict()}, indent=1))
        reports[sub.student] = report
        if on_row:
            on_row(row)

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(one, s) for s in subs]:
                future.result()
    finally:
        rows = writer.close()
    summary = summary_rows(lesson, [reports.get(r["student"]) or _feedback_items(feedback, r["student"])
                                    for r in rows], checker)
    export.write_file(feedback / "summary.csv", export.csv_text(summary, list(summary[0]) if summary else ["item"]))
    if lms:
        max_points = rows[0]["max_points"] if rows else 0
        lms_fields, lms_table = export.lms_rows(rows, f"Lesson {lesson.number:02d} {lesson.title}", max_points, lms)
        export.write_file(csv_path.with_name(f"{csv_path.stem}_{lms}.csv"), export.csv_text(lms_table, lms_fields))
    return rows, summary
