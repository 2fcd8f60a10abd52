"""Property tests: any arguments to any CLI command, and any values in the Python API's configs, give a
correct result or one clear error line (exit 2) -- never a traceback, never a hang (each example
runs under an alarm), never work unbounded by the inputs (the limits refuse first)."""

import contextlib
import io
import math
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.collectives import KINDS, algorithms, collective, make_plan
from simulator.errors import ParasimError
from simulator.models import GPTConfig, MLPConfig
from simulator.parallel.config import SCHEDULES, STRATEGIES, TrainConfig

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SECONDS = 60  # no example may take longer (a hang fails the test instead of the suite)

ints = st.one_of(st.integers(-3, 9), st.sampled_from([0, -1, 10**6, 10**8, 10**12, 2**63]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -5.0, 1e-30, 1e300]))
words = st.one_of(st.sampled_from(["", " ", "x", "../..", "/proc/x", "/nonexistent/x", "1e8", "nan", "-1"]),
                  st.text(max_size=6))
number_text = st.one_of(ints.map(str), floats.map(repr), words)


@contextlib.contextmanager
def _alarm(seconds=SECONDS):
    def boom(*_):
        raise TimeoutError(f"an example ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _run(argv):
    """Run the CLI in-process; return (exit code, stdout, stderr). Any exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with _alarm(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), np.errstate(all="ignore"):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: usage errors exit 2 with one line
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _assert_clean(argv):
    code, out, err = _run(argv)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("error: ") and len(lines) <= 1, (argv, err)
    return code, out


def _opts(pairs):
    return st.lists(st.sampled_from(pairs), max_size=4, unique_by=lambda p: p[0]).flatmap(
        lambda chosen: st.tuples(*[st.tuples(st.just(k), v) for k, v in chosen]) if chosen else st.just(()))


def _flatten(opts):
    return [x for k, v in opts for x in (k, str(v))]


@FUZZ
@given(_opts([("--params", number_text), ("--dp", number_text), ("--zero", ints), ("--precision", words)]))
def test_memory(opts):
    _assert_clean(["memory", *_flatten(opts)])


@FUZZ
@given(_opts([("--gpus", ints), ("--tp", ints), ("--pp", ints), ("--dp", ints), ("--global-batch", ints),
              ("--microbatch-size", ints), ("--hardware", words), ("--virtual-stages", ints), ("--zero", ints)]))
def test_simulate(opts):
    _assert_clean(["simulate", "--model", "gpt3-1.3b", *_flatten(opts)])


@settings(FUZZ, max_examples=8)
@given(st.sampled_from([10**8, 10**12, 1536]), st.sampled_from([10**9, 10**12, 1536]), st.booleans())
def test_simulate_and_search_are_bounded(gpus, batch, trace):
    with tempfile.TemporaryDirectory() as folder:  # the trace, if one is written, goes with the folder
        path = str(Path(folder) / "trace.json")
        _assert_clean(["simulate", "--model", "gpt3-1.3b", "--gpus", str(gpus), "--global-batch", str(batch),
                       *(["--trace", path] if trace else [])])
    if gpus > 10**6 or batch > 10**9:  # refused up front (a full search of 1536 GPUs takes seconds)
        assert _assert_clean(["search", "--model", "gpt3-1.3b", "--gpus", str(gpus), "--global-batch", str(batch),
                              "--top", "1"])[0] == 2


@FUZZ
@given(st.sampled_from(KINDS + ("nope",)), _opts([("--devices", ints), ("--size", ints), ("--root", ints),
                                                  ("--algo", st.sampled_from(["ring", "tree", "direct", "x"])),
                                                  ("--op", st.sampled_from(["sum", "max", "mean", "prod"])),
                                                  ("--dtype", st.sampled_from(["float16", "float32", "int8"])),
                                                  ("--hardware", words), ("--trace", words)]))
def test_collective(kind, opts):
    opts = [(k, v) for k, v in opts if not (k == "--size" and isinstance(v, int) and v > 10**5)]
    code, _ = _assert_clean(["collective", kind, *_flatten(opts)])
    assert code != 1  # every run that starts is correct


@FUZZ
@given(_opts([("--strategy", st.sampled_from(STRATEGIES)), ("--devices", ints), ("--dp", ints), ("--pp", ints),
              ("--tp", ints), ("--ep", ints), ("--zero", ints), ("--microbatches", ints), ("--batch", ints),
              ("--lr", floats), ("--bucket-mb", floats), ("--seed", ints), ("--schedule", st.sampled_from(SCHEDULES)),
              ("--checkpoint-dir", words), ("--resume", words), ("--fail", words), ("--keep-last", ints)]))
def test_train(opts):
    opts = [(k, v) for k, v in opts if not (k in ("--batch", "--devices", "--microbatches") and v > 64)]
    code, out = _assert_clean(["train", "--model", "mlp", "--in-dim", "4", "--hidden", "4", "--layers", "2",
                               "--classes", "2", "--steps", "1", *_flatten(opts)])
    assert code != 1 or "DOES NOT MATCH" in out  # exit 1 only when the check said why


@FUZZ
@given(st.sampled_from(["show", "convert"]), words, words)
def test_checkpoint_paths(verb, a, b):
    extra = [b, "--to-strategy", "dp", "--devices", "2"] if verb == "convert" else []
    _assert_clean(["checkpoint", verb, a, *extra])


@FUZZ
@given(_opts([("--shapes", st.sampled_from(["64x32,32x16", "0x3,3x2", "axb", "8x8"])),
              ("--strategy", st.sampled_from(["((2,4),(4,1))", "((1,1),(1,1))", "bad", "((0,1),(1,1))", "(("])),
              ("--devices", ints)]))
def test_explain(opts):
    opts = dict(opts)
    argv = ["explain", "--op", "matmul", "--shapes", str(opts.get("--shapes", "64x32,32x16")),
            "--strategy", str(opts.get("--strategy", "((2,4),(4,1))"))]
    if "--devices" in opts:
        argv += ["--devices", str(opts["--devices"])]
    _assert_clean(argv)


@settings(FUZZ, max_examples=6)
@given(st.sampled_from(["list", "check", "grade"]), words)
def test_lesson_and_app(verb, arg):
    argv = {"list": ["lesson", "list"], "check": ["lesson", "check", arg or "x", "/nonexistent/x.py"],
            "grade": ["lesson", "grade", "02", "/nonexistent", "--csv", "/nonexistent/x.csv"]}[verb]
    _assert_clean(argv)
    assert _run(["app", "--port", "99999"])[0] == 2


SWEEP_NAMES = {"schedule": ["schedule", "p", "m", "v", "t_f", "t_b", "t_w", "t_comm", "foo"],
               "estimate": ["model", "hardware", "tp", "pp", "dp", "global_batch", "micro_batch", "zero_stage",
                            "overlap_grad_reduce", "assumptions", "foo"],
               "search": ["model", "hardware", "gpus", "global_batch", "top", "max_tp", "foo"],
               "train": ["strategy", "devices", "dp", "pp", "microbatches", "batch", "layers", "lr", "model", "foo"]}
sweep_values = st.one_of(number_text, st.sampled_from(["1f1b", "gpipe", "megatron-1.7b", "a100-80gb", "none", "true"]))


@settings(FUZZ, max_examples=40)
@given(st.sampled_from(sorted(SWEEP_NAMES)).flatmap(lambda kind: st.tuples(
    st.just(kind), st.lists(st.tuples(st.sampled_from(["--set", "--vary"]), st.sampled_from(SWEEP_NAMES[kind]),
                                      st.lists(sweep_values, min_size=1, max_size=3)), max_size=4))))
def test_sweep(case):
    """A misspelt or missing name, a value of the wrong type, a grid too large: one line up front, or
    a table whose refused points carry their reason (found: KeyError, TypeError tracebacks)."""
    kind, opts = case
    argv = ["sweep", kind]
    for flag, name, values in opts:
        argv += [flag, f"{name}={(values[0] if flag == '--set' else ','.join(values))}"]
    _assert_clean(argv)


# ---- the Python API -------------------------------------------------------------------------------
@FUZZ
@given(st.sampled_from(STRATEGIES), st.integers(-1, 9), st.integers(-1, 4), st.integers(-1, 4),
       st.one_of(st.integers(-1, 3), st.booleans()), st.integers(-1, 17), st.integers(-1, 5),
       st.sampled_from(SCHEDULES), floats, st.booleans())
def test_train_config(strategy, devices, dp, pp, tp, batch, m, schedule, lr, gpt):
    model = GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8) if gpt else MLPConfig(4, 4, 2, 2)
    with _alarm():
        try:
            cfg = TrainConfig(model, strategy=strategy, devices=devices, dp=dp, pp=pp, tp=tp, global_batch=batch,
                              microbatches=m, schedule=schedule, lr=lr).resolved()
        except ParasimError as e:
            assert "\n" not in str(e)
            return
    assert cfg.dp * cfg.pp * cfg.tp == cfg.devices and math.isfinite(cfg.lr) and cfg.lr > 0


@FUZZ
@given(st.sampled_from(KINDS), st.integers(0, 6), st.integers(-2, 7), st.lists(st.integers(0, 5), min_size=0,
                                                                              max_size=6))
def test_collective_api(kind, n, root, sizes):
    arrays = [np.arange(sizes[i % len(sizes)] if sizes else 3, dtype=np.float64) + i for i in range(n)]
    algos = algorithms(kind)
    for algo in algos:
        try:
            outs, plan, _ = collective(kind, arrays, algo=algo, root=root)
        except ParasimError as e:
            assert "\n" not in str(e)
            continue
        assert plan.n == n and len(outs) == n


@FUZZ
@given(st.sampled_from(KINDS), st.sampled_from(["ring", "tree", "direct", "halving_doubling", "x"]),
       st.one_of(st.integers(-2, 12), st.sampled_from([10**4, 10**6, 10**9])), st.integers(-8, 10**4),
       st.integers(-1, 3))
def test_make_plan(kind, algo, n, nbytes, root):
    with _alarm(20):
        try:
            plan = make_plan(kind, algo, n, nbytes, root=root)
        except ParasimError as e:
            assert "\n" not in str(e)
            return
    assert sum(plan.bytes_sent_per_rank()) == plan.total_bytes



def _one_line_or(fn, *args, **kw):
    """fn's value, or None when it refuses with one ParasimError line (anything else fails)."""
    with _alarm(20):
        try:
            return fn(*args, **kw)
        except ParasimError as e:
            assert "\n" not in str(e) and str(e)
            return None


@FUZZ
@given(st.sampled_from(SCHEDULES + ("nope", "")), st.one_of(st.integers(-2, 9), st.sampled_from([10**7, True])),
       st.one_of(st.integers(-2, 17), st.sampled_from([10**9, 2.5])), st.integers(-1, 4))
def test_schedules(name, p, m, v):
    from simulator.parallel.schedule_registry import make_schedule

    sched = _one_line_or(make_schedule, name, p, m, v)
    if sched is not None:
        assert sched.p == p and len(sched.actions) == p and sched.m == m


@FUZZ
@given(st.lists(st.lists(st.sampled_from(["F0", "F1", "B0", "B1", "BW0", "BW1", "W0", "F-1", "X9", "F1.7", "#", ""]),
                         max_size=5), max_size=4), st.integers(-1, 3))
def test_hand_written_schedules(lines, v):
    from simulator.parallel.schedule_check import parse_schedule

    sched = _one_line_or(parse_schedule, "\n".join(" ".join(x) for x in lines), v)
    if sched is not None:
        assert sched.p >= 1


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["dp", "tp", "pp", "", "dp"]), st.one_of(st.integers(-1, 5),
                                                                                     st.sampled_from([10**9, 1.5]))),
                max_size=4),
       st.lists(st.integers(-1, 9), max_size=3), st.integers(-1, 17), st.lists(st.integers(0, 9), max_size=3))
def test_meshes_and_sharding_strategies(axes, strategy, devices, shape):
    from simulator.layout import Layout
    from simulator.mesh import DeviceMesh

    mesh = _one_line_or(DeviceMesh, axes)
    if mesh is not None:
        assert mesh.size == math.prod(n for _, n in axes)
    layout = _one_line_or(Layout.from_strategy, tuple(strategy), devices, tuple(shape) or None)
    if layout is not None:
        assert layout.mesh.size == devices


@FUZZ
@given(st.sampled_from([1, 2, 4, 8, 0, -1, 3]), st.sampled_from([1, 2, 4, 0, 5]), st.sampled_from([1, 2, 6, 0]),
       st.sampled_from([1, 8, 96, 0, 7]), st.sampled_from(["1f1b", "interleaved", "zb-h1", "gpipe", "x"]),
       st.sampled_from([1, 2, 3]), st.sampled_from([0, 1, 3, 4]), st.sampled_from(["none", "full", "x"]))
def test_cost_parallel_config(tp, pp, dp, batch, schedule, v, zero, recompute):
    from simulator.cost.parallel_config import ParallelConfig
    from simulator.cost.scale_sim import simulate_at_scale

    cfg = _one_line_or(ParallelConfig, tp=tp, pp=pp, dp=dp, global_batch=batch, schedule=schedule,
                       virtual_stages=v, zero_stage=zero, recompute=recompute)
    if cfg is not None:
        res = _one_line_or(simulate_at_scale, "gpt3-1.3b", cfg, "a100-80gb", fold_tp=True)
        assert res is None or (math.isfinite(res.step_time_s) and res.step_time_s > 0)


@FUZZ
@given(words)
def test_checkpoint_paths_api(path):
    from simulator.faults import Checkpoint, latest_checkpoint

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        assert _one_line_or(latest_checkpoint, path) is None          # nothing saved there
        assert _one_line_or(Checkpoint.open, path) is None


@FUZZ
@given(st.one_of(st.text(max_size=30), st.sampled_from(['{"cells": 3}', '{"cells": [{"cell_type": "code"}]}', "[]",
                                                        '{"cells": [{"cell_type": "code", "source": 7}]}'])))
def test_lesson_files(text):
    from simulator.grading import notebook_code

    code = _one_line_or(notebook_code, text)
    assert code is None or isinstance(code, str)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "exercise.py"
        f.write_text(text, encoding="utf-8")
        _assert_clean(["lesson", "check", "01", str(f), "--in-process"])


@FUZZ
@given(floats, st.one_of(st.integers(-5, 10**7), st.booleans()))
def test_grading_limits(timeout, memory):
    from simulator.grading.sandbox import Limits

    limits = _one_line_or(Limits, timeout_s=timeout, memory_mb=memory)
    assert limits is None or (0 < limits.timeout_s <= 86400 and limits.memory_mb >= 64)

if __name__ == "__main__":
    pytest.main([__file__, "-q"])
