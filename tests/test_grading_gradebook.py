"""The gradebook as instructors use it (lesson 01): points and partial credit, hidden items from
the instructor's folder, statuses per item, folder submissions by entry point, regrading one
student merged into the class files, and the Canvas / Moodle exports."""

import csv
import json

import pytest

from simulator.grading import get_lesson, solution_path
from simulator.grading.export import cell, code
from simulator.grading.gradebook import grade_class
from simulator.grading.sandbox import Limits

LESSON = get_lesson(1)
SOLUTION = solution_path(LESSON).read_text(encoding="utf-8")
WRONG = SOLUTION.replace("rank = rank * size + c", "rank = rank + c * size")  # item 1 wrong, the rest right
HIDDEN = '''
from simulator.grading import item, partial


@item(points=4)
def check_rank_of_large_meshes(s):
    "rank_of on meshes the public checks do not try"
    cases = [((1, 2, 3), (2, 3, 4)), ((0, 0), (4, 5)), ((0, 0, 0, 1), (2, 2, 2, 2))]
    want = [23, 0, 1]
    done = sum(s.rank_of(c, shape) == w for (c, shape), w in zip(cases, want))
    return partial(done, len(cases), "row-major ranks", done)
'''


def _rows(path):
    return {r["student"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}


@pytest.fixture()
def instructor(tmp_path, monkeypatch):
    folder = tmp_path / "instructor" / LESSON.folder.name
    folder.mkdir(parents=True)
    (folder / "hidden.py").write_text(HIDDEN, encoding="utf-8")
    monkeypatch.setenv("PARASIM_INSTRUCTOR", str(tmp_path / "instructor"))
    from simulator.grading import check

    check._CHECKERS.clear()
    yield folder
    check._CHECKERS.clear()


def test_points_partial_credit_hidden_items_and_statuses(tmp_path, instructor):
    subs = tmp_path / "subs"
    (subs / "bob").mkdir(parents=True)
    (subs / "alice.py").write_text(SOLUTION, encoding="utf-8")
    (subs / "bob" / "helpers.py").write_text(WRONG, encoding="utf-8")      # the entry point imports its sibling
    (subs / "bob" / "bob.py").write_text("from helpers import *\n", encoding="utf-8")
    (subs / "carl").mkdir()
    for name in ("a.py", "b.py"):                                            # no entry point: an error row
        (subs / "carl" / name).write_text(SOLUTION, encoding="utf-8")
    rows, summary = grade_class(LESSON, subs, tmp_path / "scores.csv", limits=Limits(timeout_s=30), lms="canvas")
    by = {r["student"]: r for r in rows}
    assert (by["alice"]["points"], by["alice"]["max_points"], by["alice"]["total"]) == (13, 13, 10)
    # bob's rank_of is wrong: item 1 (1 point) and the hidden item 10 gets 1 of 3 cases right ((0, 0) -> 0)
    assert by["bob"]["item_1_status"] == "wrong" and by["bob"]["item_10"] == round(4 / 3, 6)  # points to 6 decimals
    assert by["bob"]["points"] == round(8 + 4 / 3, 6) and by["bob"]["file"].endswith("bob/bob.py")
    assert by["carl"]["status"] == "error" and "none named exercise.py" in by["carl"]["error"]
    bob = json.loads((tmp_path / "scores_feedback" / "bob.json").read_text())
    hidden = bob["items"][9]
    assert hidden["hidden"] and hidden["found"] == "(hidden test)" and hidden["status"] == "wrong"
    assert "- a hidden test: its cases" in (tmp_path / "scores_feedback" / "bob.md").read_text()
    assert summary[9]["name"] == "rank_of on meshes the public checks do not try" and summary[9]["wrong"] == 1
    canvas = list(csv.reader((tmp_path / "scores_canvas.csv").open(encoding="utf-8")))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         "Lesson 01 Device mesh and sharding notation"]
    assert canvas[1][0] == "Points Possible" and canvas[1][5] == "13"
    assert canvas[2][:6] == ["alice", "", "", "alice", "", "13"]


def test_regrading_one_student_merges_into_the_class_files(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("ann", "ben", "cat"):
        (subs / f"{name}.py").write_text(WRONG, encoding="utf-8")
    csv_path = tmp_path / "scores.csv"
    grade_class(LESSON, subs, csv_path, limits=Limits(timeout_s=30))
    (subs / "ben.py").write_text(SOLUTION, encoding="utf-8")
    rows, summary = grade_class(LESSON, subs, csv_path, limits=Limits(timeout_s=30), students=["ben"], lms="moodle")
    assert [r["student"] for r in rows] == ["ann", "ben", "cat"]
    on_disk = _rows(csv_path)
    assert on_disk["ben"]["passed"] == "9" and on_disk["ann"]["passed"] == on_disk["cat"]["passed"] == "8"
    assert summary[0]["graded"] == 3 and summary[0]["passed"] == 1 and summary[0]["wrong"] == 2
    moodle = list(csv.DictReader((tmp_path / "scores_moodle.csv").open(encoding="utf-8")))
    assert [m["Username"] for m in moodle] == ["ann", "ben", "cat"] and moodle[1]["Feedback"] == "9/9 items (graded)"


def test_cells_and_code_spans_are_escaped():
    assert [cell(x) for x in ("=1+1", "+a", "-2", "@x", "\tx", "\rx", "ok", 3)] == \
           ["'=1+1", "'+a", "'-2", "'@x", "'\tx", "'\rx", "ok", 3]
    assert code("a `b` c") == "`` a `b` c ``" and code("x ``` y") == "```` x ``` y ````"


def test_an_item_over_many_cases_grades_every_case_and_stops_at_the_first_wrong_one():
    from simulator.grading import each_case

    asked = []

    def case(n, answer):
        asked.append(n)
        return (None if n == 2 else (n * 0.1, answer, f"case {n}"))

    # a close answer (3 * 0.1 computed another way) moves on: every case is graded
    out = each_case([(1, 0.1), (2, "left out"), (3, 0.1 + 0.2), (4, 0.4)], case)
    assert out.passed and asked == [1, 2, 3, 4]
    asked.clear()
    out = each_case([(1, 0.1), (3, 0.30001), (4, 0.4)], case)
    assert not out.passed and out.hint == "case 3" and asked == [1, 3]
    # exact cases: no tolerance at all
    assert not each_case([(1, 0.1 + 1e-15)], case, rtol=0.0, atol=0.0).passed
    assert each_case([], case).passed
