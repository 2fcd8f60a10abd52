"""The correctness check of a collective: bit-exact where data only moves, Higham's bound where it adds."""

import json

import numpy as np
import pytest

from simulator.cli import main
from simulator.collectives import collective, make_plan, reference
from simulator.collectives.check import check_collective, gamma, unit_roundoff
from simulator.errors import ParasimError


def _inputs(n, size, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(size).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("algo", ["ring", "tree", "halving_doubling", "direct"])
def test_every_algorithm_passes_in_every_dtype(dtype, algo):
    xs = _inputs(7, 1000, dtype)
    outs, _, _ = collective("all_reduce", xs, algo=algo)
    v = check_collective("all_reduce", xs, outs)
    assert v.correct and not v.exact and v.bound_rel == gamma(7, unit_roundoff(dtype)) + gamma(7, 2.0**-53)
    if dtype != "float64":  # a low-precision format reports its real error against float64
        assert v.max_abs_error_vs_float64 > 0


def test_cli_float32_all_reduce_is_correct(capsys):
    # the case of issue 18: rtol 1e-5 called a correct float32 ring WRONG
    assert main(["collective", "all_reduce", "--devices", "8", "--size", "1000", "--dtype", "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] and out["check"] == "summation error bound" and out["max_abs_error_vs_float64"] > 0


def test_bound_catches_an_error_just_outside_it():
    xs = _inputs(8, 100, "float32")
    want64 = reference("all_reduce", [x.astype(np.float64) for x in xs])
    scale = sum(np.abs(x.astype(np.float64)) for x in xs)
    bound = gamma(8, unit_roundoff("float32")) + gamma(8, 2.0**-53)
    inside = [(w + 0.5 * bound * scale).astype(np.float32) for w in want64]
    assert check_collective("all_reduce", xs, inside).correct
    outside = [w.copy() for w in want64]
    outside[3] = (want64[3] + 3 * bound * scale).astype(np.float32)
    outside = [o.astype(np.float32) for o in outside]
    v = check_collective("all_reduce", xs, outside)
    assert not v.correct and "rank 3" in v.reason and "summation bound" in v.reason


@pytest.mark.parametrize("kind", ["all_gather", "broadcast", "all_to_all"])
def test_data_movement_is_compared_bit_for_bit(kind):
    xs = _inputs(4, 12, "float32")
    outs, _, _ = collective(kind, xs)
    assert check_collective(kind, xs, outs).exact and check_collective(kind, xs, outs).correct
    bad = [o.copy() for o in outs]
    bad[1][5] = np.nextafter(bad[1][5], np.float32(np.inf))  # one ulp off
    v = check_collective(kind, xs, bad)
    assert not v.correct and "exactly" in v.reason


def test_max_and_min_are_exact():
    xs = _inputs(5, 30, "float16")
    for op in ("max", "min"):
        outs, _, _ = collective("all_reduce", xs, algo="ring", op=op)
        v = check_collective("all_reduce", xs, outs, op=op)
        assert v.exact and v.correct and v.max_abs_error_vs_float64 == 0


def test_nan_in_a_result_is_wrong():
    xs = _inputs(4, 10, "float64")
    outs, _, _ = collective("all_reduce", xs)
    outs[2] = outs[2].copy()
    outs[2][0] = np.nan
    v = check_collective("all_reduce", xs, outs)
    assert not v.correct and "NaN" in v.reason


def test_python_api_refuses_bad_groups_in_one_line():
    with pytest.raises(ParasimError, match="at least one rank"):
        collective("all_reduce", [])
    with pytest.raises(ParasimError, match="root 5 is not a rank"):
        collective("broadcast", [np.ones(3)] * 2, root=5)
    with pytest.raises(ParasimError, match="equal shapes"):
        collective("all_reduce", [np.ones(3), np.ones(4)])
    with pytest.raises(ParasimError, match="one dtype"):
        collective("all_reduce", [np.ones(3), np.ones(3, dtype=np.float32)])


def test_make_plan_bounds_its_size_up_front():
    with pytest.raises(ParasimError, match="199,980,000 chunk transfers"):
        make_plan("all_reduce", "ring", 10**4, 8)
    assert len(make_plan("broadcast", "tree", 10**4, 8).steps) == 14  # a tree stays cheap
    with pytest.raises(ParasimError, match=">= 0 bytes"):
        make_plan("all_reduce", "ring", 4, -8)
    with pytest.raises(ParasimError, match=">= 0 elements"):
        make_plan("all_gather", "ring", 2, sizes=[3, -1])
