"""Redistribution bytes against XLA's compiled programs, and a Reshape that keeps its cut.

Reference figures: jax 0.10.2 / jaxlib 0.10.2 on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=8,
float64 (jax_enable_x64), `jax.jit(f, in_shardings=..., out_shardings=...).lower(x).compile()`;
the collectives and their operand shapes read from the compiled HLO text. Bytes below are the
bytes one rank puts on the wire (parasim's Step.wire_bytes, the nccl-tests bus factors)."""

import numpy as np
import pytest
from auto_helpers import assert_same

from simulator.auto import ops
from simulator.auto.compile import redistribution_program
from simulator.auto.context import AutoParallelContext
from simulator.auto.explain import explain
from simulator.auto.graph import Network
from simulator.auto.redistribution import redistribute
from simulator.auto.run import standalone, train
from simulator.auto.strategy_search.cost import OpCostModel, step_time_s
from simulator.layout import Layout
from simulator.mesh import DeviceMesh
from simulator.runtime import LocalRuntime

M8 = DeviceMesh([("x", 8)])


def comm(src, dst, shape, alltoall):
    return [(s.kind, s.group_size, s.wire_bytes) for s in redistribute(src, dst, shape, alltoall=alltoall)
            if s.is_comm]


def test_reshard_between_dims_matches_xla_all_to_all():
    # XLA: (16, 16, 4) P('x') -> P(None, 'x') on 8 devices: one all-to-all of 8 pieces
    # f64[2,1,2,4] (128 B each): 7 x 128 = 896 B leave each rank
    src, dst = Layout(M8, [("x",), (), ()]), Layout(M8, [(), ("x",), ()])
    assert comm(src, dst, (16, 16, 4), alltoall=True) == [("all_to_all", 8, 896)]
    # MindSpore's default (enable_alltoall False): AllGather + Split, 8x the bytes
    assert comm(src, dst, (16, 16, 4), alltoall=False) == [("all_gather", 8, 7 * 1024)]
    # explain()'s reason names the bytes of the other choice
    reason = redistribute(src, dst, (16, 16, 4), alltoall=False)[0].reason
    assert "one AllToAll would put 896 B per rank on the wire instead of 7168 B" in reason


def test_transpose_matches_xla_all_to_all():
    # XLA: y = x.T for x (64, 32) P('x', None), y P('x', None): one all-to-all of 8 pieces
    # f64[8,1,4] (256 B): 1792 B per rank. parasim: Transpose keeps the cut on its output's dim
    # 1, the consumer wants dim 0: the same move
    src, dst = Layout(M8, [(), ("x",)]), Layout(M8, [("x",), ()])
    assert comm(src, dst, (32, 64), alltoall=True) == [("all_to_all", 8, 1792)]


def test_axis_swap_and_non_nesting_against_xla():
    # XLA: (16, 16) on mesh (2, 4): P('a', 'b') -> P('b', 'a'): an all-to-all over groups of 2
    # (pieces f64[1,4,4], 128 B leave each rank) and a collective-permute of f64[4,8] (256 B):
    # 384 B. parasim (all-to-all on) makes the same moves: an AllToAll over the minor factor 2 of
    # 'b' gives the blocks the target's (4, 8) shape, a CollectivePermute sends them where they go
    m24 = DeviceMesh([("a", 2), ("b", 4)])
    src, dst = Layout(m24, [("a",), ("b",)]), Layout(m24, [("b",), ("a",)])
    got = comm(src, dst, (16, 16), alltoall=True)
    assert got == [("all_to_all", 2, 128), ("collective_permute", 2, 256)]
    assert sum(b for *_, b in got) == 384
    steps = redistribute(src, dst, (16, 16))
    # ranks whose (a, minor-b) block already is the target's keep it: 4 of 8 receive
    assert len(steps[-1].groups) == 4 and "XLA's collective-permute" in steps[-1].reason
    # MindSpore's default (enable_alltoall False) has no permute: gathers and local splits
    assert "collective_permute" not in [k for k, _, _ in comm(src, dst, (16, 16), alltoall=False)]
    # XLA: (12, 12) on mesh (3, 2) -> mesh (2, 3) ("Involuntary full rematerialization"): an
    # all-gather of f64[4,6] over groups of 2 (192 B) then of f64[4,12] over groups of 3
    # (2 x 384 B): 960 B. parasim gathers in the other order: 384 + 576 = 960 B, the same
    m32, m23 = DeviceMesh([("a", 3), ("b", 2)]), DeviceMesh([("c", 2), ("d", 3)])
    got = comm(Layout(m32, [("a",), ("b",)]), Layout(m23, [("c",), ("d",)]), (12, 12), alltoall=True)
    assert [k for k, _, _ in got] == ["all_gather", "all_gather"] and sum(b for *_, b in got) == 960


def _reshape_net():
    rng = np.random.default_rng(0)
    net = Network("reshape")
    x = net.input("x", (16, 64))
    t = net.input("t", (1024,))
    h = ops.ReLU().shard(((1, 8),))(x)  # column-cut
    y = ops.Tanh().shard(((8,),))(ops.Reshape((1024,))(h))
    ops.MSELoss()(y, t)
    return net, {"x": rng.standard_normal((16, 64)), "t": rng.standard_normal(1024)}


@pytest.mark.parametrize("alltoall", [False, True])
def test_reshape_of_a_column_cut_tensor_moves_the_cut_not_the_tensor(alltoall):
    # XLA: (16, 64) P(None, 'x') -> reshape (1024,) P('x'): one all-to-all of 8 pieces
    # f64[1,2,8] (128 B): 896 B per rank. parasim moves the cut to dim 0 before the Reshape
    # (AllToAll, or MindSpore's AllGather + Split) and the Reshape keeps it: no whole gather
    net, feeds = _reshape_net()
    ctx = AutoParallelContext("semi_auto_parallel", 8, enable_alltoall=alltoall)
    fwd = [(m.op, m.kind, m.bytes_per_rank) for m in explain(net, ctx).phase("forward")
           if m.tensor in ("relu0", "reshape0", "tanh0")]
    assert fwd == [("Reshape-0", "all_to_all" if alltoall else "all_gather", 1024)]
    res = train(net, ctx, feeds, runtime=LocalRuntime(8), steps=2)
    assert res.plan.stored["reshape0"].splits == (8,)
    assert_same(res, standalone(net, feeds, steps=2))


def test_pure_permutation_is_one_collective_permute_that_runs():
    # (4, 4) on mesh (2, 2): P('a', 'b') -> P('b', 'a') holds the same (2, 2) blocks on other
    # ranks: ranks 1 and 2 swap theirs (one 32 B shard each), ranks 0 and 3 keep theirs
    m22 = DeviceMesh([("a", 2), ("b", 2)])
    src, dst = Layout(m22, [("a",), ("b",)]), Layout(m22, [("b",), ("a",)])
    steps = redistribute(src, dst, (4, 4))
    assert [(s.kind, s.groups, s.wire_bytes) for s in steps] == [("collective_permute", ((2, 1), (1, 2)), 32)]
    x = np.arange(16.0).reshape(4, 4)
    rt = LocalRuntime(4)
    rt.load({r: {"act/x": b} for r, b in src.shard(x).items()})
    rt.run(redistribution_program(steps, 4))
    for r, want in dst.shard(x).items():
        np.testing.assert_array_equal(rt.fetch(r, ["act/y"])["act/y"], want)


def _swap_net():
    rng = np.random.default_rng(1)
    net = Network("swap")
    x = net.input("x", (16, 16))
    w = net.parameter("w", rng.standard_normal((16, 16)) * 0.3)
    h = ops.Add().shard(((2, 4), (2, 4)))(x, w)  # device matrix [2, 4]
    y = ops.Tanh().shard(((4, 2),))(h)  # device matrix [4, 2]: the cuts swap
    ops.MSELoss()(y, net.input("t", (16, 16)))
    return net, {"x": rng.standard_normal((16, 16)), "t": rng.standard_normal((16, 16))}


def test_permute_trains_equal_to_standalone_forward_and_backward():
    # the backward of a permute is the inverse permute (plan.py plans the gradient's move back)
    net, feeds = _swap_net()
    ctx = AutoParallelContext("semi_auto_parallel", 8, enable_alltoall=True)
    kinds = [(m.phase, m.kind) for m in explain(net, ctx).moves if m.tensor in ("add0", "dadd0")]
    assert kinds == [("forward", "all_to_all"), ("forward", "collective_permute"),
                     ("backward", "all_to_all"), ("backward", "collective_permute")]
    assert "CollectivePermute" in str(explain(net, ctx))
    res = train(net, ctx, feeds, runtime=LocalRuntime(8), steps=2)
    assert_same(res, standalone(net, feeds, steps=2))


def test_search_cost_prices_a_permute_as_its_slowest_sender():
    # the strategy search's cost model: one point-to-point transfer (alpha + S / B) per send
    m22 = DeviceMesh([("a", 2), ("b", 2)])
    [step] = redistribute(Layout(m22, [("a",), ("b",)]), Layout(m22, [("b",), ("a",)]), (4, 4))
    topo = OpCostModel().topology(4)
    link = topo.intra
    assert step_time_s(step, topo) == pytest.approx(link.latency_s + 32 / link.bandwidth_Bps, rel=1e-12)


def _two_cut_reshape_net():
    rng = np.random.default_rng(2)
    net = Network("reshape2")
    x = net.input("x", (8, 16))
    h = ops.ReLU().shard(((2, 4),))(x)  # cut along both dims
    y = ops.Tanh().shard(((8,),))(ops.Reshape((128,))(h))
    ops.MSELoss()(y, net.input("t", (128,)))
    return net, {"x": rng.standard_normal((8, 16)), "t": rng.standard_normal(128)}


def test_reshape_of_a_tensor_cut_along_two_dims_is_one_all_to_all():
    # XLA: (8, 16) P('a', 'b') on mesh (2, 4) -> reshape (128,) P(('a', 'b')): one all-to-all over
    # groups of 4, pieces f64[1,4] (32 B), 3 leave each rank: 96 B (the figure). Before,
    # the Reshape kept only the cut of dim 0 and gathered dim 1: AllGather, 384 B per rank
    m24 = DeviceMesh([("a", 2), ("b", 4)])
    src = Layout(m24, [("a",), ("b",)])
    assert comm(src, Layout(m24, [("a", "b"), ()]), (8, 16), alltoall=True) == [("all_to_all", 4, 96)]
    assert comm(src, Layout(m24, [("a",), ()]), (8, 16), alltoall=True) == [("all_gather", 4, 384)]
    net, feeds = _two_cut_reshape_net()
    ctx = AutoParallelContext("semi_auto_parallel", 8, enable_alltoall=True)
    [move] = [m for m in explain(net, ctx).phase("forward") if m.tensor == "relu0"]
    assert move.kind == "all_to_all" and "96 B per rank on the wire; MindSpore's default AllGather + Split " \
                                          "would put 384 B" in move.reason
    res = train(net, ctx, feeds, runtime=LocalRuntime(8), steps=2)
    assert res.plan.stored["reshape0"].splits == (8,)  # the output keeps all 8 cuts: no Split before Tanh
    assert_same(res, standalone(net, feeds, steps=2))
    # MindSpore's default: the same move as AllGather + Split (the gather's 384 B, never more)
    ms = explain(net, AutoParallelContext("semi_auto_parallel", 8))
    assert [m.kind for m in ms.phase("forward") if m.tensor == "relu0"] == ["all_gather"]
    assert "one AllToAll would put 96 B per rank on the wire instead of 384 B" in str(ms)


def test_3d_mesh_gathers_one_axis_at_a_time_and_splits_between():
    # [S0, S0, R] -> [R, S1, S1] (DTensor placements) of a (16, 32) float64 tensor on a 2 x 2 x 2
    # mesh. Gathering both cuts of dim 0 at once: AllGather over 4 ranks, 3,072 B per rank.
    # Per axis: AllGather y (1,024 B), Split dim 1 by y and by z (local), AllGather x on the
    # smaller block (512 B): 1,536 B, below the per-axis AllGather + Split without the early
    # splits (2,048 B). XLA (jax 0.10.2, this machine): an all-to-all of 4 pieces f64[4,1,8]
    # (768 B leave each rank) and a collective-permute of f64[16,8] (1,024 B): 1,792 B; parasim
    # with enable_alltoall: AllToAll 512 B + AllGather 512 B = 1,024 B
    m = DeviceMesh([("x", 2), ("y", 2), ("z", 2)])
    src, dst = Layout(m, [("x", "y"), ()]), Layout(m, [(), ("y", "z")])
    ms = redistribute(src, dst, (16, 32), alltoall=False)
    assert [(s.kind, s.wire_bytes) for s in ms] == [("all_gather", 1024), ("split", 0), ("split", 0),
                                                   ("all_gather", 512)]
    assert comm(src, dst, (16, 32), alltoall=True) == [("all_to_all", 2, 512), ("all_gather", 2, 512)]
    x = np.arange(512.0).reshape(16, 32)
    rt = LocalRuntime(8)
    rt.load({r: {"act/x": b} for r, b in src.shard(x).items()})
    rt.run(redistribution_program(ms, 8))
    for r, want in dst.shard(x).items():
        np.testing.assert_array_equal(rt.fetch(r, ["act/y"])["act/y"], want)


def test_softmax_over_a_cut_axis_moves_the_cut_with_all_to_all():
    # Softmax over dim 1 of (8, 64) float64 arriving cut 8 ways along dim 1: the softmax dim may
    # not stay cut (softmax_info.cc). enable_alltoall: one AllToAll moves the cut to dim 0, 448 B
    # per rank; MindSpore's default AllGather + Split: 3,584 B (explain() names both). XLA keeps
    # the cut and AllReduces the row max and the row sum (2 x 8 float64) instead
    net = Network("sm")
    x = net.input("x", (8, 64))
    y = ops.Softmax()(ops.ReLU().shard(((1, 8),))(x))
    ops.MSELoss()(y, net.input("t", (8, 64)))
    said = {True: ("all_to_all", "448 B per rank on the wire; MindSpore's default AllGather + Split would put 3584 B"),
            False: ("all_gather", "one AllToAll would put 448 B per rank on the wire instead of 3584 B")}
    for a2a, (kind, reason) in said.items():
        ctx = AutoParallelContext("semi_auto_parallel", 8, enable_alltoall=a2a)
        [move] = [m for m in explain(net, ctx).phase("forward") if m.op == "Softmax-0"]
        assert move.kind == kind and reason in move.reason


def test_the_planner_keeps_a_cut_softmax_axis_as_xla_does():
    # XLA (jax 0.10.2, float64, 8 host devices): jax.nn.softmax(x, axis=1) on (8, 64) sharded
    # P(None, 'x') keeps the cut and compiles two all-reduces of f64[8] (the row max and the row
    # sum), and its vjp one more (the row sum of dy * y): 112 B per rank each (ring, 2 (n-1)/n).
    # The auto_parallel planner keeps the cut too (MindSpore's shard() may not: softmax_info.cc),
    # pays exactly those collectives, names the gather it avoids, and equals one device.
    net = Network("sm")
    x = net.input("x", (8, 16))
    w = net.parameter("w", np.random.default_rng(1).standard_normal((16, 64)))
    y = ops.Softmax()(ops.MatMul().shard(((1, 1), (1, 8)))(x, w))
    ops.MSELoss()(y, net.input("t", (8, 64)))
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 16)), "t": rng.standard_normal((8, 64))}
    ref = standalone(net, feeds, steps=2)
    for a2a in (True, False):
        ctx = AutoParallelContext("auto_parallel", 8, enable_alltoall=a2a)
        moves = explain(net, ctx)
        fwd = [m for m in moves.phase("forward") if m.op == "Softmax-0"]
        bwd = [m for m in moves.phase("backward") if m.op == "Softmax-0"]
        assert [(m.kind, len(m.groups[0]), m.bytes_per_rank) for m in fwd + bwd] == [("all_reduce", 8, 64)] * 3
        [sm] = [n for n in moves.plan.nodes if n.node.label == "Softmax-0"]
        assert [st.wire_bytes for st in sm.inner_steps + sm.inner_backward_steps] == [112.0] * 3
        assert "AllReduce(max)" in fwd[0].reason and "AllReduce(sum) of the per-row sum of dy * y" in bwd[0].reason
        assert "gathering the axis instead would put 3584 B per rank" in fwd[0].reason
        assert_same(train(net, ctx, feeds, steps=2), ref)
