"""`parasim collective`: runs, checks against the reference, reports bytes and times."""

import json

import pytest

from simulator.cli import main


def _run_json(capsys, *argv):
    rc = main(["collective", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_ring_all_reduce_json(capsys):
    rc, out = _run_json(capsys, "all_reduce", "--devices", "4", "--size", "1000")
    assert rc == 0 and out["correct"] is True
    assert {"kind", "devices", "algo", "correct", "steps", "bytes_sent_per_rank", "total_bytes",
            "simulated_time_s", "wall_time_s"} <= set(out)
    assert out["algo"] == "ring" and out["steps"] == 2 * 3
    assert out["bytes_sent_per_rank"] == [2 * 3 * 8000 // 4] * 4 == out["plan_bytes_sent_per_rank"]
    assert out["total_bytes"] == 4 * 12000 and out["simulated_time_s"] > 0 and out["wall_time_s"] > 0


@pytest.mark.parametrize("argv", [("all_to_all", "--devices", "5", "--size", "13", "--algo", "ring"),
                                  ("reduce_scatter", "--devices", "3", "--size", "7", "--op", "max"),
                                  ("broadcast", "--devices", "6", "--algo", "ring", "--root", "4"),
                                  ("all_reduce", "--devices", "6", "--size", "11", "--algo", "halving_doubling"),
                                  ("barrier", "--devices", "7")])
def test_other_kinds_are_correct_and_plan_bytes_exact(capsys, argv):
    rc, out = _run_json(capsys, *argv)
    assert rc == 0 and out["correct"] is True
    assert out["bytes_sent_per_rank"] == out["plan_bytes_sent_per_rank"]


def test_trace_file_and_text_output(capsys, tmp_path):
    path = tmp_path / "t.json"
    assert main(["collective", "all_gather", "--devices", "3", "--size", "10", "--trace", str(path)]) == 0
    text = capsys.readouterr().out
    assert "all_gather/ring over 3 devices" in text and "correct" in text
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    slices = [e for e in events if e.get("ph") == "X"]
    assert sum(1 for e in slices if e["args"]["kind"] == "all_gather") == 3  # one collective bar per device
    assert sum(1 for e in slices if e["args"]["kind"] == "send") == 6  # and its 2 ring steps x 3 transfers


@pytest.mark.parametrize("argv,msg", [(("gather",), "valid kinds"),
                                      (("all_gather", "--algo", "tree"), "valid: ring, direct"),
                                      (("reduce", "--root", "9", "--devices", "4"), "--root 9"),
                                      (("all_reduce", "--op", "prod"), "valid ops"),
                                      (("all_reduce", "--devices", "100000"), "more than the 256 devices"),
                                      (("all_reduce", "--devices", "8", "--size", "10000000000"),
                                       "inputs and outputs take 16 x --size 10000000000 x 8 B = 1.28 TB, more than the 2 GB"),
                                      (("all_gather", "--devices", "8", "--size", "10000000000"),
                                       "9 x --size 10000000000 x 8 B = 720 GB"),
                                      (("all_gather", "--devices", "64", "--size", "100000000"),  # the 64-fold output counts
                                       "65 x --size 100000000 x 8 B = 52 GB")])
def test_bad_input_is_one_line_exit_2(capsys, argv, msg):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and msg in err and err.count("\n") == 1


@pytest.mark.ray
def test_ray_runtime_from_the_cli(capsys, ray_session):
    rc, out = _run_json(capsys, "all_reduce", "--devices", "3", "--size", "100", "--runtime", "ray")
    assert rc == 0 and out["correct"] is True and out["runtime"] == "ray"
    assert ray_session.is_initialized()  # the shared session is reused, not shut down
