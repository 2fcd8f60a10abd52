"""MindSpore's auto-parallel options: each one runs equal to stand-alone, and a bad value is
refused in one line naming the option and the value."""

import json

import pytest
from auto_helpers import assert_same

from simulator.auto.context import (
    AutoParallelContext,
    get_algo_parameters,
    get_auto_parallel_context,
    reset_algo_parameters,
    reset_auto_parallel_context,
    set_algo_parameters,
    set_auto_parallel_context,
)
from simulator.auto.explain import explain
from simulator.auto.nets import mlp_network
from simulator.auto.optimizer_shard import model_state_bytes_per_rank
from simulator.auto.run import standalone, train
from simulator.auto.strategy_search import search
from simulator.auto.strategy_search.cost import OpCostModel
from simulator.errors import ParasimError
from simulator.model_states import model_state_parts
from simulator.runtime import LocalRuntime

ALL8 = [list(range(8))]
NO_THRESHOLD = {"parallel_optimizer_threshold": 0}


@pytest.fixture(scope="module")
def rt8():
    return LocalRuntime(8)


def comm(e, phase):
    return [(m.kind, m.tensor, [list(g) for g in m.groups], m.bytes_per_rank) for m in e.phase(phase)]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_parallel_optimizer_splits_parameters_and_equals_standalone(rt8, level):
    net, feeds = mlp_network(n=16, d=16, f=16, c=8)
    ref = standalone(net, feeds, steps=2)
    ctx = AutoParallelContext("data_parallel", 8, enable_parallel_optimizer=True,
                              parallel_optimizer_config=dict(NO_THRESHOLD, optimizer_level=f"level{level}"))
    res = train(net, ctx, feeds, runtime=rt8, steps=2)
    assert_same(res, ref)
    # every rank holds 1/8 of each parameter (rows), read back from the devices
    for p, v in net.params.items():
        assert rt8.fetch(3, [f"param/{p}"])[f"param/{p}"].shape == (v.shape[0] // 8,) + v.shape[1:]
    e = explain(net, ctx)
    fwd = [m for m in comm(e, "forward") if m[0] == "all_gather"]
    assert fwd == [("all_gather", "w1", ALL8, 16 * 16), ("all_gather", "b1", ALL8, 16),
                   ("all_gather", "w2", ALL8, 16 * 8)]
    assert comm(e, "parameter_gradient") == [("reduce_scatter", "dw1", ALL8, 16 * 16 * 8),
                                             ("reduce_scatter", "db1", ALL8, 16 * 8),
                                             ("reduce_scatter", "dw2", ALL8, 16 * 8 * 8)]
    regather = [m for m in comm(e, "backward") if m[0] == "all_gather"]
    assert len(regather) == (3 if level == 3 else 0)
    # memory per rank = ZeRO stage `level` of simulator/model_states.py (fp64 recipe)
    n_params = sum(v.size for v in net.params.values())
    want = model_state_parts(n_params, 8, level, "fp64")
    got = model_state_bytes_per_rank(res.plan)
    assert (got["parameters"], got["gradients"], got["optimizer_states"]) == pytest.approx(want)
    assert e.to_dict()["model_state_bytes_per_rank"] == got


def test_parallel_optimizer_inside_model_parallel_and_its_config(rt8):
    # MatMul ((2, 1), (1, 4)): w1 is repeated over the 2-way dimension only -> split 2 ways
    net, feeds = mlp_network(n=16, d=16, f=16, c=8)
    net.nodes[0].op.shard(((2, 1), (1, 4)))
    ref = standalone(net, feeds, steps=2)
    ctx = AutoParallelContext("semi_auto_parallel", 8, enable_parallel_optimizer=True,
                              parallel_optimizer_config=NO_THRESHOLD)
    assert_same(train(net, ctx, feeds, runtime=rt8, steps=2), ref)
    gath = next(m for m in explain(net, ctx).phase("forward") if m.tensor == "w1")
    assert gath.kind == "all_gather" and [list(g) for g in gath.groups] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # the default threshold (64 KB) leaves these small parameters whole: plain mirror AllReduce
    ctx64 = AutoParallelContext("semi_auto_parallel", 8, enable_parallel_optimizer=True)
    assert {m.kind for m in explain(net, ctx64).phase("parameter_gradient")} == {"all_reduce"}
    # optimizer_weight_shard_size 2 in data parallel: a 1-axis device matrix of 8 has no
    # repeated axes multiplying to 2, so the parameters stay whole (optimizer_shard.py)
    ctx2 = AutoParallelContext("data_parallel", 8, enable_parallel_optimizer=True,
                               parallel_optimizer_config=dict(NO_THRESHOLD, optimizer_weight_shard_size=2))
    assert {m.kind for m in explain(net, ctx2).phase("parameter_gradient")} == {"all_reduce"}


@pytest.mark.parametrize("shard", [False, True])
def test_grad_accumulation_equals_standalone(rt8, shard):
    net, feeds = mlp_network(n=32, d=16, f=16, c=8)
    ref = standalone(net, feeds, steps=2)
    ctx = AutoParallelContext("data_parallel", 8, grad_accumulation_step=2,
                              enable_parallel_optimizer=True,
                              parallel_optimizer_config=dict(NO_THRESHOLD, gradient_accumulation_shard=shard))
    assert_same(train(net, ctx, feeds, runtime=rt8, steps=2), ref)
    rs = [m for m in explain(net, ctx).moves if m.kind == "reduce_scatter" and m.tensor == "dw1"]
    # gradient_accumulation_shard: reduce-scatter each micro-step's gradient (backward) instead of
    # the accumulated one (parameter_gradient)
    assert [m.phase for m in rs] == ["backward" if shard else "parameter_gradient"]
    plain = AutoParallelContext("data_parallel", 8, grad_accumulation_step=4, gradients_mean=True)
    assert_same(train(net, plain, feeds, runtime=rt8, steps=2), ref)


def _semi_mlp():
    net, feeds = mlp_network(n=16, d=8, f=12, c=4)
    net.nodes[0].op.shard(((2, 4), (4, 1)))
    return net, feeds


@pytest.mark.parametrize("ds, x_moves", [
    ("data_parallel", True),  # x loaded cut 8 ways on dim 0, MatMul-0 needs (2, 4): a move
    ("full_batch", False),  # every rank loads all of x: MatMul-0 takes its block locally
    (((2, 4), (8,)), False),  # loaded exactly as MatMul-0 needs it
])
def test_dataset_strategy(rt8, ds, x_moves):
    net, feeds = _semi_mlp()
    ref = standalone(net, feeds, steps=2)
    ctx = AutoParallelContext("semi_auto_parallel", 8, dataset_strategy=ds)
    res = train(net, ctx, feeds, runtime=rt8, steps=2)
    assert_same(res, ref)
    assert any(m.tensor == "x" for m in explain(net, ctx).phase("forward")) == x_moves
    assert res.plan.stored["x"].splits == {"data_parallel": (8, 1), "full_batch": (1, 1)}.get(ds, (2, 4))
    if ds == "full_batch":
        assert AutoParallelContext("semi_auto_parallel", 8, full_batch=True).dataset_strategy == "full_batch"


def test_hybrid_parallel_plans_as_semi_auto(rt8):
    net, feeds = _semi_mlp()
    ctx = AutoParallelContext("hybrid_parallel", 8)
    assert_same(train(net, ctx, feeds, runtime=rt8), standalone(net, feeds))
    semi = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    assert explain(net, ctx).moves == semi.moves


def test_global_rank_shows_its_slices(rt8):
    net, feeds = _semi_mlp()
    ctx = AutoParallelContext("semi_auto_parallel", 8, global_rank=5)
    d = explain(net, ctx).to_dict()
    assert d["global_rank"] == 5 and d["rank_slices"]["w1"] == {"block": [1, 0], "shape": [2, 12]}
    res = train(net, ctx, feeds, runtime=rt8)
    assert rt8.fetch(5, ["param/w1"])["param/w1"].shape == (2, 12)
    assert res.losses


def test_algo_parameters():
    reset_auto_parallel_context()
    set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, search_mode="dynamic_programming")
    net, feeds = mlp_network(n=16, d=8, f=12, c=4)
    full = search(net, get_auto_parallel_context(), OpCostModel())
    set_algo_parameters(fully_use_devices=False)
    assert get_algo_parameters("fully_use_devices") is False
    more = search(net, get_auto_parallel_context(), OpCostModel())
    assert more.n_candidates > full.n_candidates
    # elementwise_op_strategy_follow: GeLU takes the cuts MatMul-1 needs for its input
    set_algo_parameters(elementwise_op_strategy_follow=True)
    net2, feeds2 = mlp_network(n=16, d=8, f=12, c=4)
    net2.nodes[3].op.shard(((1, 4), (4, 2)))
    ctx = set_auto_parallel_context(search_mode="sharding_propagation")
    plan = explain(net2, ctx).plan
    assert plan.nodes[2].sharding.out.splits == (1, 4)
    assert_same(train(net2, ctx, feeds2, runtime=LocalRuntime(8)), standalone(net2, feeds2))
    reset_algo_parameters()
    assert get_algo_parameters("elementwise_op_strategy_follow") is False
    reset_auto_parallel_context()


def test_strategy_checkpoint_round_trip(tmp_path, rt8):
    from simulator.auto.strategy import MsLayout
    path = tmp_path / "strategy.json"
    net, feeds = mlp_network(n=16, d=8, f=12, c=4)
    lay = MsLayout((2, 4), ("dp", "mp"))
    net.nodes[0].op.shard((lay("dp", "None"), lay("None", "mp")))
    net.nodes[3].op.shard(((2, 4), (4, 1)), out_strategy=((8, 1),))
    ctx = AutoParallelContext("auto_parallel", 8, strategy_ckpt_save_file=str(path))
    saved = explain(net, ctx)
    doc = json.loads(path.read_text())
    assert doc["operators"]["MatMul-1"]["in_strategy"] == [[2, 4], [4, 1]]
    assert doc["operators"]["MatMul-1"]["out_strategy"] == [[8, 1]]
    assert doc["operators"]["MatMul-0"]["in_strategy"][1]["tensor_map"] == [[], ["mp"]]
    assert doc["parameters"]["w1"]["param_split_shape"] == [8, 3]
    assert set(doc["operators"]) == {n.label for n in net.nodes}
    # a fresh network without any shard() reproduces the plan from the file
    fresh, _ = mlp_network(n=16, d=8, f=12, c=4)
    load = AutoParallelContext("auto_parallel", 8, strategy_ckpt_load_file=str(path))
    loaded = explain(fresh, load)
    key = [(m.phase, m.op, m.tensor, m.kind, m.groups, m.bytes_per_rank) for m in saved.moves]
    assert [(m.phase, m.op, m.tensor, m.kind, m.groups, m.bytes_per_rank) for m in loaded.moves] == key
    assert_same(train(fresh, load, feeds, runtime=rt8), standalone(fresh, feeds))
    # a file for another device count is refused by the parameter check
    with pytest.raises(ParasimError, match="strategy_ckpt_load_file"):
        explain(mlp_network(n=16, d=8, f=12, c=4)[0],
                AutoParallelContext("auto_parallel", 4, strategy_ckpt_load_file=str(path)))


@pytest.mark.parametrize("text, words", [
    ("not json", ["strategy_ckpt_load_file", "not JSON"]),
    ('{"format": "x"}', ["strategy_ckpt_load_file", "not a parasim strategy checkpoint"]),
    ('{"format": "parasim-strategy-ckpt", "version": 1, "parameters": {}, '
     '"operators": {"MatMul-0": {"op": "MatMul", "in_strategy": "__import__"}}}',
     ["MatMul-0", "in_strategy", "__import__"]),
])
def test_strategy_checkpoint_bad_files(tmp_path, text, words):
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(ParasimError) as e:
        explain(mlp_network()[0], AutoParallelContext("auto_parallel", 8, strategy_ckpt_load_file=str(path)))
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


@pytest.mark.parametrize("kw, words", [
    (dict(enable_parallel_optimizer="yes"), ["enable_parallel_optimizer", "'yes'"]),
    (dict(parallel_optimizer_config={"optimizer_level": "level4"}), ["optimizer_level", "'level4'"]),
    (dict(parallel_optimizer_config={"shard": 2}), ["parallel_optimizer_config", "shard"]),
    (dict(parallel_optimizer_config={"optimizer_weight_shard_size": 0}), ["optimizer_weight_shard_size", "0"]),
    (dict(grad_accumulation_step=0), ["grad_accumulation_step", "0"]),
    (dict(dataset_strategy="model_parallel"), ["dataset_strategy", "model_parallel"]),
    (dict(dataset_strategy="data_parallel", full_batch=True), ["full_batch", "data_parallel"]),
    (dict(global_rank=8), ["global_rank", "8"]),
    (dict(strategy_ckpt_save_file=3), ["strategy_ckpt_save_file", "3"]),
    (dict(parallel_mode="hybrid"), ["parallel_mode", "hybrid"]),
])
def test_bad_option_values_are_refused_in_one_line(kw, words):
    reset_auto_parallel_context()
    with pytest.raises(ParasimError) as e:
        set_auto_parallel_context(**{"parallel_mode": "semi_auto_parallel", "device_num": 8, **kw})
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)
    reset_auto_parallel_context()


def test_bad_dataset_strategy_and_algo_parameters():
    net, _ = _semi_mlp()
    with pytest.raises(ParasimError, match="input 'x' dim 0 of size 16 cannot be split 3 ways"):
        explain(net, AutoParallelContext("semi_auto_parallel", 8, dataset_strategy=((3, 1), (8,))))
    with pytest.raises(ParasimError, match="fully_use_devices must be True or False, got 'no'"):
        set_algo_parameters(fully_use_devices="no")
    with pytest.raises(ParasimError, match="tensor_slice_align_enable"):
        set_algo_parameters(tensor_slice_align_enable=True)
    with pytest.raises(ParasimError, match="unknown option 'devices'"):
        get_auto_parallel_context("devices")
    assert get_auto_parallel_context("parallel_optimizer_config")["optimizer_level"] == "level1"
