"""The lessons: every solution passes its checker, every untouched exercise fails it with feedback
(never a traceback), every README's Python runs, the exercises are generated from the solutions,
and `parasim lesson grade` writes a CSV of scores."""

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli import main as cli_main
from simulator.grading import get_lesson, list_lessons, run_check, solution_path

ROOT = Path(__file__).resolve().parent.parent
LESSONS = list_lessons()
READY = [x for x in LESSONS if not x.missing]


def test_lessons_are_listed_in_order_with_metadata():
    numbers = [x.number for x in LESSONS]
    assert numbers == sorted(numbers) and len(numbers) >= 10
    for x in LESSONS:
        assert x.title and x.goals and x.app_pages, x.folder
        assert solution_path(x).is_file() and not (x.folder / "solution.py").exists()  # never next to the exercise
        for name in ("README.md", "exercise.py", "check.py"):
            assert (x.folder / name).is_file(), (x.folder, name)
        assert all(p < x.number for p in x.prerequisites)
    assert get_lesson("2").number == 2 and get_lesson("02").number == 2


def test_faults_and_auto_search_lessons_are_ready():
    """Lessons 11 and 12 need the exported faults, goodput and operator-level search: a missing
    export would silently drop them from READY, so say it here."""
    for number in (11, 12):
        lesson = get_lesson(number)
        assert not lesson.missing, (number, lesson.status)
    assert get_lesson(12).title.startswith("Faults and checkpoints") and 12 > max(get_lesson(12).prerequisites)
    guide = (ROOT / "lessons" / "README.md").read_text(encoding="utf-8")
    assert "| 12 | Faults and checkpoints" in guide and "not written yet" not in guide


@pytest.mark.parametrize("lesson", READY, ids=lambda x: x.folder.name)
def test_solution_passes_and_exercise_fails_with_feedback(lesson):
    good = run_check(lesson.number, solution_path(lesson))  # in a sandbox: results travel as data
    assert good.ok, good.format()
    bad = run_check(lesson.number, isolate=False)  # the untouched exercise, imported here
    assert bad.total == good.total and bad.passed == 0, bad.format()
    for item in bad.items:
        assert "not implemented yet" in item.found and "TODO" in item.found, item
        assert item.hint and "Traceback" not in item.found


def test_exercises_are_generated_from_solutions():
    done = subprocess.run([sys.executable, str(ROOT / "lessons" / "make_exercises.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("lesson", READY, ids=lambda x: x.folder.name)
def test_readme_has_a_worked_example_and_its_figures(lesson):
    """(The example runs, and prints what its text quotes: tests/test_lesson_numbers.py.)"""
    text = (lesson.folder / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "a worked example in a ```python block"
    for name in re.findall(r"\]\((figures/[^)]+\.png)\)", text):
        assert (lesson.folder / name).is_file(), name


def test_student_errors_become_failed_items(tmp_path):
    sol = solution_path(get_lesson(1)).read_text(encoding="utf-8")
    wrong = tmp_path / "wrong.py"
    wrong.write_text(sol.replace("rank = rank * size + c", "rank = rank + c * size")
                     .replace("return x[tuple(index)]", "return 1 / 0"), encoding="utf-8")
    report = run_check(1, wrong)  # sandboxed: the error text and line come back from the submission's process
    by_name = {i.number: i for i in report.items}
    assert not by_name[1].passed and by_name[1].expected and by_name[1].found and by_name[1].hint
    assert "ZeroDivisionError" in by_name[5].found and "your line" in by_name[5].found
    broken = tmp_path / "broken.py"
    broken.write_text("def rank_of(:\n", encoding="utf-8")
    report = run_check(1, broken)
    assert report.passed == 0 and all("did not run" in i.found for i in report.items)


def test_cli_check_exit_codes(tmp_path, capsys):
    lesson = get_lesson(1)
    assert cli_main(["lesson", "check", "01", str(solution_path(lesson))]) == 0
    assert cli_main(["lesson", "check", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "hint:" in out and "Traceback" not in out
    assert cli_main(["lesson", "check", "99"]) == 2
    assert cli_main(["lesson", "list"]) == 0
    assert "Device mesh" in capsys.readouterr().out


def test_grade_writes_a_csv(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    src = get_lesson(1).folder
    (folder / "alice.py").write_text(solution_path(get_lesson(1)).read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "bob.py").write_text((src / "exercise.py").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "scores.csv"
    assert cli_main(["lesson", "grade", "01", str(folder), "--csv", str(out)]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"alice", "bob"}
    assert rows["alice"]["passed"] == rows["alice"]["total"] != "0" and rows["alice"]["score"] == "1.0"
    assert rows["bob"]["passed"] == "0" and rows["bob"]["failed_items"].split() == [str(k) for k in range(1, 10)]
    assert rows["bob"]["status"] == "unchanged" and rows["alice"]["status"] == "graded"
    assert rows["alice"]["error"] == rows["bob"]["error"] == ""  # a TODO is a failed item, not an error


def test_grade_names_a_file_that_does_not_import(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "carol.py").write_text("def rank_of(coords:\n", encoding="utf-8")
    out = tmp_path / "scores.csv"
    assert cli_main(["lesson", "grade", "01", str(folder), "--csv", str(out)]) == 0
    (row,) = csv.DictReader(out.open())
    assert row["passed"] == "0" and "SyntaxError" in row["error"]


def test_lesson_list_prints_whole_titles(capsys):
    assert cli_main(["lesson", "list"]) == 0
    out = capsys.readouterr().out
    assert all(x.title in out for x in LESSONS)


def _edited(tmp_path, number, old, new):
    sol = solution_path(get_lesson(number)).read_text(encoding="utf-8")
    assert old in sol
    path = tmp_path / f"wrong{number}.py"
    path.write_text(sol.replace(old, new), encoding="utf-8")
    return {i.number: i for i in run_check(number, path).items}


def test_lesson_12_catches_an_off_by_one_replay_and_a_fake_zero(tmp_path):
    items = _edited(tmp_path, 12, "return fail_step - last + 1", "return fail_step - last")
    assert not items[1].passed and items[1].expected == "2" and items[1].found == "1" and "checkpoint" in items[1].hint
    assert all(items[k].passed for k in range(2, 7))
    items = _edited(tmp_path, 12, "    return worst\n", "    return 0.0\n")
    assert not items[2].passed and items[1].passed  # a function that always says "identical" fails


def test_lesson_10_grades_the_tiny_lm_against_its_plan(tmp_path):
    """A replicated table is not vocabulary parallel; an AllGather counted at the whole tensor's
    bytes (not each rank's n/D rows) disagrees with explain()."""
    items = _edited(tmp_path, 10, "return ((d, 1), (1,)), ((1, 1), (1, d))", "return ((1, 1), (1,)), ((1, 1), (1, d))")
    assert not items[6].passed and "cut 2 ways" in items[6].found and items[7].passed
    items = _edited(tmp_path, 10, '("AllGather", full // device_num)', '("AllGather", full)')
    assert items[6].passed and not items[7].passed
    assert "('AllGather', 512)" in items[7].expected and "('AllGather', 1024)" in items[7].found

def test_lesson_11_catches_a_brute_force_over_too_few_candidates(tmp_path):
    items = _edited(tmp_path, 11, "and a * k * c == device_num]", "and a * k * c == device_num and k == 1]")
    names = {i.name.split(":")[0].split()[0]: i for i in items.values()}
    assert not names["op_candidates"].passed and int(names["op_candidates"].found) < int(names["op_candidates"].expected)
    assert not names["brute_force"].passed  # the optimum cuts k: without it the objective is higher
    assert names["kind_of"].passed and names["searched_first_layer"].passed


def test_lesson_05_explains_a_deadlocking_1f1b_with_the_validator(tmp_path):
    warm = "warm = min(p - d - 1 + extra_warmup, m)"
    items = _edited(tmp_path, 5, warm, "warm = min(d, m)")
    written = items[4]
    assert not written.passed and written.found.startswith("deadlock: stage") and "before stage" in written.found
    assert "waits for" in written.hint
    items = _edited(tmp_path, 5, warm, warm + " if d < p - 1 else 1")   # checked action by action, not against make_schedule
    assert not items[4].passed and "device 1 of p=2, m=3, extra_warmup=0" in items[4].hint
    assert "min(p-d-1+extra_warmup, m) = 0 warm-up forwards, so 1 forwards before the first BW" in items[4].hint
    assert "yours runs 2" in items[4].hint


def test_lesson_hints_teach_more_than_the_inputs(tmp_path):
    items = _edited(tmp_path, 5, "return [min(p - d, m) for d in range(p)]", "return [min(p - d - 1, m) for d in range(p)]")
    assert not items[3].passed and "warm-up" in items[3].hint and "first steady" in items[3].hint


def test_lesson_figures_are_what_the_code_draws():
    """Every figure has a data file; redrawing gives the same data (a stale figure fails)."""
    for png in ROOT.glob("lessons/[0-9][0-9]_*/figures/*.png"):
        assert png.with_suffix(".json").is_file(), f"{png} has no data file: run python lessons/make_figures.py"
    assert cli_main(["lesson", "figures", "--check"]) == 0


def test_a_stale_figure_fails_the_check(tmp_path, monkeypatch, capsys):
    import json

    data = ROOT / "lessons" / "02_collectives_by_hand" / "figures" / "all_reduce_time_vs_n.json"
    stale = json.loads(data.read_text())
    stale["axes"][0]["lines"][0]["y"][-1] *= 0.77  # a halving-doubling time the code no longer gives
    copy = tmp_path / "lessons"
    import shutil

    shutil.copytree(ROOT / "lessons", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "02_collectives_by_hand" / "figures" / "all_reduce_time_vs_n.json").write_text(json.dumps(stale))
    monkeypatch.setenv("PARASIM_LESSONS", str(copy))
    assert cli_main(["lesson", "figures", "02", "--check"]) == 1
    assert "stale: 02_collectives_by_hand/figures/all_reduce_time_vs_n.png" in capsys.readouterr().out


def test_lesson_11_readme_says_what_its_figure_shows():
    """README: every configuration fits under the capacity; the fastest is the one using the most memory."""
    import json

    ax = json.loads((ROOT / "lessons/11_auto_parallel_search/figures/top_configs.json").read_text())["axes"][0]
    n = len(ax["texts"])  # one total per bar, fastest first
    totals = [sum(r[3] for r in ax["rects"][k::n]) for k in range(n)]
    capacity = float(ax["legend"][0].split()[1])
    assert max(totals) <= capacity and totals[0] == max(totals)
    assert "the fastest is the one using the most memory" in (
        ROOT / "lessons/11_auto_parallel_search/README.md").read_text()


def test_public_names_read_from_the_package_match_the_imported_namespace():
    """The grader reads simulator/__init__.py instead of importing the package above it (no cycle);
    what it reads is what `import simulator` provides, and every lesson's requirement is found."""
    import simulator
    from simulator.grading.catalog import public_names

    names = public_names()
    assert names <= set(dir(simulator)) and {"train", "DeviceMesh", "auto", "estimate"} <= names
    for lesson in LESSONS:
        for req in lesson.requires:
            if ":" not in req:
                assert req in names and hasattr(simulator, req), (lesson.number, req)


def test_a_plot_item_reads_the_figures_data_not_its_pixels(tmp_path):
    """Lesson 03's plot of the student's own run: the timeline of another run (1 step, not 2) draws
    fine but shows other bars, so it fails; a wrong letter gets the hint of that choice."""
    items = _edited(tmp_path, 3, 'global_batch=16, steps=steps), device_model=clock)\n    return viz.timeline(r.trace)',
                    'global_batch=16, steps=steps + 1), device_model=clock)\n    return viz.timeline(r.trace)')
    plot = items[7]
    assert not plot.passed and plot.status == "wrong" and "not that run's" in plot.found, plot
    assert items[5].passed and items[6].passed
    items = _edited(tmp_path, 3, 'return "b", shard_sizes', 'return "d", shard_sizes')
    assert not items[6].passed and "nothing is broadcast" in items[6].hint and items[7].passed


def test_lesson_12_grades_the_resumed_run_it_reruns_not_the_numbers_reported(tmp_path):
    """The result a submission returns carries the right losses, but the checkpoint it left on disk
    is another run's (another learning rate): parasim resumes that checkpoint in a probe sandbox and
    refuses it, so the item fails (it used to read r.train.losses and pass)."""
    items = _edited(tmp_path, 12, "    return train_resilient(target, resume_from=converted)\n",
                    "    r = train_resilient(target, resume_from=converted)\n"
                    "    import dataclasses, shutil\n"
                    "    shutil.rmtree(workdir)\n"
                    "    train_resilient(dataclasses.replace(target, lr=0.5), checkpoint_every=3, checkpoint_dir=workdir,\n"
                    "                    check=False)\n"
                    "    return r\n")
    assert not items[3].passed and items[3].status == "error" and "another run" in items[3].found, items[3]
    assert items[1].passed and items[2].passed


def test_lesson_05_measured_bubble_is_not_earned_by_training(tmp_path):
    """bubble_fraction answered by training the pipeline and measuring its trace: train is withheld
    while it runs and the second m is drawn when grading, so item 5 fails."""
    items = _edited(tmp_path, 5, "    return (p - 1) / (m + p - 1)\n",
                    "    from simulator import MLPConfig, SimpleDeviceModel, TrainConfig, train\n"
                    "    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)\n"
                    "    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)\n"
                    "    return train(TrainConfig(mlp, strategy='pp', devices=p, global_batch=4 * m, microbatches=m),\n"
                    "                 device_model=free, check=False).trace.bubble_fraction()\n")
    assert not items[5].passed and "withheld" in items[5].found, items[5]


def test_a_prediction_is_not_earned_by_running_parasim(tmp_path):
    """Lesson 03's prediction answered by running the training it predicts: train is withheld while
    the prediction runs (LESSON["withhold"]), so the item fails and says why."""
    items = _edited(tmp_path, 3, "    return grad_bytes_per_device(build_model(MLPConfig(in_dim=16, hidden=hidden, layers=4, classes=16)), dp)\n",
                    "    mlp = MLPConfig(in_dim=16, hidden=hidden, layers=4, classes=16)\n"
                    "    return float(train(TrainConfig(mlp, strategy='dp', devices=dp, global_batch=2 * dp)).bytes_sent_per_device[0])\n")
    prediction = next(i for i in items.values() if i.name.startswith("prediction"))
    assert not prediction.passed and "withheld" in prediction.found, prediction


def test_solver_only_answers_earn_no_understanding_item(tmp_path):
    """Lesson 02: a ring timeline drawn from parasim's plans (make_plan is withheld) and a one-letter
    explanation without the number its reason gives fail; lesson 05: a chart of parasim's 1F1B
    (make_schedule withheld) and a hard-coded share of the old fixed pipeline fail."""
    items = _edited(tmp_path, 2, "    return viz.timeline(simulate(ring_all_reduce_program(n, size)))\n",
                    "    from simulator import make_plan\n"
                    "    return viz.collective_steps(make_plan('all_reduce', 'ring', n, size * 8))\n")
    assert not items[9].passed and "withheld" in items[9].found, items[9]
    items = _edited(tmp_path, 2, 'return "b", 2 * (n - 1) / n', 'return "b"')
    assert not items[8].passed and items[7].passed
    items = _edited(tmp_path, 5, 'result = simulate_schedule(parse_schedule(one_f_one_b_text(p, m), name="mine")',
                    'result = simulate_schedule(make_schedule("1f1b", p, m)')
    assert not items[8].passed and "withheld" in items[8].found, items[8]
    items = _edited(tmp_path, 5, "    return (p - 1) / (m + p - 1)\n    # END SOLUTION\n\n\n# %% [markdown]\n# Why",
                    "    return 7 / 31\n    # END SOLUTION\n\n\n# %% [markdown]\n# Why")
    assert not items[6].passed


def test_lesson_01_layout_drawn_with_parasims_layout_earns_nothing(tmp_path):
    """The own-layout item's strategy is drawn when grading and Layout.from_strategy is withheld
    while plot_my_layout runs: a drawing of parasim's own layout fails; the other items pass."""
    items = _edited(tmp_path, 1, "    layout = Layout.from_device_matrix(dm, [len(dm) - 1 - d for d in range(len(strategy))])\n",
                    "    layout = Layout.from_strategy(strategy, device_num)\n")
    assert not items[9].passed and "withheld" in items[9].found, items[9]
    assert all(items[k].passed for k in range(1, 9))


@pytest.mark.parametrize("number,old,new", [
    (1, '    return "b", rank - rank % repeat + repeat - 1\n', '    return "b"\n'),
    (9, '    return "b", bubble / (bubble + m * (t_f + t_b) + other_s)\n', '    return "b", bubble / (bubble + m * (t_f + t_b))\n'),
    (10, '    return "b", (64 // a) * (16 // c) * 8\n', '    return "b"\n'),
    (12, '    return "b", math.sqrt(2 * fm.checkpoint_time_s * fm.system_mtbf_s)\n', '    return "b"\n'),
    (11, '    return "b", 18 * 174.6e9 / (t * p)\n', '    return "b", 16 * 174.6e9 / (t * p)\n'),
])
def test_an_explanation_needs_the_number_its_reason_gives(tmp_path, number, old, new):
    """The letter alone, or the letter with the number of a neighbouring reason (lesson 09: the bubble
    over work and bubble only, (p-1)/(m+p-1)), fails the explanation item; every other item passes."""
    items = _edited(tmp_path, number, old, new)
    explanation = [i for i in items.values() if i.name.startswith("explanation")]
    assert len(explanation) == 1 and not explanation[0].passed, explanation
    assert all(i.passed for i in items.values() if i is not explanation[0]), [i for i in items.values() if not i.passed]


# Solver-only answers to lessons 04, 06, 07, 08 and 13's predictions: each calls a parasim function
# that computes the graded number (the registry's bubble forms, the real run, the memory model), so
# each must fail and say what was withheld
SOLVERS = {
    4: ("    return (p - 1) / p\n",
        "    from simulator import SimpleDeviceModel, TrainConfig, train, MLPConfig\n"
        "    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)\n"
        "    mlp = MLPConfig(in_dim=16, hidden=16, layers=p, classes=16)\n"
        "    return train(TrainConfig(mlp, strategy='pp', devices=p, global_batch=4), device_model=free,\n"
        "                 check=False).trace.bubble_fraction()\n"),
    6: ("    return interleaved_bubble_time(p, m, v, 1.0, 1.0)\n",
        "    from simulator import SCHEDULE_SPECS\n"
        "    return SCHEDULE_SPECS['interleaved'].bubble(p, m, 1.0, 1.0, 0.0, v)\n"),
    7: ("    return tp_bytes_per_device(layers, 4, 16, 32, t)\n",
        "    from simulator import GPTConfig, TrainConfig, train\n"
        "    g = GPTConfig(layers=layers, hidden=32, heads=4, seq_len=16, vocab=32)\n"
        "    return float(train(TrainConfig(g, strategy='tp', devices=t, tp=t, global_batch=4), check=False)"
        ".bytes_sent_per_device[0])\n"),
    8: ("    return zero_bytes_per_device(psi, nd, stage)\n",
        "    from simulator.cost.memory import model_state_bytes_per_device\n"
        "    return model_state_bytes_per_device(psi, nd, stage)\n"),
    13: ("    return steps * cp * ring_bytes_per_step(2, batch, 1, 16, 16, cp)\n",
         "    from simulator import attention_bytes_per_step\n"
         "    return steps * cp * attention_bytes_per_step(2, batch, 1, 16, 16, cp)\n"),
}


@pytest.mark.parametrize("number", sorted(SOLVERS))
def test_a_prediction_answered_by_parasims_solver_earns_nothing(tmp_path, number):
    items = _edited(tmp_path, number, *SOLVERS[number])
    prediction = next(i for i in items.values() if i.name.startswith("prediction"))
    assert not prediction.passed and "withheld" in prediction.found, prediction


def test_an_explanation_item_without_a_drawn_case_is_refused():
    from simulator.grading import explanation_item
    with pytest.raises(TypeError, match="'case' and 'answer'"):   # both required: a letter alone is a guess
        explanation_item("explanation: why (a choice)", ask="why", right="b", hints={})


def test_lesson_02_asks_its_explanation_only_for_ring_sizes_whose_plan_it_can_build():
    """The grader counts its answer from parasim's ring plan; n drawn up to 1024 once gave 1,001
    ranks, beyond the plan limit, and marked a correct solution wrong."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check02", ROOT / "lessons/02_collectives_by_hand/check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    low, high = check.EXPLAIN_RANKS
    assert (low, high) == (3, 1000)
    from simulator import make_plan

    assert make_plan("all_reduce", "ring", high, 8 * high).bytes_sent_per_rank()[0] == 2 * (high - 1) * 8
