"""What a submission's process may send back: data and parasim's own objects, nothing that runs."""

import json

import numpy as np
import pytest

from simulator import ParasimError, ProgramBuilder, make_schedule
from simulator.grading import notebook_code
from simulator.grading.codec import DataError, from_data, to_data


def roundtrip(x):
    return from_data(json.loads(json.dumps(to_data(x))))


def test_data_and_parasim_objects_travel():
    value = {"a": [1, 2.5, float("inf")], (1, 2): (True, None, "x"), "arr": np.arange(6.0).reshape(2, 3),
             "i": np.int64(7), "s": {1, 2}}
    back = roundtrip(value)
    assert back["a"][:2] == [1, 2.5] and back["a"][2] == float("inf") and back[(1, 2)] == (True, None, "x")
    assert back["arr"].dtype == np.float64 and np.array_equal(back["arr"], value["arr"]) and back["s"] == {1, 2}
    b = ProgramBuilder(2)
    b.send(0, 1, "x")
    program = roundtrip(b.build())
    assert type(program).__name__ == "Program" and [type(i).__name__ for i in program.code[0]] == ["Send"]
    sched = make_schedule("1f1b", 2, 3)
    assert roundtrip(sched).actions == sched.actions


class Sneaky:
    def __eq__(self, other):  # a verdict that would run in the grader
        return True


def test_objects_that_would_run_code_in_the_grader_are_refused():
    for bad in (Sneaky(), lambda: 1, np.array([Sneaky()], dtype=object), type("L", (list,), {})([1])):
        with pytest.raises(DataError):
            to_data(bad)
    forged = [{"$": "dc", "cls": "os:system", "f": {}}, {"$": "obj", "cls": "builtins:dict", "d": {}},
              {"$": "nd", "dtype": "|O", "shape": [1], "b64": ""}, {"$": "obj", "cls": "simulator.grading.check:<locals>.X", "d": {}}]
    for data in forged:
        with pytest.raises((DataError, TypeError, ValueError)):
            from_data(data)


def test_notebooks_give_their_code_cells():
    nb = {"cells": [{"cell_type": "markdown", "source": "# no"}, {"cell_type": "code", "source": ["%time x = 1\n", "y = 2\n"]},
                    {"cell_type": "code", "source": "z = 3"}]}
    code = notebook_code(json.dumps(nb))
    assert "# %time x = 1" in code and "y = 2" in code and "z = 3" in code and "# no" not in code
    with pytest.raises(ParasimError, match="not a notebook"):
        notebook_code("{not json")


def test_the_graders_own_objects_travel_only_when_trusted():
    """A check may hand the sandbox a parasim object that is not a dataclass (a Network); what a
    submission sends back may not be one."""
    from simulator.auto.graph import Network

    net = Network("n")
    with pytest.raises(DataError):
        to_data(net)
    from simulator.grading.codec import trusted

    with trusted():
        data = json.loads(json.dumps(to_data({"net": net})))
        back = from_data(data)["net"]
    assert type(back) is Network and back.name == "n" and back.nodes == []
    with pytest.raises(DataError):
        from_data(data)   # the same data from a submission is refused
