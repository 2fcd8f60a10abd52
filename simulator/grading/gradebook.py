"""Grade a class: every submission of a folder, in sandboxes, into a CSV, feedback files and a
summary per item.

A submission is a file `NAME.py` or `NAME.ipynb` in the folder (the student is NAME), or a
subfolder `NAME/` holding one (its exercise.py / exercise.ipynb when there are several). Every
submission's text is read before grading starts, so a submission that rewrites another's file
changes nothing. Rows are appended to the CSV as each submission is graded (a crash of the grader
loses none of them); at the end the CSV is rewritten in student order. Output paths are checked
before anything runs.
"""

from __future__ import annotations

import csv
import json
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParasimError
from .catalog import LessonInfo
from .check import Report, check_functions, grade_source, item_name, load_checker
from .notebook import SUFFIXES, read_submission
from .sandbox import Limits

BASE_FIELDS = ("student", "file", "status", "passed", "total", "score", "failed_items", "error")


@dataclass(frozen=True)
class Submission:
    student: str
    path: Path
    source: str


def find_submissions(folder: Path) -> list[Submission]:
    """Every submission of `folder` (files and per-student subfolders), read now."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ParasimError(f"{folder} is not a folder of submissions")
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix in SUFFIXES:
            found.append((entry.stem, entry))
        elif entry.is_dir():
            files = sorted(p for p in entry.iterdir() if p.is_file() and p.suffix in SUFFIXES)
            preferred = [p for p in files if p.stem == "exercise"]
            if preferred or files:
                found.append((entry.name, (preferred or files)[0]))
    names = Counter(name for name, _ in found)
    if dup := sorted(n for n, c in names.items() if c > 1):
        raise ParasimError(f"student {dup[0]!r} has more than one submission (a file and a folder, or .py and .ipynb)")
    return [Submission(name, path, read_submission(path)) for name, path in found]


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
    parent = csv_path.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ParasimError(f"cannot write the CSV into {parent}: no such folder or not writable")
    if Path(feedback).exists() and not Path(feedback).is_dir():
        raise ParasimError(f"the feedback folder {feedback} is a file")


def item_fields(n_items: int) -> tuple[str, ...]:
    return tuple(f"item_{k}" for k in range(1, n_items + 1))


def row_of(sub: Submission, report: Report) -> dict:
    """One CSV row: the totals, and 1/0 per item."""
    load = [i.found for i in report.items if i.expected == "the file imports"]
    row = {"student": sub.student, "file": str(sub.path), "status": report.status, "passed": report.passed,
           "total": report.total, "score": round(report.passed / max(report.total, 1), 4),
           "failed_items": " ".join(str(i.number) for i in report.items if not i.passed),
           "error": load[0][:200] if load else ""}
    row.update({f"item_{i.number}": int(i.passed) for i in report.items})
    return row


def feedback_markdown(sub: Submission, report: Report) -> str:
    """The feedback a student reads: per item, pass or what was expected, found, and a hint."""
    lines = [f"# Lesson {report.lesson.number:02d} - {report.lesson.title}", "",
             f"Student: **{sub.student}** - file `{sub.path.name}` - score **{report.passed}/{report.total}**"
             f" ({report.status})", ""]
    for i in report.items:
        lines.append(f"## {i.number}. {i.name} - {'pass' if i.passed else i.status or 'fail'}")
        if not i.passed:
            lines += ["", f"- expected: `{i.expected}`", f"- found: `{i.found}`"] + ([f"- hint: {i.hint}"]
                                                                                    if i.hint else [])
        lines.append("")
    if report.output:
        lines += ["## Your program's last output", "", "```", report.output, "```", ""]
    return "\n".join(lines)


def summary_rows(lesson: LessonInfo, reports: list[Report]) -> list[dict]:
    """Per item, for the instructor: how many passed, and the most common wrong answer."""
    names = [item_name(fn) for fn in check_functions(load_checker(lesson))]
    out = []
    for k, name in enumerate(names, 1):
        items = [i for r in reports for i in r.items if i.number == k]
        wrong = Counter(i.found for i in items if not i.passed)
        common, count = wrong.most_common(1)[0] if wrong else ("", 0)
        out.append({"item": k, "name": name, "passed": sum(i.passed for i in items), "graded": len(items),
                    "pass_rate": round(sum(i.passed for i in items) / max(len(items), 1), 4),
                    "most_common_failure": common[:160], "students_with_it": count})
    return out


class _RowWriter:
    """Appends CSV rows as they come (flushed to disk), under a lock; rewrites them sorted at the end."""

    def __init__(self, path: Path, fields: tuple[str, ...]):
        self.path, self.fields, self.rows, self.lock = Path(path), fields, [], threading.Lock()
        self.file = open(self.path, "w", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, fieldnames=fields, extrasaction="ignore")
        self.writer.writeheader()
        self._sync()

    def _sync(self):
        self.file.flush()
        os.fsync(self.file.fileno())

    def add(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)
            self.writer.writerow(row)
            self._sync()

    def close(self) -> None:
        self.file.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(sorted(self.rows, key=lambda r: r["student"]))
        os.replace(tmp, self.path)


def grade_class(lesson: LessonInfo, folder: Path, csv_path: Path, feedback: Path | None = None,
                limits: Limits | None = None, jobs: int = 1, on_row=None) -> tuple[list[dict], list[dict]]:
    """Grade every submission of `folder`; write the CSV, `feedback/<student>.md` and `.json`, and
    `feedback/summary.csv`. Returns (rows, summary). `on_row(row)` is called as each is graded."""
    csv_path = Path(csv_path)
    feedback = Path(feedback) if feedback else csv_path.with_name(csv_path.stem + "_feedback")
    check_outputs(folder, csv_path, feedback)
    if jobs < 1:
        raise ParasimError(f"--jobs must be at least 1, got {jobs}")
    subs = find_submissions(folder)  # every text read before the first submission runs
    feedback.mkdir(parents=True, exist_ok=True)
    n_items = len(check_functions(load_checker(lesson)))
    writer = _RowWriter(csv_path, BASE_FIELDS + item_fields(n_items))
    reports: dict[str, Report] = {}

    def one(sub: Submission) -> None:
        report = grade_source(lesson, sub.source, sub.path, limits)
        row = row_of(sub, report)
        writer.add(row)
        (feedback / f"{sub.student}.md").write_text(feedback_markdown(sub, report), encoding="utf-8")
        (feedback / f"{sub.student}.json").write_text(json.dumps({"student": sub.student, **report.to_dict()},
                                                                 indent=1), encoding="utf-8")
        reports[sub.student] = report
        if on_row:
            on_row(row)

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(one, s) for s in subs]:
                future.result()
    finally:
        writer.close()
    summary = summary_rows(lesson, [reports[s.student] for s in subs if s.student in reports])
    with open(feedback / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]) if summary else ["item"])
        w.writeheader()
        w.writerows(summary)
    return sorted(writer.rows, key=lambda r: r["student"]), summary
