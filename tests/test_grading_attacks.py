"""Issue 26's attacks, each planted as a hostile submission of lesson 05 in one class: every one
fails, and the honest students' rows survive. The grader runs as a subprocess (`parasim lesson
grade`), so an attack that got through and killed or froze its parent would not take pytest with
it: it would show as missing rows."""

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.grading import get_lesson, grade_source, solution_path
from simulator.grading.confine import confinement

pytestmark = pytest.mark.skipif(not confinement()["complete"], reason="needs Landlock and the seccomp filter "
                                "(the refusal without them is tested in test_grading_confinement.py)")

LESSON = get_lesson(5)
SOLUTION = solution_path(LESSON).read_text(encoding="utf-8")
FULL = 10   # 8 public items and lesson 05's 2 hidden ones (instructor/05_pipeline_bubbles/hidden.py)


def _attacks(root: Path, port: int) -> dict[str, str]:
    subs, out = root / "subs", root / "out"
    sol = solution_path(LESSON)
    pre = "import os, signal, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nG = os.getppid()\n"
    return {
        "alice.py": SOLUTION,
        "amy.py": SOLUTION,
        # read every solution: the lesson's own, through glob from the submissions folder, a classmate's
        "reader.py": f"exec(open({str(sol)!r}).read())\n",
        "globber.py": "import glob\nfor p in glob.glob('../**/alice.py', recursive=True) + "
                      f"glob.glob({str(subs)!r} + '/alice.py'):\n    exec(open(p).read())\n",
        # overwrite a classmate's file, a file next to the submissions, and the lesson's checker
        "vandal.py": SOLUTION.replace("import numpy", "import numpy", 1) + "\n"
                     f"for p in ({str(subs / 'amy.py')!r}, {str(root / 'next_to.txt')!r}, "
                     f"{str(LESSON.folder / 'check.py')!r}):\n"
                     "    try:\n        open(p, 'w').write('broken')\n    except OSError:\n        pass\n",
        # signals to the grader and to classmates: tkill, rt_sigqueueinfo, pidfd_send_signal, kill(0), SIGSTOP
        "killer.py": pre + "for nr, args in ((200, (G, 9)), (129, (G, 9, 0)), (62, (0, 9)), (62, (-G, 19)), "
                     "(62, (G, 19)), (234, (G, G, 9))):\n    libc.syscall(nr, *args)\n"
                     "fd = libc.syscall(434, G, 0)\nlibc.syscall(424, fd, 9, 0, 0)\n" + SOLUTION.replace(
                         "def bubble_time", "def _x", 1),
        # the grader's file-size limit to 0, after appending a forged row to the live CSV
        "forger.py": pre + f"try:\n    open({str(out / 'scores.csv')!r}, 'a').write('forger,x,graded,5,5\\n')\n"
                     "except OSError:\n    pass\n"
                     "class R(ctypes.Structure):\n    _fields_ = [('c', ctypes.c_ulong), ('m', ctypes.c_ulong)]\n"
                     "libc.syscall(302, G, 1, ctypes.byref(R(0, 0)), None)\n",
        # the grader's memory, the network, a planted sitecustomize for the next sandbox
        "spy.py": "data = open('/proc/{}/mem'.format(__import__('os').getppid()), 'rb').read(1)\n",
        "caller.py": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\n",
        "planter.py": "import os, sys\nfor d in sys.path + [os.path.expanduser('~'), '..']:\n    try:\n"
                      "        open(os.path.join(d, 'sitecustomize.py'), 'w').write("
                      "\"import os; os.system('touch /tmp/parasim_pwned_" + str(os.getpid()) + "')\")\n"
                      "    except OSError:\n        pass\n",
        # a hand-written reply frame naming a module: the grader's codec must not import it
        "framer.py": "import os, json, struct\n"
                     "def bubble_time(p, m, t_f, t_b):\n"
                     "    msg = json.dumps({'op': 'result', 'ok': True, 'value': {'$': 'dc', "
                     "'cls': 'simulator.__main__:X', 'f': {}}}).encode()\n"
                     "    for fd in range(3, 12):\n        try:\n"
                     "            os.write(fd, struct.pack('>I', len(msg)) + msg)\n        except OSError:\n"
                     "            pass\n    return 0.0\n",
        # NaN answers, a 60 MB answer, an endless import, a FIFO at a classmate's feedback path
        "nan.py": SOLUTION.replace("def bubble_fraction(p: int, m: int) -> float:",
                                   "def bubble_fraction(p: int, m: int) -> float:\n    return float('nan')", 1),
        "huge.py": SOLUTION.replace("def bubble_fraction(p: int, m: int) -> float:",
                                    "def bubble_fraction(p: int, m: int) -> float:\n    return 'x' * 60_000_000", 1),
        "looper.py": "while True:\n    pass\n",
        "fifo.py": f"import os\ntry:\n    os.mkfifo({str(out / 'scores_feedback' / 'zoe.md')!r})\n"
                   "except OSError:\n    pass\n",
        "broken.ipynb": "{ this is not json",
        # answer every item by calling parasim's own schedules and simulator (withheld by lesson 05)
        "solver.py": "from simulator import format_schedule, make_schedule, simulate_schedule\n"
                     "from simulator.parallel.schedules import one_f_one_b\n"
                     "def bubble_time(p, m, t_f, t_b):\n"
                     "    return simulate_schedule(make_schedule('1f1b', p, m), t_f=t_f, t_b=t_b, t_w=0.0).bubble_time[0]\n"
                     "def bubble_fraction(p, m):\n    return simulate_schedule(make_schedule('1f1b', p, m)).bubble_fraction\n"
                     "def peak_in_flight(name, p, m):\n"
                     "    return list(simulate_schedule(make_schedule(name, p, m)).peak_in_flight)\n"
                     "def one_f_one_b_text(p, m):\n    return format_schedule(one_f_one_b(p, m))\n",
        # parasim's solvers copied at import time (new function objects around their code): swapping the
        # withheld functions' code does not reach them; hidden cases too big to simulate and a 1F1B variant
        # no parasim schedule builds (extra_warmup, checked action by action) do
        "saver.py": "import types\nfrom simulator import format_schedule, make_schedule, simulate_schedule\n"
                    "from simulator.parallel import schedules\n"
                    "def _copy(f):\n    f = getattr(f, '__wrapped__', f)\n"
                    "    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)\n"
                    "MK, SIM, OFOB = _copy(make_schedule), _copy(simulate_schedule), _copy(schedules.one_f_one_b)\n"
                    "def bubble_time(p, m, t_f, t_b):\n"
                    "    return SIM(OFOB(p, m), t_f=t_f, t_b=t_b, t_w=0.0).bubble_time[0]\n"
                    "def bubble_fraction(p, m):\n    return SIM(OFOB(p, m)).bubble_fraction\n"
                    "def peak_in_flight(name, p, m):\n"
                    "    return list(SIM(OFOB(p, m) if name == '1f1b' else MK(name, p, m)).peak_in_flight)\n"
                    "def one_f_one_b_text(p, m, extra_warmup=0):\n    return format_schedule(OFOB(p, m))\n",
        "zoe.py": SOLUTION,
        # formula injection through the file name and a backtick break-out through an exception
        "=HYPERLINK(1).py": SOLUTION,
        "ticks.py": SOLUTION.replace("def bubble_fraction(p: int, m: int) -> float:",
                                     "def bubble_fraction(p: int, m: int) -> float:\n"
                                     "    raise ValueError('``` ` ](http://evil) <b>x</b>')", 1),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    (root / "subs").mkdir()
    (root / "out" / "scores_feedback").mkdir(parents=True)
    (root / "next_to.txt").write_text("keep me", encoding="utf-8")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.1)
    check_before = (LESSON.folder / "check.py").read_bytes()
    os.mkfifo(root / "out" / "scores_feedback" / "zoe.md")   # a FIFO where a later student's feedback goes
    for name, text in _attacks(root, server.getsockname()[1]).items():
        (root / "subs" / name).write_text(text, encoding="utf-8")
    csv_path = root / "out" / "scores.csv"
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "lesson", "grade", "05", str(root / "subs"),
                             "--csv", str(csv_path), "--jobs", "3", "--timeout", "20", "--memory-mb", "1024"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        proc.kill()
    connected = []
    try:
        connected.append(server.accept())
    except OSError:
        pass
    server.close()
    rows = {r["student"]: r for r in csv.DictReader(csv_path.open(encoding="utf-8"))}
    return {"rows": rows, "code": proc.returncode, "stdout": stdout, "stderr": stderr, "root": root,
            "connected": connected, "check_before": check_before, "feedback": root / "out" / "scores_feedback"}


def test_the_grader_survives_and_every_row_is_there(graded):
    assert graded["code"] == 0, graded["stderr"][-2000:]
    assert len(graded["rows"]) == 21, sorted(graded["rows"])
    for honest in ("alice", "amy", "zoe", "'=HYPERLINK(1)"):
        assert graded["rows"][honest]["passed"] == str(FULL), graded["rows"][honest]
    assert "forger,x" not in (graded["root"] / "out" / "scores.csv").read_text(encoding="utf-8")


def test_nothing_outside_the_scratch_folder_was_read_or_written(graded):
    rows, root = graded["rows"], graded["root"]
    for cheat in ("reader", "globber", "spy", "caller", "planter", "framer", "forger", "fifo", "looper"):
        assert rows[cheat]["passed"] == "0", rows[cheat]
    assert (root / "subs" / "amy.py").read_text(encoding="utf-8") == SOLUTION
    assert (root / "next_to.txt").read_text(encoding="utf-8") == "keep me"
    assert (LESSON.folder / "check.py").read_bytes() == graded["check_before"]
    assert not Path(f"/tmp/parasim_pwned_{os.getpid()}").exists() and graded["connected"] == []
    assert "Permission denied" in rows["reader"]["error"] and "Permission denied" in rows["spy"]["error"]


def test_calling_parasims_own_solver_earns_nothing(graded):
    solver = json.loads((graded["feedback"] / "solver.json").read_text())
    assert graded["rows"]["solver"]["passed"] == "0"
    assert all("write it yourself" in i["found"] for i in solver["items"][:4]), solver["items"]


def test_a_solver_saved_at_import_time_earns_nothing(graded):
    """The old evasion of the withheld functions: copies of their code made before grading. The
    hidden pipeline of items 1-3 is beyond make_schedule's size limit (its copy refuses it, and
    one_f_one_b's copy cannot build and simulate it within the 2 s a formula needs); item 4's
    extra_warmup is a schedule parasim does not build."""
    row = graded["rows"]["saver"]
    items = json.loads((graded["feedback"] / "saver.json").read_text())["items"]
    assert [row[f"item_{k}_status"] for k in (1, 2, 3, 4)] == ["timeout", "timeout", "timeout", "wrong"], row
    assert all("within 2 s" in i["found"] for i in items[:3]), items[:3]
    assert "extra_warmup=" in items[3]["hint"] and "forwards before the first BW" in items[3]["hint"], items[3]
    assert row["item_9"] == "0" and row["item_10"] != "2", row   # the hidden items: big pipelines, extra warm-up


LESSON_13 = get_lesson(13)


def test_lesson_13_reruns_the_students_configuration(tmp_path):
    """The old evasion of lesson 13's real run: a result whose reported numbers come from another
    run (a data-parallel run carrying a ring run's trace: its weights match one device and its
    trace sends the ring's bytes). The grader reruns the configuration itself (a probe sandbox)
    and draws c when grading, so neither the trace nor a hard-coded c=4 earns item 5."""
    forged = solution_path(LESSON_13).read_text(encoding="utf-8") + (
        "\n\ndef train_context_parallel(cp, kind='ring'):\n    import dataclasses\n"
        "    gpt = GPTConfig(layers=2, hidden=16, heads=4, seq_len=16, vocab=32)\n"
        "    ring = train(TrainConfig(gpt, strategy='cp', devices=4, cp=4, cp_comm_type='p2p', global_batch=4, steps=2))\n"
        "    dp = train(TrainConfig(gpt, strategy='dp', devices=cp, global_batch=4, steps=2))\n"
        "    return dataclasses.replace(dp, trace=ring.trace)\n")
    report = grade_source(LESSON_13, forged)
    real = report.items[4]
    assert [i.passed for i in report.items[:5]] == [True] * 4 + [False], report.format()
    assert real.status == "wrong" and "TrainConfig.strategy" in real.hint and real.found == "'dp'", real


def test_signals_and_limits_reach_no_other_process(graded):
    rows = graded["rows"]
    # its bubble_time is missing: item 1 and the hidden item 9 that calls it
    assert rows["killer"]["passed"] == str(FULL - 2) and rows["killer"]["item_1_status"] == "error"
    assert rows["forger"]["status"] == "graded"   # its file ran; its limit call on the grader was refused


def test_wrong_answers_are_wrong_and_limits_cost_one_item(graded):
    rows = graded["rows"]
    for name in ("nan", "huge", "ticks"):
        assert rows[name]["item_2"] == "0" and rows[name]["passed"] == str(FULL - 3), rows[name]  # items 2, 5, 9
    assert rows["looper"]["item_1_status"] == "timeout" and "longer than 20 s" in rows["looper"]["error"]
    assert rows["broken"]["status"] == "error" and "not a notebook" in rows["broken"]["error"]
    nan = json.loads((graded["feedback"] / "nan.json").read_text())["items"][1]
    assert "NaN" in nan["found"] and nan["status"] == "error"


def test_outputs_are_escaped_and_a_fifo_never_hangs_the_grader(graded):
    text = (graded["root"] / "out" / "scores.csv").read_text(encoding="utf-8")
    assert "\n'=HYPERLINK(1)," in text and "\n=HYPERLINK" not in text
    md = (graded["feedback"] / "ticks.md").read_text(encoding="utf-8")
    line = next(ln for ln in md.splitlines() if ln.startswith("- found:"))
    assert line.startswith("- found: ```` ") and line.endswith(" ````")   # a fence longer than any run inside
    assert (graded["feedback"] / "zoe.md").is_file() and not (graded["feedback"] / "zoe.md").is_fifo()
    for md in graded["feedback"].glob("*.md"):
        assert "RuntimeWarning" not in md.read_text(encoding="utf-8"), md.name
