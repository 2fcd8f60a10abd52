"""parasim's schedules beside PyTorch's and DeepSeek's (tests/pipeline_references.py: their per-rank
action orders, recorded from torch 2.14.1 and DualPipe 3da1bbe, and unit-time figures)."""

import pytest
from pipeline_references import CASES, DUALPIPE_COMMIT, TORCH_VERSION

from simulator import make_schedule, simulate_schedule, time_schedule
from simulator.parallel.schedule_check import format_schedule, parse_schedule, validate

IDS = [f"{c['schedule']}-p{c['p']}-m{c['m']}" for c in CASES]


def test_sources_are_named():
    assert TORCH_VERSION == "2.14.1" and DUALPIPE_COMMIT.startswith("3da1bbe")
    assert {c["schedule"] for c in CASES} == {"interleaved", "looped-bfs", "interleaved-zb", "zb-v", "dualpipev"}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rank_by_rank_the_same_actions_in_the_same_order(case):
    sched = make_schedule(case["schedule"], case["p"], case["m"], 2)
    assert [" ".join(map(repr, row)) for row in sched.actions] == case["rows"]
    validate(sched)
    again = parse_schedule(format_schedule(sched), v=2)  # the text form keeps the V placement
    assert again.stage_map == sched.stage_map and [list(map(repr, r)) for r in again.actions] == \
        [list(map(repr, r)) for r in sched.actions]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_unit_time_figures(case):
    want = case["parasim"]
    sched = make_schedule(case["schedule"], case["p"], case["m"], 2)
    r = simulate_schedule(sched, 1.0, 1.0, want["t_w"])
    assert r.makespan == want["makespan"]
    assert list(r.bubble_time) == want["idle"]
    assert list(r.peak_in_flight) == want["peak_in_flight"]
    if "torch_grid_slots" in case:  # PyTorch's grid: never shorter than the dependencies allow
        assert max(case["torch_grid_slots"]) >= r.makespan


def test_pytorch_grid_beside_parasim_recorded():
    """PyTorch's grid equals parasim's execution for looped BFS, interleaved zero bubble and ZB-V
    with m >= 2p - 1; its Interleaved1F1B grid is 8 slots longer at p = 4 (6 at p = 3): the
    alignment no-ops it pads before each cooldown backward; ZB-V at m = 5 < 2p - 1 keeps the
    slots of the dropped micro-batches (45 against 34)."""
    gap = {(c["schedule"], c["p"], c["m"]): max(c["torch_grid_slots"]) - c["parasim"]["makespan"]
           for c in CASES if "torch_grid_slots" in c}
    assert gap == {("interleaved", 4, 8): 8, ("interleaved", 4, 10): 8, ("interleaved", 4, 6): 8,
                   ("interleaved", 4, 4): 8, ("interleaved", 3, 5): 6, ("looped-bfs", 4, 8): 0,
                   ("looped-bfs", 3, 5): 0, ("interleaved-zb", 4, 8): 0, ("interleaved-zb", 4, 10): 0,
                   ("interleaved-zb", 3, 3): 0, ("zb-v", 4, 8): 0, ("zb-v", 4, 5): 11, ("zb-v", 3, 9): 0}


def test_interleaved_with_m_not_a_multiple_of_p_keeps_the_bubble():
    """p 4, v 2: the per-device idle is (p-1)(F+B+W)/v at m 6, 8 and 10 alike (PyTorch runs them all)."""
    idle = {m: max(time_schedule("interleaved", 4, m, 2, 1.0, 1.0, 1.0).bubble_time) for m in (6, 8, 10)}
    assert idle == {6: 4.5, 8: 4.5, 10: 4.5}
