"""MoE routing groups (`MoEGPTConfig.routing_groups`): capacity per group of s / g positions, the
groups a g-way ring context split gives each rank. With g = cp every context rank routes its own
tokens with its own capacity and exchanges no choices, as Megatron-Core does; one device routes the
same groups, so every strategy still equals one device."""

import numpy as np
import pytest

from simulator.errors import ParasimError
from simulator.models import build_model
from simulator.parallel.config import TrainConfig
from simulator.parallel.cp_split import chunk_positions
from simulator.parallel.experts import MoEGPTConfig
from simulator.parallel.strategies import compile_strategy
from simulator.program import Collective
from simulator.training import train

# capacity factor 0.75: the capacity binds, so how tokens are grouped changes which are dropped
MOE = dict(layers=2, hidden=8, heads=2, seq_len=8, vocab=16, experts=4, top_k=2, capacity_factor=0.75)
G2 = MoEGPTConfig(**MOE, routing_groups=2)


@pytest.mark.parametrize("kw", [
    dict(strategy="cp", devices=2, cp=2, global_batch=2),
    dict(strategy="ep", devices=2, ep=2, global_batch=2),
    dict(strategy="dp", devices=2, global_batch=4),
    dict(strategy="hybrid", devices=8, dp=2, cp=2, pp=2, ep=2, global_batch=4, microbatches=2),
    dict(strategy="hybrid", devices=4, cp=2, tp=2, global_batch=2),
])
def test_every_strategy_with_routing_groups_equals_one_device(kw):
    r = train(TrainConfig(model=G2, steps=2, **kw))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    np.testing.assert_allclose(r.losses, r.reference_losses, rtol=1e-9)


def test_a_group_fills_its_own_capacity_and_the_grouping_changes_what_is_dropped():
    one = build_model(MoEGPTConfig(**MOE)).layers[1]
    two = build_model(G2).layers[1]
    # C = ceil(0.75 x 2 x 8 / 4) = 3 slots per sequence and expert; two groups of 4 positions,
    # ceil(0.75 x 2 x 4 / 4) = 2 each
    assert (one.capacity, two.group_capacity, two.capacity) == (3, 2, 4)
    assert two.groups == tuple(chunk_positions(8, 2)) == ((0, 1, 6, 7), (2, 3, 4, 5))
    params = one.init(np.random.default_rng(0))
    x = np.random.default_rng(1).normal(size=(3, 8, 8))
    dropped = [layer.forward(params, x)[1]["stats"][-1] for layer in (one, two)]
    assert dropped[0] != dropped[1]


def test_with_routing_groups_the_context_ranks_exchange_no_choices():
    def cp_collectives(model):
        c = compile_strategy(TrainConfig(model=model, strategy="cp", devices=2, cp=2, global_batch=2))
        return {i.tag for i in c.program.code[0] if isinstance(i, Collective) and "choices" in i.tag}
    assert cp_collectives(MoEGPTConfig(**MOE))          # one group per sequence: the choices are gathered
    assert not cp_collectives(G2)


@pytest.mark.parametrize("model,kw,words", [
    (dict(routing_groups=3), dict(strategy="dp", devices=1), "2g = 6 equal chunks"),
    (dict(routing_groups=0), dict(strategy="dp", devices=1), "positive integer"),
    (dict(routing_groups=4), dict(strategy="cp", devices=2, cp=2), "run it with cp = 4"),
    (dict(routing_groups=2), dict(strategy="cp", devices=2, cp=2, cp_comm_type="a2a"), "cp_comm_type p2p"),
])
def test_routing_groups_the_split_cannot_serve_are_refused_in_one_line(model, kw, words):
    with pytest.raises(ParasimError, match=words) as e:
        TrainConfig(model=MoEGPTConfig(**{**MOE, **model}), global_batch=2, **kw).resolved()
    assert "\n" not in str(e.value)


def test_the_cli_sets_routing_groups(capsys):
    from simulator.cli import main

    assert main(["train", "--model", "moe", "--strategy", "cp", "--devices", "2", "--cp", "2", "--routing-groups", "2",
                 "--steps", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"routing_groups": 2' in out
