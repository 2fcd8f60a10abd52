"""`parasim lesson`: the lessons and their autograder.

    parasim lesson list                        number, title, minutes, API status
    parasim lesson check                       inside a lesson folder (or a copy): grade ./exercise.py
    parasim lesson check 05                    grade ./exercise.py (else the lesson's own exercise.py)
    parasim lesson check 05 my_ring.ipynb --json   grade another file (.py or .ipynb); one JSON object
    parasim lesson grade 05 submissions/ --csv scores.csv --jobs 4 [--student alice] [--lms canvas]
    parasim lesson figures [--check]           redraw every lesson figure (or check they are current)

`check` prints which file it graded, and exits 0 when every item passes and 1 otherwise (a
student's error is a failed item, never a traceback). Both `check` and `grade` run the submission
in a sandbox (simulator/grading/sandbox.py: its own process group, time and memory limits, a
scratch folder, no new processes); `check --in-process` imports it here instead (faster, trusting).
`grade` writes one CSV row per student as it goes (points and status per item), a feedback file per
student (Markdown and JSON: expected, found, hint per item) and a summary per item; `--student`
regrades some students into an existing CSV (the others' rows stay); `--lms canvas|moodle` also
writes the gradebook in that system's import format. Grading needs Landlock and the seccomp filter
(simulator/grading/confine.py); `--allow-unconfined` grades without them and says what is then not
isolated. See docs/grading.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import ParasimError
from ..grading import Limits, get_lesson, lesson_of_folder, list_lessons, run_check
from ..grading.confine import NOT_ISOLATED, confinement
from ..grading.gradebook import grade_class


def add_parser(sub) -> None:
    p = sub.add_parser("lesson", help="list the lessons, check an exercise, grade a class")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    lst = verbs.add_parser("list", help="number, title, minutes and API status of every lesson")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=run)
    chk = verbs.add_parser("check", help="run a lesson's autograder on a file")
    chk.add_argument("lesson", nargs="?", default=None,
                     help="lesson number, e.g. 05 (default: the lesson whose folder you are in)")
    chk.add_argument("file", nargs="?", default=None,
                     help="file to check, .py or .ipynb (default: exercise.py of the current folder)")
    chk.add_argument("--json", action="store_true", help="print one JSON object")
    chk.add_argument("--in-process", action="store_true", help="import the file here instead of a sandbox")
    chk.add_argument("--timeout", type=float, default=60.0, help="seconds per item (default 60)")
    chk.set_defaults(func=run)
    grd = verbs.add_parser("grade", help="grade every submission of a folder: CSV, feedback files, summary")
    grd.add_argument("lesson", help="lesson number, e.g. 02")
    grd.add_argument("folder", help="folder of submissions: NAME.py, NAME.ipynb or NAME/ (a folder per student)")
    grd.add_argument("--csv", required=True, metavar="OUT", help="CSV file to write (one row per student)")
    grd.add_argument("--feedback", metavar="DIR", default=None,
                     help="folder for one feedback file per student and summary.csv (default: OUT_feedback/)")
    grd.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    grd.add_argument("--timeout", type=float, default=60.0, help="seconds per item and submission (default 60)")
    grd.add_argument("--memory-mb", type=int, default=2048, help="address-space limit per submission (default 2048)")
    grd.add_argument("--student", action="append", default=None, metavar="NAME",
                     help="grade only this student (repeatable) and merge the rows into an existing CSV")
    grd.add_argument("--lms", choices=("canvas", "moodle"), default=None,
                     help="also write OUT_<lms>.csv, the gradebook in Canvas's or Moodle's CSV import format")
    grd.add_argument("--allow-unconfined", action="store_true",
                     help="grade even where Landlock or seccomp is missing (submissions are then NOT isolated)")
    grd.add_argument("--json", action="store_true",
                     help="print one JSON object (rows and per-item summary); each student's line goes to stderr")
    grd.set_defaults(func=run)
    fig = verbs.add_parser("figures", help="redraw every lesson figure and its data file (lessons/make_figures.py)")
    fig.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    fig.add_argument("--check", action="store_true", help="exit 1 if a figure is not what the code draws now")
    fig.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def run(args) -> int:
    verb = getattr(args, "verb", None)
    if verb == "list":
        return _list(args)
    if verb == "check":
        return _check(args)
    if verb == "grade":
        return _grade(args)
    if verb == "figures":
        return _figures(args)
    raise ParasimError(f"unknown verb {verb!r}; use list, check, grade or figures")


def _list(args) -> int:
    lessons = list_lessons()
    if getattr(args, "json", False):
        print(json.dumps({"lessons": [x.to_dict() for x in lessons]}))
        return 0
    width = max((len(x.title) for x in lessons), default=0)  # whole titles, aligned columns
    for x in lessons:
        print(f"{x.number:02d}  {x.title:<{width}} {x.minutes:>3} min  {x.status}")
    return 0


def resolve_check_target(lesson: str | None, file: str | None, cwd: Path) -> tuple[int, Path, str]:
    """(lesson number, file to grade, a note on why that file). The file: the one given, else the
    current folder's exercise.py, else the lesson's own exercise.py (said so in the note)."""
    if lesson is not None and file is None and not lesson.isdigit() and Path(lesson).suffix in (".py", ".ipynb"):
        lesson, file = None, lesson  # `parasim lesson check my_copy/exercise.py`
    if file is not None:
        path = Path(file)
        if not path.is_file():
            raise ParasimError(f"no file {path} to check")
        here = lesson_of_folder(path.resolve().parent)
        if lesson is None and here is None:
            raise ParasimError(f"which lesson is {path}? give its number: parasim lesson check NN {path}")
        number = get_lesson(lesson).number if lesson is not None else here.number
        return number, path.resolve(), "the file given"
    here = lesson_of_folder(cwd)
    if lesson is None and here is None:
        raise ParasimError(f"{cwd} is not a lesson folder; give the lesson: parasim lesson check NN [FILE]")
    info = get_lesson(lesson) if lesson is not None else here
    local = cwd / "exercise.py"
    if local.is_file():
        return info.number, local.resolve(), "exercise.py of the current folder"
    return info.number, (info.folder / "exercise.py").resolve(), \
        "the lesson's own exercise.py: there is no exercise.py in the current folder"


def _check(args) -> int:
    number, path, why = resolve_check_target(args.lesson, args.file, Path.cwd())
    # your own file: graded even where the machine cannot confine it (a note says so)
    report = run_check(number, path, isolate=not args.in_process, limits=Limits(timeout_s=args.timeout,
                                                                               unconfined_ok=True))
    isolation = confinement()
    if not args.in_process and not isolation["complete"]:
        why += f"; not isolated here: no {' and no '.join(isolation['missing'])}"
    if args.json:
        print(json.dumps({**report.to_dict(), "why_this_file": why}))
    else:
        lines = report.format().splitlines()
        print("\n".join(lines[:2] + [f"  ({why})"] + lines[2:]))
    return 0 if report.ok else 1


def _figures(args) -> int:
    from ..grading.catalog import lessons_dir
    from ..grading.runner import load_module

    script = lessons_dir() / "make_figures.py"
    if not script.is_file():
        raise ParasimError(f"no {script}: the figures are drawn from a checkout of the repository")
    return load_module(script, "_parasim_make_figures").main(list(args.lessons) + (["--check"] if args.check else []))


def _grade(args) -> int:
    lesson = get_lesson(args.lesson)
    graded = []
    out = sys.stderr if args.json else sys.stdout  # with --json the per-student lines are progress

    def on_row(r):
        graded.append(r)
        print(f"{r['student']}: {r['passed']}/{r['total']} items, {r['points']:g}/{r['max_points']:g} points "
              f"{r['status']}" + (f" - {r['error']}" if r["error"] else ""), file=out, flush=True)

    limits = Limits(timeout_s=args.timeout, memory_mb=args.memory_mb, unconfined_ok=args.allow_unconfined)
    if args.allow_unconfined and not confinement()["complete"]:
        print(f"warning: not isolated (no {' and no '.join(confinement()['missing'])}): {NOT_ISOLATED}", file=sys.stderr, flush=True)
    rows, summary = grade_class(lesson, Path(args.folder), Path(args.csv),
                                Path(args.feedback) if args.feedback else None, limits, jobs=args.jobs,
                                on_row=on_row, students=args.student, lms=args.lms)
    full = sum(r["total"] > 0 and r["passed"] == r["total"] for r in graded)
    if args.json:
        print(json.dumps({"lesson": lesson.number, "csv": str(args.csv), "complete": full, "graded": graded,
                          "rows": rows, "summary": summary}, default=str))
        return 0
    print(f"graded {len(graded)} submission(s): {full} complete; {len(rows)} row(s) in {args.csv}")
    print("per item: " + "; ".join(f"{s['item']}. {s['passed']}/{s['graded']}" for s in summary))
    return 0
