"""MindSpore's Cell.shard / functional shard (boundary layouts) and cell recompute."""

import numpy as np
import pytest
from auto_helpers import assert_same

from simulator.auto import Cell, ops, shard
from simulator.auto.context import AutoParallelContext
from simulator.auto.explain import explain
from simulator.auto.graph import Network
from simulator.auto.run import standalone, train
from simulator.errors import ParasimError
from simulator.runtime import LocalRuntime

AUTO = AutoParallelContext("auto_parallel", 8, search_mode="sharding_propagation")


class Mlp(Cell):
    def __init__(self, w1, w2):
        super().__init__()
        self.w1, self.w2 = w1, w2

    def construct(self, x):
        return ops.MatMul()(ops.GeLU()(ops.MatMul()(x, self.w1)), self.w2)


def network(make_cell, seed=0):
    rng = np.random.default_rng(seed)
    net = Network("cells")
    x = net.input("x", (16, 8))
    lab = net.input("labels", (16,), dtype="int64")
    w1 = net.parameter("w1", rng.standard_normal((8, 16)) / 3)
    w2 = net.parameter("w2", rng.standard_normal((16, 4)) / 3)
    y = make_cell(w1, w2)(x)
    ops.SparseSoftmaxCrossEntropyWithLogits()(y, lab)
    return net, {"x": rng.standard_normal((16, 8)), "labels": rng.integers(0, 4, 16)}


@pytest.fixture(scope="module")
def rt8():
    return LocalRuntime(8)


@pytest.mark.parametrize("functional", [False, True])
def test_cell_shard_sets_boundary_layouts_and_propagates_inside(rt8, functional):
    def make(w1, w2):
        if functional:
            return shard(lambda x: Mlp(w1, w2).construct(x), in_strategy=((2, 1),), out_strategy=((8, 1),))
        return Mlp(w1, w2).shard(in_strategy=((2, 1),), out_strategy=((8, 1),))
    net, feeds = network(make)
    res = train(net, AUTO, feeds, runtime=rt8, steps=2)
    assert_same(res, standalone(net, feeds, steps=2))
    by_label = {n.node.label: n.sharding for n in res.plan.nodes}
    assert by_label["Identity-0"].strategy == ((2, 1),) and by_label["Identity-1"].strategy == ((8, 1),)
    # the MatMul after the boundary takes the boundary's cut of x (propagation, no move)
    assert by_label["MatMul-0"].strategy[0] == (2, 1)
    assert not [m for m in explain(net, AUTO).phase("forward") if m.op == "MatMul-0" and m.tensor == "identity0"]


def test_recompute_runs_the_forward_again_and_keeps_less_after_forward(rt8):
    ctx = AutoParallelContext("semi_auto_parallel", 8)
    plain, feeds = network(Mlp)
    again, _ = network(lambda w1, w2: Mlp(w1, w2).recompute())
    ref = standalone(plain, feeds, steps=2)
    a = train(plain, ctx, feeds, runtime=rt8, steps=2)
    b = train(again, ctx, feeds, runtime=rt8, steps=2)
    assert_same(b, ref)

    def flops(res, phase):
        return sum(getattr(i, "flops", 0.0) for i in res.program.code[0] if getattr(i, "phase", "") == phase)
    redo = [i for i in b.program.code[0] if getattr(i, "label", "").startswith("recompute ")]
    assert [i.label for i in redo] == ["recompute MatMul-0", "recompute GeLU-0", "recompute MatMul-1"]
    cell_fwd = sum(i.flops for i in a.program.code[0] if getattr(i, "label", "") in
                   ("MatMul-0", "GeLU-0", "MatMul-1"))
    assert cell_fwd > 0 and sum(i.flops for i in redo) == pytest.approx(cell_fwd)
    assert flops(b, "backward") == pytest.approx(flops(a, "backward") + cell_fwd)

    def kept_after_forward(res):  # bytes on rank 0 when the backward pass starts (measured)
        code = res.program.code[0]
        first = next(k for k, i in enumerate(code) if getattr(i, "phase", "") == "backward")
        samples = res.runs[0].memory[0]
        return sum(samples[max(k for k in samples if k < first)].values())
    assert kept_after_forward(b) < kept_after_forward(a)


class Block(Cell):  # x + W2 GeLU(x W1): one layer of a residual MLP
    def __init__(self, w1, w2):
        super().__init__()
        self.w1, self.w2 = w1, w2

    def construct(self, x):
        return ops.Add()(x, ops.MatMul()(ops.GeLU()(ops.MatMul()(x, self.w1)), self.w2))


class Blocks(Cell):  # the whole network as one cell
    def __init__(self, ws):
        super().__init__()
        self.ws = ws

    def construct(self, x):
        for w1, w2 in self.ws:
            x = Block(w1, w2)(x)
        return x


def chain(mode, L, n, d, f):
    rng = np.random.default_rng(0)
    net = Network("chain")
    x = net.input("x", (n, d))
    ws = [(net.parameter(f"w1_{i}", rng.standard_normal((d, f)) / 3),
           net.parameter(f"w2_{i}", rng.standard_normal((f, d)) / 3)) for i in range(L)]
    if mode == "network":
        y = Blocks(ws).recompute()(x)
    else:
        y = x
        for w1, w2 in ws:
            y = (Block(w1, w2).recompute() if mode == "layer" else Block(w1, w2))(y)
    ops.MSELoss()(y, net.input("t", (n, d)))
    return net, {"x": rng.standard_normal((n, d)), "t": rng.standard_normal((n, d))}


def test_recompute_keeps_only_cell_inputs_and_lowers_the_measured_peak():
    L, n, d, f, b = 4, 16, 8, 32, 8  # float64
    ctx, rt = AutoParallelContext("stand_alone", 1), LocalRuntime(1)
    kept, peak = {}, {}
    for mode in ("none", "layer", "network"):
        net, feeds = chain(mode, L, n, d, f)
        res = train(net, ctx, feeds, runtime=rt, steps=2)
        assert_same(res, standalone(chain("none", L, n, d, f)[0], feeds, steps=2))
        code, mem = res.program.code[0], res.runs[0].memory[0]
        first = next(k for k, i in enumerate(code) if getattr(i, "phase", "") == "backward")
        kept[mode] = sum(mem[max(k for k in mem if k < first)].values())  # measured, after forward
        peak[mode] = res.runs[0].peak_bytes()[0]
    # the formula: parameters, the inputs x and t, the loss; then per layer either every operator
    # input and the output (x, xW1, GeLU, .W2, the sum) or, recomputed, its input and output only
    base = b * (L * 2 * d * f + 2 * n * d + 1)
    assert kept["none"] == base + b * L * (n * d + 2 * n * f + n * d)
    assert kept["layer"] == base + b * L * n * d
    assert kept["network"] == base + b * n * d  # the network cell's output alone
    # recomputing each layer lowers the peak; the whole network as one cell is recomputed at
    # once at the start of the backward pass (MindSpore's recompute.cc), so its peak is no-recompute's
    assert peak["layer"] < peak["none"] == peak["network"]


def test_cell_errors():
    with pytest.raises(ParasimError, match="in_strategy has 2 strategies but the cell has 1 inputs"):
        network(lambda w1, w2: Mlp(w1, w2).shard(((2, 1), (1, 1))))
    with pytest.raises(ParasimError, match="recompute: mode must be True or False, got 'yes'"):
        Mlp(None, None).recompute("yes")
    with pytest.raises(ParasimError, match="parameter_plan"):
        Mlp(None, None).shard(((2, 1),), parameter_plan={"w1": (1, 8)})
