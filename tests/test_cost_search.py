"""Configuration search over the analytic model."""

from simulator.cost.analytic import estimate
from simulator.cost.search import search_configs


def test_search_returns_feasible_configs_fastest_first():
    best = search_configs("megatron-18.4b", "a100-80gb", gpus=64, global_batch=256, top=5)
    assert best and len(best) <= 5
    times = [c.result.step_time_s for c in best]
    assert times == sorted(times)
    for c in best:
        assert c.config.gpus == 64 and not c.result.oom
        assert c.result.step_time_s == estimate("megatron-18.4b", c.config, "a100-80gb").step_time_s


def test_search_beats_a_naive_config():
    from simulator.cost.parallel_config import ParallelConfig
    naive = estimate("megatron-7.5b", ParallelConfig(tp=8, pp=4, dp=1, micro_batch_size=1, global_batch=64,
                                                     recompute="full"), "a100-80gb")
    best = search_configs("megatron-7.5b", "a100-80gb", gpus=32, global_batch=64, top=1)[0]
    assert best.result.step_time_s <= naive.step_time_s
