"""`parasim lesson`: the lessons and their autograder.

    parasim lesson list                        number, title, minutes, API status
    parasim lesson check 02                    grade lessons/02_*/exercise.py, item by item
    parasim lesson check 02 my_ring.py --json  grade another file; one JSON object
    parasim lesson grade 02 submissions/ --csv scores.csv

`check` exits 0 when every item passes and 1 otherwise (a student's error is a failed item, never
a traceback). `grade` checks every *.py of a folder, each in its own Python process with a time
limit (a student's endless loop costs one row, not the class), and writes one CSV row per file.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from ..errors import ParasimError
from ..lessons import get_lesson, list_lessons, run_check

CSV_FIELDS = ("file", "passed", "total", "score", "failed_items", "error")


def add_parser(sub) -> None:
    p = sub.add_parser("lesson", help="list the lessons, check an exercise, grade a class")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    lst = verbs.add_parser("list", help="number, title, minutes and API status of every lesson")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=run)
    chk = verbs.add_parser("check", help="run a lesson's autograder on a file")
    chk.add_argument("lesson", help="lesson number, e.g. 02")
    chk.add_argument("file", nargs="?", default=None, help="file to check (default: the lesson's exercise.py)")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.set_defaults(func=run)
    grd = verbs.add_parser("grade", help="check every .py file of a folder and write a CSV of scores")
    grd.add_argument("lesson", help="lesson number, e.g. 02")
    grd.add_argument("folder", help="folder of submissions (*.py)")
    grd.add_argument("--csv", required=True, metavar="OUT", help="CSV file to write (one row per file)")
    grd.add_argument("--timeout", type=float, default=120.0, help="seconds per submission (default 120)")
    grd.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def run(args) -> int:
    verb = getattr(args, "verb", None)
    if verb == "list":
        return _list(args)
    if verb == "check":
        report = run_check(args.lesson, args.file)
        print(json.dumps(report.to_dict()) if getattr(args, "json", False) else report.format())
        return 0 if report.ok else 1
    if verb == "grade":
        return _grade(args)
    raise ParasimError(f"unknown verb {verb!r}; use list, check or grade")


def _list(args) -> int:
    lessons = list_lessons()
    if getattr(args, "json", False):
        print(json.dumps({"lessons": [x.to_dict() for x in lessons]}))
        return 0
    width = max((len(x.title) for x in lessons), default=0)  # whole titles, aligned columns
    for x in lessons:
        print(f"{x.number:02d}  {x.title:<{width}} {x.minutes:>3} min  {x.status}")
    return 0


def grade_folder(lesson, folder: Path, timeout_s: float = 120.0) -> list[dict]:
    """One row per *.py file of `folder`: passed, total, score, failed item numbers, error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ParasimError(f"{folder} is not a folder of submissions")
    info = get_lesson(lesson)
    rows = []
    for path in sorted(folder.glob("*.py")):
        cmd = [sys.executable, "-m", "simulator", "lesson", "check", f"{info.number:02d}", str(path), "--json"]
        row = {"file": path.name, "passed": 0, "total": 0, "score": 0.0, "failed_items": "", "error": ""}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
            if report is None:
                row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            else:
                row.update(passed=report["passed"], total=report["total"],
                           score=round(report["passed"] / max(report["total"], 1), 4),
                           failed_items=" ".join(str(i["number"]) for i in report["items"] if not i["passed"]))
                load = [i["found"] for i in report["items"] if not i["passed"] and i["expected"] == "the file imports"]
                if load:  # the file itself failed (syntax error, exit at import): say so in the error column
                    row["error"] = load[0][:200]
        except subprocess.TimeoutExpired:
            row["error"] = f"timed out after {timeout_s:g} s"
        except (json.JSONDecodeError, KeyError) as e:
            row["error"] = f"unreadable checker output: {e}"
        rows.append(row)
    return rows


def _grade(args) -> int:
    rows = grade_folder(args.lesson, Path(args.folder), args.timeout)
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    full = sum(r["total"] > 0 and r["passed"] == r["total"] for r in rows)
    print(f"graded {len(rows)} file(s): {full} complete; wrote {args.csv}")
    return 0
