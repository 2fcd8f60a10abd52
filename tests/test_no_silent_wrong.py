"""No silent wrong answer: NaN/inf or a mismatch with one device fails the check and the exit code."""

import json
import math

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.models import GPTConfig
from simulator.parallel.config import TrainConfig
from simulator.training import max_rel_diff, train

TINY = ["--layers", "2", "--hidden", "8", "--heads", "2", "--seq", "4", "--vocab", "8"]


def test_max_rel_diff_never_ignores_nan_or_inf():
    a = [{"w": np.array([1.0, 2.0])}]
    assert max_rel_diff(a, a) == 0
    for bad in (np.nan, np.inf, -np.inf):
        b = [{"w": np.array([1.0, bad])}]
        assert max_rel_diff(b, a) == math.inf and max_rel_diff(a, b) == math.inf
    assert max_rel_diff(a, [{"w": np.ones(3)}]) == math.inf  # another shape is no match either
    assert max_rel_diff(a, [{"v": np.ones(2)}]) == math.inf


def test_a_diverged_run_fails_and_exits_1(capsys):
    code = main(["train", *TINY, "--optimizer", "sgd", "--lr", "1e300", "--steps", "3", "--json"])
    err = capsys.readouterr()
    out = json.loads(err.out)  # pure JSON: NaN is written as null
    assert code == 1 and out["matches_single_device"] is False and None in out["losses"]
    assert err.err.startswith("error: the loss became nan") and err.err.count("\n") == 1
    # one device diverges at the same step: a failed run, not a wrong parallel one
    assert out["diverged_as_one_device"] is True and None in out["reference_losses"]
    assert "as one device's does at the same step" in err.err and "parallel run is wrong" not in err.err
    assert main(["train", *TINY, "--optimizer", "sgd", "--lr", "1e300", "--steps", "3"]) == 1
    assert ": DIVERGED, as one device does" in capsys.readouterr().out


def test_a_matching_run_reports_ok():
    r = train(TrainConfig(GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8), strategy="dp", devices=2))
    assert r.check_failure() is None and r.to_dict()["matches_single_device"]


def test_a_lower_precision_wire_is_measured_not_called_a_match(capsys):
    """float16 gradients on the wire differed by 0.11 and printed "(matches)", exit 0, matches: true."""
    base = ["train", "--strategy", "dp", "--devices", "4", "--grad-dtype", "float16", "--steps", "3"]
    assert main(base) == 0
    assert ": measured only: lower-precision gradients on the wire" in capsys.readouterr().out
    assert main([*base, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches_single_device"] is None and out["check"].startswith("measured only: float16 gradients")
    assert 1e-9 < out["max_rel_weight_diff_vs_single"]


def test_a_wire_format_nobody_uses_keeps_the_float64_check(capsys):
    """--grad-dtype float16 on a pipeline without data-parallel replicas casts nothing: the 1e-9 check
    holds (it was skipped, and a diverged run's 1.23 difference printed "(matches)")."""
    pp = ["train", "--strategy", "pp", "--devices", "2", "--microbatches", "2", "--grad-dtype", "float16",
          "--steps", "3", "--json"]
    assert main(pp) == 0 and json.loads(capsys.readouterr().out)["matches_single_device"] is True
    assert main([*pp, "--lr", "1e6"]) == 1
    err = capsys.readouterr().err
    assert "more than the 1e-09 float64 allows; the loss grew" in err and "a diverging run" in err


def test_a_resume_with_another_batch_does_not_match(tmp_path, capsys):
    base = ["train", *TINY, "--strategy", "dp", "--devices", "2", "--json"]
    assert main(base + ["--steps", "2", "--checkpoint-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(base + ["--steps", "3", "--batch", "16", "--resume", str(tmp_path)]) == 2  # refused before any work
    out = capsys.readouterr()
    assert not out.out and "was written by another run: its global_batch 8 differs from this run's (16)" in out.err


@pytest.mark.parametrize("field,value,msg", [
    ("lr", math.inf, "learning rate"), ("lr", math.nan, "learning rate"), ("bucket_mb", math.inf, "bucket size"),
    ("devices", True, "devices must be a positive integer"), ("seed", -1, "seed"), ("ep", 2, "--ep 2"),
    ("steps", 10**9, "bounded"),
])
def test_config_values_refused_in_one_line(field, value, msg):
    with pytest.raises(ParasimError, match=msg):
        TrainConfig(GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8), **{"strategy": "dp", "devices": 2,
                                                                                   field: value})
