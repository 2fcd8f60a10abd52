"""What a submission's process may send back: plain data only. A parasim object arrives as a
Record (its class name as text); nothing named in a frame is imported or constructed."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator import ParallelConfig, ParasimError, ProgramBuilder, make_schedule
from simulator.grading import notebook_code, rebuild, type_name
from simulator.grading.codec import DataError, Record, classes, finite, from_data, to_data, trusted

ROOT = str(Path(__file__).resolve().parents[1])


def roundtrip(x):
    return from_data(json.loads(json.dumps(to_data(x))))


def test_data_travels_and_parasim_objects_arrive_as_records():
    value = {"a": [1, 2.5, float("inf")], (1, 2): (True, None, "x"), "arr": np.arange(6.0).reshape(2, 3),
             "i": np.int64(7), "s": {1, 2}}
    back = roundtrip(value)
    assert back["a"][:2] == [1, 2.5] and back["a"][2] == float("inf") and back[(1, 2)] == (True, None, "x")
    assert back["arr"].dtype == np.float64 and np.array_equal(back["arr"], value["arr"]) and back["s"] == {1, 2}
    b = ProgramBuilder(2)
    b.send(0, 1, "x")
    program = roundtrip(b.build())
    assert type(program) is Record and type_name(program) == "Program"
    assert [type_name(i) for i in program.code[0]] == ["Send"] and program.code[0][0].dst == 1
    with classes():   # only a sandbox rebuilds the objects (the runner, for what the grader sent)
        again = from_data(json.loads(json.dumps(to_data(program))))
    assert type(again).__name__ == "Program" and type(again.code[0][0]).__name__ == "Send"
    sched = make_schedule("1f1b", 2, 3)
    assert type(roundtrip(sched)) is Record


def test_a_check_rebuilds_only_the_class_it_names():
    cfg = ParallelConfig(tp=2, pp=2, dp=4, global_batch=8)
    got = rebuild(roundtrip(cfg), ParallelConfig)
    assert type(got) is ParallelConfig and got == cfg
    with pytest.raises(DataError, match="a ParallelConfig was expected, got Program"):
        rebuild(roundtrip(ProgramBuilder(1).build()), ParallelConfig)
    forged = from_data({"$": "obj", "cls": "simulator.program:Program", "d": {"n_devices": 1}})
    with pytest.raises(DataError, match="expected"):
        rebuild(forged, ParallelConfig)


def test_nan_and_infinity_are_found_anywhere():
    assert finite({"a": [1.0, (2, np.arange(3.0))]})
    for bad in (float("nan"), [1.0, float("inf")], {"k": np.array([1.0, np.nan])}, np.float64("-inf"),
                from_data({"$": "obj", "cls": "simulator.x:Y", "d": {"v": {"$": "float", "v": "nan"}}})):
        assert not finite(bad)


class Sneaky:
    def __eq__(self, other):  # a verdict that would run in the grader
        return True


def test_objects_that_would_run_code_in_the_grader_are_refused():
    for bad in (Sneaky(), lambda: 1, np.array([Sneaky()], dtype=object), type("L", (list,), {})([1])):
        with pytest.raises(DataError):
            to_data(bad)
    for data in ({"$": "nd", "dtype": "|O", "shape": [1], "b64": ""}, {"$": "ref", "i": 0},
                 {"$": "nd", "dtype": "<f8", "shape": [2**40, 2**40], "b64": ""}):
        with pytest.raises((DataError, TypeError, ValueError)):
            from_data(data)


def test_a_frame_naming_a_module_never_imports_it():
    """The issue's attack: a reply naming `simulator.__main__:X` made the grader import (and run)
    the CLI. Decoded in a fresh interpreter, the module stays unimported and nothing printed."""
    code = ("import sys, json; from simulator.grading.codec import from_data\n"
            "frames = [{'$': k, 'cls': 'simulator.__main__:X', 'f': {}, 'd': {}, 'v': []} "
            "for k in ('dc', 'obj', 'nt', 'enum')] + [{'$': 'dc', 'cls': 'os:system', 'f': {}}]\n"
            "out = [type(from_data(f)).__name__ for f in frames]\n"
            "print(json.dumps([out, [m for m in ('simulator.__main__', 'simulator.cli') if m in sys.modules]]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [["Record"] * 5, []]


def test_notebooks_give_their_code_cells():
    nb = {"cells": [{"cell_type": "markdown", "source": "# no"}, {"cell_type": "code", "source": ["%time x = 1\n", "y = 2\n"]},
                    {"cell_type": "code", "source": "z = 3"}]}
    code = notebook_code(json.dumps(nb))
    assert "# %time x = 1" in code and "y = 2" in code and "z = 3" in code and "# no" not in code
    with pytest.raises(ParasimError, match="not a notebook"):
        notebook_code("{not json")


def test_the_graders_own_objects_travel_only_when_trusted():
    """A check may hand the sandbox a parasim object that is not a dataclass (a Network); what a
    submission sends back may not be one, and the grader never rebuilds one."""
    from simulator.auto.graph import Network

    net = Network("n")
    with pytest.raises(DataError):
        to_data(net)
    with trusted():
        data = json.loads(json.dumps(to_data({"net": net})))
    with classes():
        back = from_data(data)["net"]
    assert type(back) is Network and back.name == "n" and back.nodes == []
    assert type(from_data(data)["net"]) is Record   # the same data decoded in the grader: a Record
