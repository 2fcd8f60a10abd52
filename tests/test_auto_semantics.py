"""MindSpore semi-auto semantics: device matrices, tensor maps, groups, errors (MindSpore docs "operator_parallel", `tensor_layout/device_matrix.cc`)."""

import numpy as np
import pytest

from simulator.auto import ops
from simulator.auto.context import (
    AutoParallelContext,
    get_auto_parallel_context,
    reset_auto_parallel_context,
    set_auto_parallel_context,
)
from simulator.auto.explain import explain
from simulator.auto.explanation import single_op_network
from simulator.auto.planner import build_plan
from simulator.auto.strategy import MsLayout
from simulator.errors import ParasimError

CTX8 = AutoParallelContext("semi_auto_parallel", 8)


def plan_of(op, shapes, ctx=CTX8):
    return build_plan(single_op_network(op, shapes), ctx)


def comm(steps):
    return [(s.kind, [list(g) for g in s.groups]) for s in steps if s.is_comm]


def test_reference_example_k_cut_four_ways():
    p = plan_of(ops.MatMul().shard(((2, 4), (4, 1))), [(64, 32), (32, 16)])
    n = p.nodes[0]
    assert n.sharding.device_matrix == (2, 4, 1)
    assert n.sharding.tensor_maps == ((2, 1), (1, 0))
    assert comm(n.out_steps) == [("all_reduce", [[0, 1, 2, 3], [4, 5, 6, 7]])]
    assert comm(p.mirrors["w"]) == [("all_reduce", [[0, 4], [1, 5], [2, 6], [3, 7]])]
    # backward of the forward AllReduce is an AllReduce over the same groups
    assert comm(n.grad_out_steps) == [("all_reduce", [[0, 1, 2, 3], [4, 5, 6, 7]])]


def test_reference_example_no_forward_collective_and_output_blocks():
    p = plan_of(ops.MatMul().shard(((2, 1), (1, 4))), [(64, 32), (32, 16)])
    n = p.nodes[0]
    assert comm(n.out_steps) == []
    out = n.sharding.out
    for r in range(8):
        assert out.block_index(r) == (r // 4, r % 4)
    assert p.stored["x"].devices_holding((0, 0)) == (0, 1, 2, 3)
    # W cut on its free dim: X's gradient is a partial sum over the c ranks -> AllReduce
    assert comm(p.mirrors["x"]) == [("all_reduce", [[0, 1, 2, 3], [4, 5, 6, 7]])]


def test_out_strategy_gives_reduce_scatter_and_allgather_backward():
    op = ops.MatMul().shard(((2, 4), (4, 1)), out_strategy=((8, 1),))
    n = plan_of(op, [(64, 32), (32, 16)]).nodes[0]
    assert comm(n.out_steps) == [("reduce_scatter", [[0, 1, 2, 3], [4, 5, 6, 7]])]
    assert comm(n.grad_out_steps) == [("all_gather", [[0, 1, 2, 3], [4, 5, 6, 7]])]
    assert n.sharding.out.splits == (8, 1)


def test_repeated_calculation_is_the_rightmost_dimension():
    p = plan_of(ops.MatMul().shard(((2, 1), (1, 2))), [(64, 32), (32, 16)])
    s = p.nodes[0].sharding
    assert s.device_matrix == (2, 1, 2, 2) and s.repeat == 2
    assert s.mesh.axis_names[-1] == "rep"
    # neighbouring ranks hold identical copies of the output
    assert s.out.replica_groups() == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # the weight's mirror spans its a-dimension and the repeats
    assert comm(p.mirrors["w"]) == [("all_reduce", [[0, 1, 4, 5], [2, 3, 6, 7]])]


def test_batch_matmul_prepends_batch_cut():
    s = plan_of(ops.BatchMatMul().shard(((2, 2, 2), (2, 2, 1))), [(4, 8, 6), (4, 6, 10)]).nodes[0].sharding
    assert s.device_matrix == (2, 2, 2, 1)
    assert s.tensor_maps == ((3, 2, 1), (3, 1, 0))


def test_transpose_b_keeps_device_matrix_order():
    s = plan_of(ops.MatMul(transpose_b=True).shard(((2, 4), (1, 4))), [(64, 32), (16, 32)]).nodes[0].sharding
    assert s.device_matrix == (2, 4, 1)
    assert s.tensor_maps[1] == (0, 1)


def test_mindspore_layout_objects():
    layout = MsLayout((2, 4), ("dp", "mp"))
    op = ops.MatMul().shard((layout("dp", "mp"), layout("mp", "None")))
    p = plan_of(op, [(64, 32), (32, 16)])
    n = p.nodes[0]
    assert comm(n.out_steps) == [("all_reduce", [[0, 1, 2, 3], [4, 5, 6, 7]])]
    assert comm(p.mirrors["w"]) == [("all_reduce", [[0, 4], [1, 5], [2, 6], [3, 7]])]
    with pytest.raises(ParasimError, match="mapped to"):
        plan_of(ops.MatMul().shard((layout("dp", "mp"), layout("dp", "None"))), [(64, 32), (32, 16)])
    with pytest.raises(ParasimError, match="unknown alias"):
        layout("tp", "None")


@pytest.mark.parametrize("strategy, shapes, words", [
    (((2, 4),), [(64, 32), (32, 16)], ["MatMul-0", "1 tuple", "2 input"]),
    (((2, 4), (2, 1)), [(64, 32), (32, 16)], ["MatMul-0", "4 ways", "2 ways"]),
    (((3, 1), (1, 1)), [(64, 32), (32, 16)], ["MatMul-0", "input 0 dim 0", "64", "3"]),
    (((2, 2), (2, 3)), [(64, 32), (32, 24)], ["MatMul-0", "12", "8"]),
    (((2, 4, 1), (4, 1)), [(64, 32), (32, 16)], ["MatMul-0", "input 0", "3 values"]),
])
def test_bad_strategies_name_operator_input_and_numbers(strategy, shapes, words):
    with pytest.raises(ParasimError) as e:
        plan_of(ops.MatMul().shard(strategy), shapes)
    for w in words:
        assert w in str(e.value)


def test_softmax_axis_may_not_be_split():
    net = single_op_network(ops.Softmax().shard(((2, 4),)), [(8, 8)])
    with pytest.raises(ParasimError, match="may not be split"):
        build_plan(net, CTX8)


def test_unset_operators_are_data_parallel_in_semi_auto():
    from simulator.auto.graph import Network
    net = Network()
    x = net.input("x", (64, 32))
    w = net.parameter("w", np.zeros((32, 16)))
    y = ops.MatMul()(x, w)
    ops.ReLU()(y)
    p = build_plan(net, CTX8)
    assert p.nodes[0].sharding.strategy == ((8, 1), (1, 1))
    assert p.nodes[1].sharding.strategy == ((8, 1),)
    assert comm(p.mirrors["w"]) == [("all_reduce", [list(range(8))])]


def test_context_holder_and_validation():
    reset_auto_parallel_context()
    ctx = set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=4,
                                    gradients_mean=True)
    assert get_auto_parallel_context() == ctx and ctx.device_num == 4
    with pytest.raises(ParasimError, match="parallel_mode"):
        set_auto_parallel_context(parallel_mode="hybrid")
    with pytest.raises(ParasimError, match="unknown"):
        set_auto_parallel_context(devices=3)
    with pytest.raises(ParasimError):
        AutoParallelContext("auto_parallel", 6, pipeline_stages=4)
    assert reset_auto_parallel_context().parallel_mode == "stand_alone"


def test_explain_lists_moves_with_reasons():
    e = explain(ops.MatMul().shard(((2, 4), (4, 1))), CTX8, shapes=[(64, 32), (32, 16)])
    d = e.to_dict()
    assert d["device_matrix"] == [2, 4, 1] and d["tensor_maps"] == [[2, 1], [1, 0]]
    assert d["output_strategy"] == [2, 1]
    fwd = d["forward"][0]
    assert fwd["op"] == "AllReduce" and fwd["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert fwd["bytes_per_rank"] == 64 // 2 * 16 * 8
    assert "K is cut 4 ways" in fwd["reason"]
    assert d["parameter_gradient"][0]["groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert "AllReduce" in e.to_text() and '"backward"' in e.to_json()


def test_redistribution_reason_tells_apart_layouts_on_different_device_matrices():
    # LayerNorm stores its output cut 8 ways on d0 of Mesh(d0=8, d1=1); MatMul-1 needs it cut
    # (2, 4) on Mesh(d0=2, d1=4, d2=1): both print as [I_d0, J_d1], so the reason names the meshes
    from simulator.auto.graph import Network
    net = Network()
    x = net.input("x", (16, 12))
    w, w2 = net.parameter("w", np.zeros((12, 8))), net.parameter("w2", np.zeros((8, 4)))
    g, b = net.parameter("g", np.ones(8)), net.parameter("b", np.zeros(8))
    h = ops.LayerNorm()(ops.MatMul()(x, w), g, b)
    ops.MatMul().shard(((2, 4), (4, 1)))(h, w2)
    move = next(m for m in explain(net, CTX8).phase("forward") if m.tensor == "layernorm0")
    needed, stored = move.reason.split(";")[0].split(" but it is stored as ")
    assert needed != stored
    assert "Mesh(d0=2, d1=4, d2=1)" in needed and "Mesh(d0=8, d1=1)" in stored
