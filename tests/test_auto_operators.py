"""The MindSpore operators of auto/ops_*.py: every legal strategy trains equal to one device
(float64, 1e-9), and the inserted collectives match MindSpore's rules (ops_info sources named
per case); illegal strategies are refused with the rule."""

from math import prod

import numpy as np
import pytest
from auto_helpers import assert_same

from simulator.auto import ops
from simulator.auto.context import AutoParallelContext
from simulator.auto.explain import explain
from simulator.auto.graph import Network
from simulator.auto.run import standalone, train
from simulator.errors import ParasimError

RNG = np.random.default_rng(0)


def _net(shapes, op, strategy, target_shape=None, extra=None):
    """Parameters p0, p1.. of `shapes` -> op(...) -> MSELoss against a fed target (or the op's
    own scalar output). `extra`: inputs (name, array) fed instead of parameters, by position."""
    net = Network(op.name.lower())
    extra = extra or {}
    ins, feeds = [], {}
    for i, s in enumerate(shapes):
        if i in extra:
            name, arr = extra[i]
            ins.append(net.input(name, arr.shape))
            feeds[name] = arr
        else:
            ins.append(net.parameter(f"p{i}", RNG.standard_normal(s) + (2.0 if op.name == "Div" and i == 1 else 0)))
    if strategy is not None:
        op.shard(strategy)
    y = op(*ins)
    if y.shape != ():
        t = net.input("target", y.shape)
        feeds["target"] = RNG.standard_normal(y.shape)
        ops.MSELoss()(y, t)
    return net, feeds


CASES = [  # (operator, input shapes, strategy, devices, inputs fed instead of trained)
    (lambda: ops.Add(), [(4, 1, 8), (6, 8)], ((2, 1, 4), (1, 4)), 8, None),
    (lambda: ops.Sub(), [(4, 6, 8), (8,)], ((2, 1, 4), (4,)), 8, None),
    (lambda: ops.Mul(), [(4, 6, 8), (4, 6, 1)], ((2, 3, 1), (2, 3, 1)), 6, None),
    (lambda: ops.Div(), [(4, 8), (4, 8)], ((4, 2), (4, 2)), 8, None),
    (lambda: ops.Sigmoid(), [(4, 8)], ((2, 4),), 8, None),
    (lambda: ops.Tanh(), [(4, 8)], ((4, 1),), 8, None),
    (lambda: ops.Cast("float64"), [(4, 8)], ((2, 2),), 4, None),
    (lambda: ops.Dropout(0.7, seed=3), [(4, 8)], ((2, 4),), 8, None),
    (lambda: ops.ExpandDims(1), [(4, 8)], ((2, 4),), 8, None),
    (lambda: ops.Tile((1, 4)), [(4, 3)], ((2, 2),), 4, None),
    (lambda: ops.Concat(axis=1), [(4, 3, 8), (4, 5, 8)], ((2, 1, 2), (2, 1, 2)), 4, None),
    (lambda: ops.StridedSlice((0, 1), (4, 7), (1, 2)), [(4, 8)], ((4, 1),), 4, None),
    (lambda: ops.ReduceSum(axis=(1, 2)), [(4, 8, 8)], ((1, 2, 4),), 8, None),
    (lambda: ops.ReduceMean(axis=(0, 2), keep_dims=True), [(4, 8, 8)], ((2, 2, 2),), 8, None),
    (lambda: ops.ReduceMax(axis=1), [(4, 8)], ((4, 1),), 4, None),
    (lambda: ops.Softmax(axis=0), [(4, 8)], ((1, 4),), 4, None),
    (lambda: ops.Softmax(axis=(1, 2)), [(2, 4, 8)], ((2, 1, 1),), 2, None),
    (lambda: ops.LayerNorm(begin_norm_axis=1, begin_params_axis=1), [(4, 3, 8), (3, 8), (3, 8)],
     ((4, 1, 1), (1, 1), (1, 1)), 4, None),
    (lambda: ops.LayerNorm(), [(4, 3, 8), (8,), (8,)], ((2, 3, 1), (1,), (1,)), 6, None),
    (lambda: ops.BatchMatMul(), [(2, 3, 4, 8), (2, 3, 8, 6)], ((2, 1, 2, 2), (2, 1, 2, 1)), 8, None),
    (lambda: ops.BatchMatMul(transpose_b=True), [(2, 2, 4, 8), (6, 8)], ((1, 2, 2, 2), (1, 2)), 8, None),
    (lambda: ops.Gather(), [(16, 8), (8,)], ((4, 1), (1,)), 4, {1: ("idx", RNG.integers(0, 16, 8))}),
    (lambda: ops.Gather(), [(16, 8), (6,)], ((4, 2), (1,)), 8, {1: ("idx", RNG.integers(0, 16, 6))}),
    (lambda: ops.Gather(), [(16, 8), (4, 3)], ((1, 4), (2, 1)), 8, {1: ("idx", RNG.integers(0, 16, (4, 3)))}),
    (lambda: ops.Gather(), [(16, 8), (4, 3)], ((2, 1), (4, 1)), 8, {1: ("idx", RNG.integers(0, 16, (4, 3)))}),
    (lambda: ops.SparseSoftmaxCrossEntropyWithLogits(), [(8, 16), (8,)], ((2, 4), (2,)), 8,
     {1: ("labels", RNG.integers(0, 16, 8))}),
    (lambda: ops.SoftmaxCrossEntropyWithLogits(), [(8, 16), (8, 16)], ((2, 2), (2, 2)), 4,
     {1: ("labels", np.eye(16)[RNG.integers(0, 16, 8)])}),
]


@pytest.mark.parametrize("make,shapes,strategy,D,extra", CASES,
                         ids=[f"{c[0]().name}-{c[2]}" for c in CASES])
def test_operator_trains_equal_to_one_device(make, shapes, strategy, D, extra):
    net, feeds = _net(shapes, make(), strategy, extra=extra)
    ref = standalone(net, feeds, steps=2)
    res = train(net, AutoParallelContext("semi_auto_parallel", D), feeds, steps=2)
    assert_same(res, ref)


def test_one_hot_cuts_the_depth_as_its_output_strategy():
    """onehot_info.cc: OneHot's strategy is its output's ((rows, depth),); each rank writes its
    own columns, nothing is communicated."""
    net = Network("oh")
    idx = net.input("idx", (8,))
    z = net.parameter("z", RNG.standard_normal((8, 12)))
    oh = ops.OneHot(12).shard(((2, 4),))(idx)
    rows = ops.SoftmaxCrossEntropyWithLogits().shard(((2, 4), (2, 4)))(z, oh)
    ops.ReduceMean(axis=0).shard(((2,),))(rows)
    feeds = {"idx": RNG.integers(0, 12, 8)}
    ctx = AutoParallelContext("semi_auto_parallel", 8)
    e = explain(net, ctx)
    assert not [m for m in e.phase("forward") if m.op == "OneHot-0"]
    assert_same(train(net, ctx, feeds, steps=2), standalone(net, feeds, steps=2))


def _forward(e, op):
    return [(m.kind, m.groups, m.bytes_per_rank) for m in e.phase("forward") if m.op == op]


def test_gather_row_split_masks_and_reduce_scatters():
    """gather_info.cc (ShardAxisImpl, axis 0): table (4, 1), indices uncut -> mask, lookup, then
    ReduceScatter over the row group when indices dim 0 (8) divides by 4; AllReduce when it does
    not (6). Backward: the adjoint (AllGather / AllReduce)."""
    ctx = AutoParallelContext("semi_auto_parallel", 4)
    for n, kind, nbytes in ((8, "reduce_scatter", 8 * 8 * 8), (6, "all_reduce", 6 * 8 * 8)):
        net, _ = _net([(16, 8), (n,)], ops.Gather(), ((4, 1), (1,)), extra={1: ("idx", np.zeros(n))})
        e = explain(net, ctx)
        assert _forward(e, "Gather-0") == [(kind, ((0, 1, 2, 3),), nbytes)]
        back = [m.kind for m in e.phase("backward") if m.op == "Gather-0"]
        assert back == [{"reduce_scatter": "all_gather", "all_reduce": "all_reduce"}[kind]]


def test_gather_shard_batch_and_axis_all_reduces_over_the_row_group():
    """gather_info.cc (ShardBatchAndAxisImpl): table (2, 1), indices (4, 1) on 8 devices: device
    matrix [4, 2], forward AllReduce over the row dimension: groups {0,1} {2,3} {4,5} {6,7}."""
    net, _ = _net([(16, 8), (4, 3)], ops.Gather(), ((2, 1), (4, 1)), extra={1: ("idx", np.zeros((4, 3)))})
    e = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    assert _forward(e, "Gather-0") == [("all_reduce", ((0, 1), (2, 3), (4, 5), (6, 7)), 1 * 3 * 8 * 8)]


@pytest.mark.parametrize("table, indices, n_idx, out, want", [
    # MindSpore tests/ut/python/parallel/test_gather_v2.py (8 devices, table [64, 64] cut by rows)
    # with the collective gather_info.cc inserts (ShardAxisImpl::InferReplaceGraph: ReduceScatter
    # unless axis_split_forward_allreduce_, set when indices dim 0 % row cut != 0, by
    # ShardBatchAndAxis, or by an out_strategy equal to the AllReduce strategy):
    # test_gatherv2_forward_all_reduce: ((8, 1), (1, 1)), indices [2, 64]: 2 % 8 != 0
    ((8, 1), (1, 1), 2, None, ("all_reduce", ((0, 1, 2, 3, 4, 5, 6, 7),))),
    # the same table with indices [64, 64] (test_gatherv2_semi_auto3's table strategy): ReduceScatter
    ((8, 1), (1, 1), 64, None, ("reduce_scatter", ((0, 1, 2, 3, 4, 5, 6, 7),))),
    # test_gatherv2_split_axis_0_repeat_calc: ((4, 1), (1, 1)) on 8: the repeat goes LEFT of the
    # device matrix [2, 4, 1] (SetAttribute), so the sum is over consecutive ranks
    ((4, 1), (1, 1), 2, None, ("all_reduce", ((0, 1, 2, 3), (4, 5, 6, 7)))),
    ((4, 1), (1, 1), 64, None, ("reduce_scatter", ((0, 1, 2, 3), (4, 5, 6, 7)))),
    # test_gatherv2_shard_batch_and_axis: ((4, 1), (2, 1)): device matrix [2, 4], AllReduce
    # along the table's dim (ShardBatchAndAxisImpl: axis_split_forward_allreduce_ = true) ...
    ((4, 1), (2, 1), 64, None, ("all_reduce", ((0, 1, 2, 3), (4, 5, 6, 7)))),
    # ... or ReduceScatter when out_strategy is the ReduceScatter one (CheckOutputStrategy:
    # indices' strategy + table's column cut, dim 0 times the row cut = (8, 1, 1))
    ((4, 1), (2, 1), 64, ((8, 1, 1),), ("reduce_scatter", ((0, 1, 2, 3), (4, 5, 6, 7)))),
    # out_strategy equal to the AllReduce strategy ((1, 1) + (1,)) turns the ReduceScatter off
    ((8, 1), (1, 1), 64, ((1, 1, 1),), ("all_reduce", ((0, 1, 2, 3, 4, 5, 6, 7),))),
])
def test_gather_row_split_inserts_mindspores_collective(table, indices, n_idx, out, want):
    net = Network("gather")
    t = net.parameter("t", RNG.standard_normal((64, 64)))
    idx = net.input("idx", (n_idx, 64))
    y = ops.Gather().shard((table, indices), out)(t, idx)
    ops.MSELoss()(y, net.input("target", y.shape))
    e = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    assert [(m.kind, m.groups) for m in e.phase("forward") if m.op == "Gather-0"] == [want]
    mirror = [m.groups for m in e.phase("parameter_gradient") if m.tensor == "dt"]
    if prod(table) * prod(indices) < 8:  # repeated on the left: the mirror spans ranks 4 apart
        assert mirror == [((0, 4), (1, 5), (2, 6), (3, 7))]


def test_gather_repeat_on_the_left_trains_equal_and_refuses_a_partial_batch_and_axis():
    net, feeds = _net([(16, 8), (4, 3)], ops.Gather(), ((4, 1), (1, 1)),
                      extra={1: ("idx", RNG.integers(0, 16, (4, 3)))})
    assert_same(train(net, AutoParallelContext("semi_auto_parallel", 8), feeds, steps=2),
                standalone(net, feeds, steps=2))
    # ShardBatchAndAxis needs row cut x indices cut = the device count (2 x 2 != 8)
    bad, _ = _net([(16, 8), (4, 3)], ops.Gather(), ((2, 1), (2, 1)), extra={1: ("idx", np.zeros((4, 3)))})
    with pytest.raises(ParasimError, match=r"r x d = 8 devices"):
        explain(bad, AutoParallelContext("semi_auto_parallel", 8))


def test_vocab_parallel_cross_entropy_all_reduces_max_sum_and_loss():
    """Class dim cut 4 ways, rows 2 ways on 8 devices: AllReduce(max) and AllReduce(sum) of the
    per-row values over each class group ({0..3}, {4..7}), 4 rows x 8 bytes each, then the loss's
    partial sums over all 8 ranks in ONE AllReduce (the merged row and class groups); the same
    three all-reduces as Megatron-LM's vocab-parallel cross entropy."""
    net, _ = _net([(8, 16), (8,)], ops.SparseSoftmaxCrossEntropyWithLogits(), ((2, 4), (2,)),
                  extra={1: ("labels", np.zeros(8))})
    e = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    groups = ((0, 1, 2, 3), (4, 5, 6, 7))
    assert _forward(e, "SparseSoftmaxCrossEntropyWithLogits-0") == [
        ("all_reduce", groups, 32), ("all_reduce", groups, 32), ("all_reduce", (tuple(range(8)),), 8)]


def test_reduce_sum_over_two_cut_axes_is_one_all_reduce():
    """reduce_method_info.cc: the reduced dims' device-matrix dims form one group; (1, 2, 4) on
    8 devices reducing dims 1 and 2 -> one AllReduce over all 8 ranks."""
    net, _ = _net([(4, 8, 8)], ops.ReduceSum(axis=(1, 2)), ((1, 2, 4),))
    e = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    assert _forward(e, "ReduceSum-0") == [("all_reduce", (tuple(range(8)),), 4 * 8)]


@pytest.mark.parametrize("make,shapes,strategy,words", [
    (lambda: ops.Softmax(axis=0), [(4, 8)], ((2, 1),), ["Softmax-0", "input 0 dim 0", "may not be split"]),
    (lambda: ops.LayerNorm(1, 1), [(4, 3, 8), (3, 8), (3, 8)], ((1, 1, 2), (1, 2), (1, 2)),
     ["LayerNorm-0", "dim 2", "may not be split"]),
    (lambda: ops.Add(), [(4, 1, 8), (6, 8)], ((1, 2, 1), (1, 1)), ["Add-0", "input 0 dim 1", "size 1", "cannot cut 2 ways"]),
    (lambda: ops.Concat(axis=1), [(4, 3), (4, 5)], ((1, 3), (1, 5)), ["Concat-0", "dim 1", "may not be split"]),
    (lambda: ops.StridedSlice((0, 1), (4, 7), (1, 2)), [(4, 8)], ((1, 2),), ["dim 1", "sliced"]),
    (lambda: ops.Gather(), [(16, 8), (8,)], ((2, 2), (2,)), ["rows", "indices may not be cut", "gather_info.cc"]),
    (lambda: ops.ReduceMax(axis=1), [(4, 8)], ((1, 4),), ["ReduceMax-0", "dim 1", "may not be split"]),
    (lambda: ops.Mul(), [(4, 8), (4, 8)], ((2, 4), (4, 2)), ["cut 2 ways", "must be cut alike"]),
])
def test_illegal_strategies_are_refused_with_the_rule(make, shapes, strategy, words):
    extra = {1: ("idx", np.zeros(shapes[1]))} if make().name == "Gather" else None
    with pytest.raises(ParasimError) as e:
        net, _ = _net(shapes, make(), strategy, extra=extra)
        explain(net, AutoParallelContext("semi_auto_parallel", 8))
    for w in words:
        assert w in str(e.value)
