"""Auto-parallel runs equal the single-device run: loss, output, gradients, trained weights."""

import numpy as np
import pytest
from auto_helpers import assert_same

from simulator.auto import ops
from simulator.auto.context import AutoParallelContext
from simulator.auto.graph import Network
from simulator.auto.run import standalone, train
from simulator.auto.strategy import MsLayout
from simulator.runtime import LocalRuntime


def mlp(s1=None, s2=None, s3=None, s_loss=None, out2=None, seed=0, n=16, d=8, f=12, c=4):
    rng = np.random.default_rng(seed)
    net = Network("mlp")
    x = net.input("x", (n, d))
    lab = net.input("labels", (n,), dtype="int64")
    w1 = net.parameter("w1", rng.standard_normal((d, f)) / 3)
    b1 = net.parameter("b1", rng.standard_normal(f))
    w2 = net.parameter("w2", rng.standard_normal((f, c)) / 3)
    mm1 = ops.MatMul()
    if s1:
        mm1.shard(s1)
    h = mm1(x, w1)
    badd = ops.BiasAdd()
    if s3:
        badd.shard(s3)
    h = ops.GeLU()(badd(h, b1))
    mm2 = ops.MatMul()
    if s2:
        mm2.shard(s2, out2)
    y = mm2(h, w2)
    loss = ops.SoftmaxCrossEntropy()
    if s_loss:
        loss.shard(s_loss)
    loss(y, lab)
    feeds = {"x": rng.standard_normal((n, d)), "labels": rng.integers(0, c, n)}
    return net, feeds


@pytest.fixture(scope="module")
def rt8():
    return LocalRuntime(8)


@pytest.mark.parametrize("s1, s2, out2, mean", [
    (((2, 4), (4, 1)), ((2, 4), (4, 1)), None, False),           # K cut: forward AllReduce
    (((2, 1), (1, 4)), ((2, 4), (4, 1)), None, True),            # Megatron-like column then row
    (((2, 1), (1, 4)), ((2, 4), (4, 1)), ((8, 1),), False),      # ReduceScatter output
    (((2, 1), (1, 2)), ((1, 2), (2, 2)), None, True),            # repeated calculation (rep 2)
    (((1, 1), (1, 1)), ((4, 1), (1, 1)), None, False),           # replicated then 4-way dp, rep 2
    (((8, 1), (1, 1)), ((1, 4), (4, 2)), None, True),            # mismatched layouts: AllToAll etc.
])
def test_mlp_matches_standalone(rt8, s1, s2, out2, mean):
    net, feeds = mlp(s1, s2, out2=out2)
    ref = standalone(net, feeds, steps=2)
    ctx = AutoParallelContext("semi_auto_parallel", 8, gradients_mean=mean)
    res = train(net, ctx, feeds, runtime=rt8, steps=2)
    assert_same(res, ref)
    assert len(res.losses) == 2 and res.losses[1] < res.losses[0]


def test_data_parallel_and_sharding_propagation(rt8):
    net, feeds = mlp(((2, 1), (1, 4)))
    ref = standalone(net, feeds, steps=2)
    for mode in ("data_parallel", "auto_parallel"):
        res = train(net, AutoParallelContext(mode, 8, gradients_mean=True), feeds, runtime=rt8, steps=2)
        assert_same(res, ref)
    plan = train(net, AutoParallelContext("auto_parallel", 8), feeds, runtime=rt8).plan
    # propagation: the bias add next to the user-sharded MatMul copies its cuts (no redistribution)
    assert plan.nodes[1].sharding.strategy == ((2, 4), (4,))
    assert all(not s.is_comm for s in plan.nodes[1].in_steps[0])


def test_layout_objects_and_six_devices():
    layout = MsLayout((3, 2), ("dp", "mp"))
    net, feeds = mlp((layout("dp", "None"), layout("None", "mp")), ((3, 2), (2, 1)), n=12, f=10)
    ref = standalone(net, feeds, steps=2)
    res = train(net, AutoParallelContext("semi_auto_parallel", 6), feeds, runtime=LocalRuntime(6), steps=2)
    assert_same(res, ref)


def test_transformer_ops_match_standalone(rt8):
    rng = np.random.default_rng(3)
    net = Network("block")
    x = net.input("x", (4, 8, 16))
    tgt = net.input("t", (32, 6))
    g = net.parameter("g", 1 + rng.standard_normal(16) / 5)
    b = net.parameter("b", rng.standard_normal(16) / 5)
    wq = net.parameter("wq", rng.standard_normal((16, 16)) / 4)
    c = net.parameter("c", rng.standard_normal(16) / 5)
    wz = net.parameter("wz", rng.standard_normal((4, 6)) / 2)
    h = ops.LayerNorm().shard(((2, 4, 1), (1,), (1,)))(x, g, b)
    q = ops.BatchMatMul().shard(((2, 2, 1), (1, 2)))(h, wq)  # 2-d weight shared by the batch
    a = ops.Softmax().shard(((4, 2, 1),))(q)
    t = ops.Transpose((1, 0, 2)).shard(((2, 2, 2),))(a)  # (8, 4, 16)
    s = ops.ReduceMean(axis=1).shard(((2, 2, 2),))(t)  # the reduced axis is cut: AllReduce
    s = ops.ReLU()(ops.Add()(s, c))  # (8, 16)
    r = ops.Reshape((32, 4))(s)
    y = ops.MatMul().shard(((2, 4), (4, 1)))(r, wz)  # (32, 6)
    ops.MSELoss()(y, tgt)
    feeds = {"x": rng.standard_normal((4, 8, 16)), "t": rng.standard_normal((32, 6))}
    ref = standalone(net, feeds, steps=2)
    res = train(net, AutoParallelContext("semi_auto_parallel", 8, gradients_mean=True), feeds,
                runtime=rt8, steps=2)
    assert_same(res, ref)


def test_standalone_gradient_matches_finite_differences():
    net, feeds = mlp(n=6, d=4, f=5, c=3)
    ref = standalone(net, feeds, steps=1)
    w0 = dict(net.params)
    eps = 1e-6
    for p in ("w1", "b1"):
        idx = (0,) * w0[p].ndim
        num = []
        for sign in (1, -1):
            net.params[p] = w0[p].copy()
            net.params[p][idx] += sign * eps
            num.append(standalone(net, feeds, steps=1, train_=False).losses[0])
        net.params[p] = w0[p]
        assert abs((num[0] - num[1]) / (2 * eps) - ref.grads[p][idx]) < 1e-6


def test_feed_errors():
    net, feeds = mlp()
    with pytest.raises(Exception, match="labels"):
        standalone(net, {"x": feeds["x"]})


@pytest.mark.ray
def test_init_starts_ray_devices_by_default(ray_session):
    from simulator.auto import init

    rt = init(device_num=2)
    try:
        assert rt.name == "ray" and rt.n_devices == 2
    finally:
        rt.close()
