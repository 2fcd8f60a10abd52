"""The gradebook against a class of honest and cheating students (lesson 01, small time limits).

Every attack from issue 15 is planted as a submission: each must earn nothing it did not solve,
and must not change another student's row. The grader runs as a subprocess (`parasim lesson
grade`), so a submission that got through and killed its parent would not take pytest with it."""

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.grading import get_lesson, solution_path

LESSON = get_lesson(1)
SOLUTION = solution_path(LESSON).read_text(encoding="utf-8")
EXERCISE = (LESSON.folder / "exercise.py").read_text(encoding="utf-8")
WRONG = SOLUTION.replace("rank = rank * size + c", "rank = rank + c * size")  # item 1 wrong, the rest right
FULL = 9   # lesson 01's items (6 on the mesh and layouts, then a prediction, an explanation and a plot)


def _notebook(source: str) -> str:
    cells = [{"cell_type": "markdown", "source": ["# my work\n"]},
             {"cell_type": "code", "source": ["%matplotlib inline\n"]},
             {"cell_type": "code", "source": source.splitlines(keepends=True)}]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {}})


def _plant(folder: Path, csv_path: Path) -> dict[str, str]:
    alice = folder / "alice.py"
    return {
        "alice.py": SOLUTION,
        "bob/exercise.ipynb": _notebook(SOLUTION),                      # a notebook in a per-student folder
        "carol.py": "# nothing yet\n",                                  # empty
        "dave.py": EXERCISE,                                            # handed back unchanged
        # replace the report's to_dict in its own process, with a wrong rank_of
        "eve.py": WRONG + "\nimport simulator.grading as g\n"
                  "g.Report.to_dict = lambda self: {'passed': 9, 'total': 9, 'ok': True, 'items': []}\n"
                  "g.Report.passed = property(lambda self: 9)\n",
        # print a perfect report at exit
        "frank.py": EXERCISE + "\nimport atexit, json\natexit.register(lambda: print(json.dumps("
                    "{'lesson': 1, 'passed': 9, 'total': 9, 'ok': True, 'items': []})))\n",
        # make every numeric comparison pass, with a wrong rank_of
        "gina.py": WRONG + "\nimport numpy as np\nnp.isclose = lambda *a, **k: True\n"
                   "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n",
        # run another student's file (relative paths, as a student would)
        "hank.py": "import runpy\ntry:\n    globals().update(runpy.run_path('alice.py'))\nexcept Exception:\n    pass\n"
                   "try:\n    from alice import *\nexcept Exception:\n    pass\n",
        # overwrite another student's file, through the shell and directly
        "ivan.py": EXERCISE + f"\nimport os\nos.system('echo broken > {alice}')\n"
                   f"open({str(alice)!r}, 'w').write('def rank_of(:\\n')\n",
        # rewrite the CSV while graded, and leave a detached child to rewrite it after grading ends
        "judy.py": EXERCISE + f"\nopen({str(csv_path)!r}, 'w').write('student,passed\\njudy,9\\n')\n"
                   "import os, time\ntry:\n    if os.fork() == 0:\n        os.setsid()\n"
                   f"        time.sleep(2)\n        open({str(csv_path)!r}, 'w').write('student,passed\\njudy,9\\n')\n"
                   "        os._exit(0)\nexcept OSError:\n    pass\n"
                   "import subprocess\ntry:\n    subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
                   "except OSError:\n    pass\n",
        # kill the grader (the parent of the sandbox) and its parent
        "kim.py": EXERCISE + "\nimport os, signal\nfor pid in (os.getppid(),):\n    try:\n"
                  "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n",
        # an endless loop in one function: that item times out, the others still count
        "leo.py": SOLUTION.replace("    return rank\n", "    while True:\n        pass\n"),
        # a 50 GB allocation in one function
        "max.py": SOLUTION.replace("    return rank\n", "    big = np.ones(50 * 2**30 // 8)\n    return big\n"),
        # leave the process in one function
        "ned.py": SOLUTION.replace("    return rank\n", "    import os\n    os._exit(0)\n"),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    folder, out = root / "subs", root / "out"
    out.mkdir()
    csv_path = out / "scores.csv"
    for name, text in _plant(folder, csv_path).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "simulator", "lesson", "grade", "01", str(folder), "--csv",
                           str(csv_path), "--jobs", "2", "--timeout", "8", "--memory-mb", "1024"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    time.sleep(3)  # longer than the detached child of judy.py would wait before rewriting the CSV
    rows = {r["student"]: r for r in csv.DictReader(csv_path.open())}
    return rows, out / "scores_feedback", done.stdout


def test_honest_submissions_and_notebooks_in_subfolders(graded):
    rows = graded[0]
    assert rows["alice"]["passed"] == rows["bob"]["passed"] == str(FULL)
    assert rows["bob"]["file"].endswith("bob/exercise.ipynb")
    assert [rows["alice"][f"item_{k}"] for k in range(1, FULL + 1)] == ["1"] * FULL
    assert rows["carol"]["status"] == "empty" and rows["dave"]["status"] == "unchanged"
    assert rows["carol"]["passed"] == rows["dave"]["passed"] == "0"


def test_cheats_earn_nothing_they_did_not_solve(graded):
    rows = graded[0]
    for name in ("eve", "gina"):  # a patched report or numpy lives in their own process only
        assert rows[name]["item_1"] == "0" and rows[name]["passed"] == str(FULL - 1), rows[name]
    for name in ("frank", "hank", "ivan", "judy", "kim"):
        assert rows[name]["passed"] == "0", rows[name]
    assert rows["alice"]["passed"] == str(FULL)  # graded from the text read before ivan.py ran


def test_limits_cost_one_item_and_keep_the_rest(graded):
    rows, feedback, _ = graded
    for name in ("leo", "max", "ned"):  # rank_of loops, allocates 50 GB, or exits: item 1 only
        assert rows[name]["item_1"] == "0" and rows[name]["passed"] == str(FULL - 1), rows[name]
    assert json.loads((feedback / "leo.json").read_text())["items"][0]["status"] == "timeout"
    assert "MemoryError" in json.loads((feedback / "max.json").read_text())["items"][0]["found"]
    assert json.loads((feedback / "ned.json").read_text())["items"][0]["status"] == "error"


def test_the_grader_outlives_its_students(graded):
    rows, _feedback, stdout = graded
    assert len(rows) == 14 and "graded 14 submission(s)" in stdout  # kim.py did not kill the grader
    assert all(r["student"] != "judy" or r["passed"] == "0" for r in rows.values())  # nor did judy rewrite it


def test_feedback_files_and_the_summary(graded):
    rows, feedback, _ = graded
    text = (feedback / "eve.md").read_text()
    assert "## 1. rank_of" in text and "- expected:" in text and "- found:" in text and "- hint:" in text
    summary = {int(r["item"]): r for r in csv.DictReader((feedback / "summary.csv").open())}
    assert set(summary) == set(range(1, FULL + 1))
    item1 = sum(r["item_1"] == "1" for r in rows.values())
    assert summary[1]["passed"] == str(item1) and summary[1]["graded"] == "14" and summary[1]["most_common_failure"]


def test_rows_are_on_disk_as_they_are_graded(tmp_path):
    """Kill the grader while it waits on an endless import: the rows before it are in the CSV."""
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "alice.py").write_text(SOLUTION, encoding="utf-8")
    (folder / "zed.py").write_text("while True:\n    pass\n", encoding="utf-8")
    csv_path = tmp_path / "scores.csv"
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "lesson", "grade", "01", str(folder), "--csv",
                             str(csv_path), "--timeout", "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith(f"alice: {FULL}/{FULL}")
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["student"] for r in rows] == ["alice"] and rows[0]["passed"] == str(FULL)


def test_output_paths_are_checked_before_grading(tmp_path, capsys):
    from simulator.cli import main as cli_main

    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "alice.py").write_text(SOLUTION, encoding="utf-8")
    assert cli_main(["lesson", "grade", "01", str(folder), "--csv", str(folder / "scores.csv")]) == 2
    assert cli_main(["lesson", "grade", "01", str(folder), "--csv", str(tmp_path / "no" / "scores.csv")]) == 2
    assert cli_main(["lesson", "grade", "01", str(folder), "--csv", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "inside the submissions folder" in err and "does not exist" in err and "is a folder" in err
    assert not (folder / "scores.csv").exists() and not list(tmp_path.glob("*_feedback"))


def test_check_grades_the_current_folder_and_says_so(tmp_path, monkeypatch, capsys):
    from simulator.cli import main as cli_main

    copy = tmp_path / LESSON.folder.name
    copy.mkdir()
    (copy / "exercise.py").write_text(SOLUTION, encoding="utf-8")
    monkeypatch.chdir(copy)
    assert cli_main(["lesson", "check"]) == 0
    assert cli_main(["lesson", "check", "01", "--in-process"]) == 0
    out = capsys.readouterr()
    assert f"graded file: {copy / 'exercise.py'}\n  (exercise.py of the current folder)" in out.out
    monkeypatch.chdir(tmp_path)
    assert cli_main(["lesson", "check", str(copy / "exercise.py")]) == 0  # the lesson from the folder name
    assert cli_main(["lesson", "check"]) == 2
    assert "not a lesson folder" in capsys.readouterr().err
