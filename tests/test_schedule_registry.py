"""The pipeline schedules are listed once (simulator.parallel.schedule_registry); every consumer reads it."""

import ast
from pathlib import Path

import pytest

import simulator
from simulator import ParallelConfig, ParasimError, TrainConfig, in_flight_microbatches, simulate_schedule
from simulator.commands.search import SCHEDULES as SEARCH_CLI_SCHEDULES
from simulator.commands.simulate import SCHEDULES as SIMULATE_CLI_SCHEDULES
from simulator.commands.train import SCHEDULES as TRAIN_CLI_SCHEDULES
from simulator.cost.search import search_training
from simulator.cost.search_space import searched
from simulator.parallel.config import SCHEDULES as TRAIN_SCHEDULES
from simulator.parallel.schedule_registry import (
    PRICED_SCHEDULES,
    SCHEDULE_SPECS,
    SCHEDULES,
    SEARCHED_SCHEDULES,
    executed_idle,
    make_schedule,
)

REPO = Path(__file__).resolve().parents[1]
# files allowed a subset, with the reason
SUBSETS = {"simulator/auto/context.py": "MindSpore's pipeline_scheduler option takes only gpipe and 1f1b",
           "simulator/cost/search_cases.py": "a recorded search case (docs/search.md) searching two schedules, "
                                             "as a user's --schedules would"}


def test_every_consumer_lists_the_registry():
    assert SCHEDULES == ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "looped-bfs", "interleaved-zb",
                         "zb-v", "dualpipev")
    assert TRAIN_SCHEDULES == TRAIN_CLI_SCHEDULES == simulator.SCHEDULES == SCHEDULES
    assert SEARCH_CLI_SCHEDULES == SIMULATE_CLI_SCHEDULES == PRICED_SCHEDULES == tuple(
        n for n in SCHEDULES if n != "dualpipe")          # DualPipe's two model copies: run for real only
    # the search's default leaves out the schedules with no bubble floor (their bound would be 0)
    assert search_training.__kwdefaults__["schedules"] is None and searched("schedule", None) == SEARCHED_SCHEDULES
    assert SEARCHED_SCHEDULES == ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2")
    gpt = simulator.GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32)
    for name in SCHEDULES:                       # the runtime's compilers and the config accept each
        v = 2 if SCHEDULE_SPECS[name].virtual_stages else 1
        assert make_schedule(name, 4, 8, v).p == 4
        TrainConfig(gpt, strategy="pp", devices=2, microbatches=4, schedule=name, virtual_stages=v,
                    global_batch=8).resolved()
    for name in SCHEDULES:     # the cost model's configuration takes each (the scale program compiles it;
        # the closed form prices PRICED_SCHEDULES only: tests/test_one_compiler.py)
        ParallelConfig(pp=2, global_batch=8, schedule=name, virtual_stages=SCHEDULE_SPECS[name].chunks_for(2))
    with pytest.raises(ParasimError, match="unknown schedule 'pipedream'"):
        ParallelConfig(pp=2, global_batch=4, schedule="pipedream")


def _schedule_name_lists(path: Path) -> list[int]:
    """Lines of tuple/list/set literals naming two or more schedules (a private copy of the list)."""
    names = set(SCHEDULES)
    out = []
    tree = ast.parse(path.read_text())
    exports = {id(n) for a in tree.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Dict)
               and any(isinstance(t, ast.Name) and t.id == "_API" for t in a.targets) for n in a.value.values}
    for node in ast.walk(tree):
        if id(node) in exports:      # simulator/__init__'s table of exported functions (gpipe(), dualpipe())
            continue
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hits = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
            if len(hits) >= 2:
                out.append(node.lineno)
        elif isinstance(node, ast.Dict):
            hits = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
            if len(hits) >= 2:
                out.append(node.lineno)
    return out


def test_no_other_file_keeps_its_own_list_of_schedules():
    home = REPO / "simulator" / "parallel" / "schedule_registry.py"
    files = [p for p in sorted((REPO / "simulator").rglob("*.py")) if p != home]
    files += sorted((REPO / "app").rglob("*.py"))
    copies = {str(p.relative_to(REPO)): lines for p in files
              if (lines := _schedule_name_lists(p)) and str(p.relative_to(REPO)) not in SUBSETS}
    assert not copies, f"schedule lists outside the registry: {copies}"


@pytest.mark.parametrize("p,m", [(4, 8), (3, 12), (4, 2)])
def test_in_flight_equals_the_simulated_peak(p, m):
    for name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        want = max(simulate_schedule(make_schedule(name, p, m)).peak_in_flight)
        assert in_flight_microbatches(name, p, m) == want, name


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1"])
def test_bubble_closed_form_equals_the_simulated_idle_time(name):
    p, m, F, B, W = 4, 8, 1.0, 1.0, 1.0
    r = simulate_schedule(make_schedule(name, p, m), F, B, W)
    assert SCHEDULE_SPECS[name].bubble(p, m, F, B, W, 1) == pytest.approx(max(r.bubble_time), rel=1e-12)


def test_each_entry_states_the_placement_its_generator_builds():
    for name, spec in SCHEDULE_SPECS.items():
        sched = make_schedule(name, 4, 8, spec.chunks_for(2))
        if not sched.bidirectional:
            assert sched.placement == spec.placement, name
            assert ParallelConfig(pp=4, global_batch=8, schedule=name,
                                  virtual_stages=spec.chunks_for(2)).stage_map == sched.stage_map, name


@pytest.mark.parametrize("name", ["looped-bfs", "interleaved-zb", "zb-v", "dualpipev"])
def test_executed_idle_with_equal_chunks_is_the_executed_bubble(name):
    """Played with each chunk's own times, equal chunks give the equal-stage bubble (`bubble`), and
    a heavier last chunk (the LM head) idles the other devices by what it adds, not its own device."""
    p, m, F, B, W = 4, 8, 1.0, 1.3, 0.7
    spec = SCHEDULE_SPECS[name]
    equal = executed_idle(name, p, m, 2, ((F / 2, B / 2, W / 2),) * (2 * p))
    assert max(equal) == pytest.approx(spec.bubble(p, m, F, B, W, 2), rel=1e-12)
    heavy = ((F / 2, B / 2, W / 2),) * (2 * p - 1) + ((F, B, W),)
    idle = executed_idle(name, p, m, 2, heavy)
    last = ParallelConfig(pp=p, global_batch=m, schedule=name, virtual_stages=2).last_device
    assert idle[last] == min(idle) and max(idle) > max(equal)
    assert last == (0 if spec.placement == "v" else p - 1)


def test_interleaved_bubble_is_divided_by_v():
    p, m, v = 4, 8, 2
    r = simulate_schedule(make_schedule("interleaved", p, m, v), 1 / v, 1 / v, 0.0)
    assert SCHEDULE_SPECS["interleaved"].bubble(p, m, 1.0, 1.0, 0.0, v) == pytest.approx(max(r.bubble_time), rel=1e-12)


def test_constraints_are_checked_once_with_the_numbers():
    SCHEDULE_SPECS["interleaved"].check(4, 6, 2)   # PyTorch runs m % p != 0: one round of 6
    SCHEDULE_SPECS["interleaved"].check(4, 10, 2)  # two rounds of 5
    with pytest.raises(ParasimError, match=r"max\(1, m // p\) = 2 rounds of equal size: m = 7 with p = 3"):
        SCHEDULE_SPECS["interleaved"].check(3, 7, 2)
    with pytest.raises(ParasimError, match=r"zb-v places exactly 2 model chunks per device \(V-shaped\): virtual "
                                           r"stages must be 2, got 3"):
        SCHEDULE_SPECS["zb-v"].check(4, 8, 3)
    with pytest.raises(ParasimError, match=r"dualpipev needs at least 8 micro-batches at p = 4 stages, got 6"):
        SCHEDULE_SPECS["dualpipev"].check(4, 6, 2)
    with pytest.raises(ParasimError, match=r"virtual stages \(2\) need a schedule with several chunks per device "
                                           r"\(interleaved, looped-bfs, interleaved-zb, zb-v, dualpipev\), not 1f1b"):
        SCHEDULE_SPECS["1f1b"].check(4, 8, 2)
