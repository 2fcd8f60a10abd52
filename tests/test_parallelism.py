"""One value for a parallel configuration: TrainConfig (runtime) and ParallelConfig (cost model)
hold the same `Parallelism`, each shared rule is refused by it with the same line, and ranks and
groups come from DeviceMesh."""

import pytest

from simulator import GPTConfig, ParallelConfig, ParasimError, TrainConfig
from simulator.mesh import DeviceMesh
from simulator.parallel.degrees import Parallelism

GPT = GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32)


def test_both_configurations_hold_the_same_value():
    run = TrainConfig(GPT, strategy="hybrid", devices=8, dp=2, pp=2, tp=2, microbatches=4, global_batch=16,
                      schedule="interleaved", virtual_stages=2)
    cost = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=2, global_batch=16, schedule="interleaved",
                          virtual_stages=2)
    assert run.parallelism == cost.parallelism == Parallelism(dp=2, tp=2, pp=2, microbatches=4,
                                                               virtual_stages=2, schedule="interleaved")
    assert run.resolved().parallelism.mesh == cost.mesh == DeviceMesh.megatron(tp=2, dp=2, pp=2)


def test_cost_ranks_and_groups_are_the_mesh_ones():
    cfg = ParallelConfig(tp=2, pp=2, dp=4, cp=2, ep=2, global_batch=8)
    mesh = cfg.mesh
    assert mesh == DeviceMesh.megatron(tp=2, cp=2, dp=4, pp=2) and mesh.size == cfg.gpus == 32
    for k in range(2):
        for j in range(4):
            for q in range(2):
                for i in range(2):
                    assert cfg.rank(i, j, k, q) == mesh.rank_at({"pp": k, "dp": j, "ep": 0, "cp": q, "tp": i})
    assert tuple(cfg.tp_group()) in mesh.groups("tp")
    assert tuple(cfg.cp_group()) in mesh.groups("cp")
    assert tuple(cfg.dp_group()) in mesh.groups("dp")
    assert tuple(cfg.dp_cp_group()) in mesh.groups(("dp", "cp"))
    # the cost model's expert group is the runtime's (Megatron-Core's), with and without cp
    for flat in (ParallelConfig(tp=2, pp=2, dp=4, ep=2, global_batch=8),
                 ParallelConfig(tp=2, pp=2, dp=2, cp=2, ep=4, global_batch=8)):
        assert tuple(flat.ep_group()) in flat.parallelism.expert_mesh.groups("ep")


def test_the_runtime_and_the_cost_model_refuse_ep_that_does_not_divide_dp_x_cp():
    with pytest.raises(ParasimError, match=r"etp x ep = 1 x 3 = 3 to divide the tp x cp x dp = 1 x 2 x 2 = 4"):
        Parallelism(dp=2, cp=2, ep=3)
    with pytest.raises(ParasimError, match=r"etp x ep = 1 x 3 = 3 to divide the tp x cp x dp = 1 x 1 x 2 = 2"):
        ParallelConfig(dp=2, ep=3, global_batch=2)


@pytest.mark.parametrize("run, cost, words", [
    (dict(zero_stage=5), dict(zero_stage=5), "ZeRO stage must be 0, 1, 2 or 3, got 5"),
    (dict(schedule="interleaved", virtual_stages=2, microbatches=5, global_batch=10),
     dict(schedule="interleaved", virtual_stages=2, global_batch=5),
     r"max\(1, m // p\) = 2 rounds of equal size: m = 5 with p = 2 is not a multiple of 2"),
    (dict(virtual_stages=2, microbatches=2, global_batch=4), dict(virtual_stages=2, global_batch=2),
     r"virtual stages \(2\) need a schedule with several chunks per device \(interleaved, .*\), not 1f1b"),
    (dict(tp=0), dict(tp=0), "tp must be a positive integer, got 0"),
])
def test_a_shared_rule_is_refused_with_one_line_by_both(run, cost, words):
    with pytest.raises(ParasimError, match=words):
        TrainConfig(GPT, strategy="pp", devices=2, **run).resolved()
    with pytest.raises(ParasimError, match=words):
        ParallelConfig(pp=2, **cost)


def test_every_strategy_has_a_compiler():
    """compile_strategy looks the compiler up directly: TrainConfig accepts only STRATEGIES."""
    from simulator.parallel.config import STRATEGIES
    from simulator.parallel.strategies import COMPILERS

    assert set(COMPILERS) == set(STRATEGIES)
    with pytest.raises(ParasimError, match="unknown strategy 'magic'"):
        TrainConfig(GPT, strategy="magic")
