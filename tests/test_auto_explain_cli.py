"""`parasim explain` CLI: JSON fields, the MindSpore operator_parallel examples, refusals."""

import json

import pytest

from simulator.cli import main
from simulator.commands.explain import parse_strategy
from simulator.errors import ParasimError


def run_json(capsys, *argv):
    assert main(["explain", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_for_k_cut_matmul(capsys):
    d = run_json(capsys, "--op", "matmul", "--shapes", "64x32,32x16", "--strategy", "((2,4),(4,1))",
                 "--devices", "8")
    assert d["device_matrix"] == [2, 4, 1] and d["tensor_maps"] == [[2, 1], [1, 0]]
    assert d["output_strategy"] == [2, 1]
    assert [f["op"] for f in d["forward"]] == ["AllReduce"]
    assert d["forward"][0]["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert d["forward"][0]["bytes_per_rank"] == 32 * 16 * 8
    assert d["parameter_gradient"][0]["groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert all(m["reason"] for m in d["forward"] + d["backward"] + d["parameter_gradient"])


def test_out_strategy_reduce_scatter(capsys):
    d = run_json(capsys, "--op", "matmul", "--shapes", "64x32,32x16", "--strategy", "((2,4),(4,1))",
                 "--out-strategy", "((8,1),)", "--devices", "8")
    assert [f["op"] for f in d["forward"]] == ["ReduceScatter"]
    assert [f["op"] for f in d["backward"]] == ["AllGather"]
    assert d["output_strategy"] == [8, 1]


def test_column_parallel_has_no_forward_comm(capsys):
    d = run_json(capsys, "--op", "batchmatmul", "--shapes", "4x64x32,4x32x16",
                 "--strategy", "((1,2,1),(1,1,4))", "--devices", "8")
    assert d["device_matrix"] == [1, 2, 1, 4] and d["forward"] == []
    assert d["backward"][0]["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("strategy, words", [
    ("((2,4),(2,1))", "cut 4 ways"), ("((3,1),(1,1))", "64 % 3"), ("((4,4),(4,1))", "16 devices"),
    ("((2,4),)", "1 tuple"), ("__import__('os').system('true')", "integer tuples")])
def test_refusals(capsys, strategy, words):
    assert main(["explain", "--op", "matmul", "--shapes", "64x32,32x16", "--strategy", strategy]) == 2
    assert words in capsys.readouterr().err


def test_parse_strategy_is_literal_only():
    assert parse_strategy(" ((2, 4), (4, 1)) ") == ((2, 4), (4, 1))
    with pytest.raises(ParasimError):
        parse_strategy("((2.5, 1),)")
