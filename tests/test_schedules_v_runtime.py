"""The schedules PyTorch ships beyond parasim's first six (looped BFS, interleaved zero bubble, ZB-V,
DualPipeV) and interleaving with m % p != 0, executed for real on both runtimes and priced on the
event clock; V-shaped placement hand-written in the schedule text."""

import pytest

from simulator import GPTConfig, TrainConfig, train
from simulator.errors import ParasimError
from simulator.parallel.schedule_check import format_schedule, parse_schedule
from simulator.parallel.schedule_registry import make_schedule

GPT = GPTConfig(layers=8, hidden=16, heads=4, seq_len=8, vocab=16)
NEW = [("looped-bfs", 10), ("interleaved-zb", 10), ("zb-v", 10), ("dualpipev", 8), ("interleaved", 10),
       ("interleaved", 6)]


def _cfg(name, m, dp=1):
    return TrainConfig(GPT, strategy="pp" if dp == 1 else "hybrid", devices=4 * dp, pp=4, dp=dp, schedule=name,
                       virtual_stages=2, microbatches=m, global_batch=2 * m * dp, steps=2)


@pytest.mark.parametrize("name,m", NEW)
def test_trains_like_one_device_in_process(name, m):
    r = train(_cfg(name, m))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.to_dict()["schedule"] == name
    assert r.trace.makespan_s > 0  # priced on the event clock


@pytest.mark.parametrize("name,m", [("zb-v", 10), ("dualpipev", 8)])
def test_trains_like_one_device_on_ray(name, m, ray_runtime):
    r = train(_cfg(name, m, dp=2), runtime=ray_runtime)  # pp 4 x dp 2 on the session's 8 actors
    assert r.max_rel_weight_diff_vs_single < 1e-9


def test_zb_v_places_stages_in_a_v_and_the_runtime_follows():
    sched = make_schedule("zb-v", 4, 8, 2)
    assert sched.stage_map == ((0, 7), (1, 6), (2, 5), (3, 4)) and sched.placement == "v"
    r = train(_cfg("zb-v", 8))
    holds = {rank: sorted({int(n.split("/")[1]) for n in names if n.startswith("param/")})
             for rank, names in r.compiled.initial.items()}
    stages = r.compiled.notes["stages"]
    assert holds[0] == sorted(stages[0] + stages[7]) and holds[3] == sorted(stages[3] + stages[4])


def test_a_hand_written_v_schedule_runs():
    text = format_schedule(make_schedule("zb-v", 2, 4, 2))
    assert text.splitlines()[0] == "placement: v"
    r = train(TrainConfig(GPT, strategy="pp", devices=2, schedule="zb-v", virtual_stages=2, microbatches=4, global_batch=8,
                          schedule_text=text, steps=1))
    assert r.max_rel_weight_diff_vs_single < 1e-9


def test_bad_placement_is_refused_in_one_line():
    with pytest.raises(ParasimError, match=r"line 1: write 'placement: loop or v' or one group of v=2"):
        parse_schedule("placement: w\nF0 F0.1 BW0.1 BW0", v=2)
    with pytest.raises(ParasimError, match=r"the model stages 0..3 once each"):
        parse_schedule("placement: 0 1, 1 2\nF0 F0.1 BW0.1 BW0\nF0 F0.1 BW0.1 BW0", v=2)


def test_the_sweep_runs_the_new_schedules_from_the_registry():
    from simulator import sweep

    t = sweep("schedule", {"p": 4, "m": 8, "v": 2, "t_w": 1.0},
              schedule=["looped-bfs", "interleaved-zb", "zb-v", "dualpipev"])
    assert [r["schedule"] for r in t.records] == ["looped-bfs", "interleaved-zb", "zb-v", "dualpipev"]
    # times are a device's: each of the two chunks takes half (the makespans of the unit-time
    # figures checked against PyTorch, 57 and 51 at t_b = t_w = 1, halved)
    assert [r["makespan"] for r in t.records] == [28.5, 25.5, 25.5, 25.5]
