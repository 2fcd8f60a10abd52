"""Pipeline parallelism in simulator.auto: 8 devices, 2 stages of 4, shard strategies inside the
stages, GPipe and 1F1B over micro-batches, equal to the stand-alone run (float64, rel 1e-9)."""

import numpy as np
import pytest
from auto_helpers import assert_same

from simulator.auto import ops
from simulator.auto.context import AutoParallelContext, set_auto_parallel_context
from simulator.auto.explain import explain
from simulator.auto.graph import Network
from simulator.auto.pipeline import assign_stages, build_pipeline_plan
from simulator.auto.run import standalone, train
from simulator.errors import ParasimError
from simulator.program import Collective, Compute, Recv, Send
from simulator.runtime import LocalRuntime


def mlp4(strategies, seed=0, n=16, d=8, f=12, c=4, stages=None):
    """x -> MatMul, ReLU, MatMul, ReLU, MatMul, ReLU, MatMul -> SoftmaxCrossEntropy (8 operators)."""
    rng = np.random.default_rng(seed)
    net = Network("mlp4")
    h = net.input("x", (n, d))
    lab = net.input("labels", (n,), dtype="int64")
    sizes = [d, f, f, f, c]
    for i, s in enumerate(strategies):
        w = net.parameter(f"w{i}", rng.standard_normal((sizes[i], sizes[i + 1])) / 3)
        mm = ops.MatMul()
        if s:
            mm.shard(s)
        if stages:
            mm.pipeline_stage = stages[i]
        h = mm(h, w)
        if i < len(strategies) - 1:
            relu = ops.ReLU()
            if stages:
                relu.pipeline_stage = stages[i]
            h = relu(h)
    loss = ops.SoftmaxCrossEntropy()
    if stages:
        loss.pipeline_stage = stages[-1]
    loss(h, lab)
    return net, {"x": rng.standard_normal((n, d)), "labels": rng.integers(0, c, n)}


STRATS = [((2, 1), (1, 2)), ((2, 2), (2, 1)), ((1, 4), (4, 1)), ((4, 1), (1, 1))]


@pytest.fixture(scope="module")
def rt8():
    return LocalRuntime(8)


def ctx(**kw):
    base = dict(pipeline_stages=2, micro_size=4)
    return AutoParallelContext("semi_auto_parallel", 8, **(base | kw))


@pytest.mark.parametrize("scheduler, mean, micro", [("gpipe", False, 4), ("1f1b", True, 4),
                                                     ("1f1b", False, 2), ("gpipe", True, 8)])
def test_pipeline_matches_standalone(rt8, scheduler, mean, micro):
    net, feeds = mlp4(STRATS, n=4 * micro)  # one micro-batch's rows still cut 4 ways
    ref = standalone(net, feeds, steps=2)
    res = train(net, ctx(pipeline_scheduler=scheduler, gradients_mean=mean, micro_size=micro),
                feeds, runtime=rt8, steps=2)
    assert_same(res, ref)
    assert res.losses[1] < res.losses[0]


def test_explicit_stages_and_with_block_match_standalone(rt8):
    stages = [0, 0, 0, 1]  # three MatMuls on ranks 0-3, the last one and the loss on 4-7
    net, feeds = mlp4(STRATS, stages=stages)
    plan = build_pipeline_plan(net, ctx())
    assert [plan.stage_of[i] for i in range(len(net.nodes))] == [0] * 6 + [1] * 2
    assert_same(train(net, ctx(), feeds, runtime=rt8, steps=2), standalone(net, feeds, steps=2))
    # the same placement with `with net.pipeline_stage(k):` (MindSpore's cell.pipeline_stage)
    rng = np.random.default_rng(1)
    net2 = Network("blocks")
    x, lab = net2.input("x", (8, 6)), net2.input("labels", (8,), dtype="int64")
    with net2.pipeline_stage(0):
        h = ops.ReLU()(ops.MatMul().shard(((4, 1), (1, 1)))(x, net2.parameter("a", rng.standard_normal((6, 8)))))
    with net2.pipeline_stage(1):
        y = ops.MatMul().shard(((4, 1), (1, 1)))(h, net2.parameter("b", rng.standard_normal((8, 3))))
        ops.SoftmaxCrossEntropy()(y, lab)
    feeds2 = {"x": rng.standard_normal((8, 6)), "labels": rng.integers(0, 3, 8)}
    res = train(net2, ctx(micro_size=2), feeds2, runtime=rt8, steps=2)
    assert_same(res, standalone(net2, feeds2, steps=2))
    assert res.plan.boundaries[0].direct  # same layout both sides: blocks go rank i -> i + 4


def test_default_split_is_by_operator_count():
    net, _ = mlp4(STRATS)
    assert assign_stages(net, 2) == (0,) * 4 + (1,) * 4
    assert assign_stages(net, 3) == (0, 0, 0, 1, 1, 1, 2, 2)  # the first n mod S parts get one more


def test_program_has_stage_blocks_and_sends_between_them():
    net, feeds = mlp4(STRATS)
    res = train(net, ctx(), feeds, steps=1)
    prog = res.program
    pairs = {(r, ins.dst) for r, code in enumerate(prog.code) for ins in code if isinstance(ins, Send)}
    back = {(ins.src, r) for r, code in enumerate(prog.code) for ins in code if isinstance(ins, Recv)}
    assert {(i, i + 4) for i in range(4)} <= pairs and {(i + 4, i) for i in range(4)} <= pairs
    assert pairs == back
    groups = {ins.group for code in prog.code for ins in code if isinstance(ins, Collective)}
    assert groups and all(set(g) <= {0, 1, 2, 3} or set(g) <= {4, 5, 6, 7} for g in groups)
    labels = [{ins.label for ins in code if isinstance(ins, Compute)} for code in prog.code]
    assert all("MatMul-0" in labels[r] and "MatMul-3" not in labels[r] for r in range(4))
    assert all("MatMul-3" in labels[r] and "MatMul-0" not in labels[r] for r in range(4, 8))
    sends = [ins for ins in prog.code[0] if isinstance(ins, Send)]
    assert sorted({s.microbatch for s in sends}) == [0, 1, 2, 3]
    prog.validate()


def test_explain_lists_pipeline_sends():
    net, _ = mlp4(STRATS)
    d = explain(net, ctx()).to_dict()
    assert d["stage_ranks"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    sends = [m for m in d["pipeline"] if m["kind"] == "send"]
    fwd = next(m for m in sends if m["operator"] == "stage 0 -> 1")
    assert fwd["groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert any(m["operator"] == "stage 1 -> 0" and m["tensor"].startswith("d") for m in sends)
    assert {o["stage"] for o in d["operators"]} == {0, 1}
    assert all(set(g) <= {4, 5, 6, 7} for m in d["forward"] for g in m["groups"]
               if m["operator"] == "MatMul-3")
    assert "Send/Recv [stage 0 -> 1" in explain(net, ctx()).to_text()


def test_refusals_are_one_line():
    for kw, words in [(dict(pipeline_stages=2, micro_size=1), "micro_size 1 < pipeline_stages 2"),
                      (dict(pipeline_stages=3, micro_size=4), "not a multiple of pipeline_stages 3")]:
        with pytest.raises(ParasimError, match=words) as e:
            AutoParallelContext("semi_auto_parallel", 8, **kw)
        assert "\n" not in str(e.value)
    with pytest.raises(ParasimError, match="micro_size") as e:
        set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, pipeline_stages=4)
    assert "\n" not in str(e.value)
    net, feeds = mlp4(STRATS, n=12)
    with pytest.raises(ParasimError, match="micro_size 8 must divide"):
        train(net, ctx(micro_size=8), feeds)
    net, _ = mlp4(STRATS, stages=[0, 0, 0, 3])
    with pytest.raises(ParasimError, match="stages go from 0 to 1"):
        build_pipeline_plan(net, ctx())
