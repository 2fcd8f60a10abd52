"""Backward communication: parasim (MindSpore's adjoints) beside PyTorch DTensor, the three
differences docs/auto_parallel.md names.

DTensor figures: torch 2.13.0 (CPU), a fake process group of 4 ranks
(torch.testing._internal.distributed.fake_pg.FakeStore), collectives counted by
torch.distributed.tensor.debug.CommDebugMode around forward and backward separately:
  Shard(0) -> Replicate() redistribute:   forward 1 all_gather_into_tensor, backward none (a slice)
  Partial() -> Replicate() redistribute:  forward 1 all_reduce, backward none
  a Replicate() weight times a Shard(0) input, summed, backward: no collective; the weight's
  gradient is left Partial(sum) (the DDP/FSDP wrapper or the optimizer reduces it)."""

import numpy as np

from simulator.auto import ops
from simulator.auto.context import AutoParallelContext
from simulator.auto.explain import explain
from simulator.auto.graph import Network


def test_mindspore_pays_the_adjoints_that_dtensor_does_not():
    net = Network("sr")
    x = net.input("x", (8, 8))
    w = net.parameter("w", np.ones((8, 8)))
    h = ops.MatMul().shard(((4, 1), (1, 1)))(x, w)        # h cut by rows (Shard(0))
    y = ops.ReLU().shard(((1, 1),))(h)                     # needs h whole: S -> R
    ops.MSELoss()(y, net.input("t", (8, 8)))               # a partial sum made whole: P -> R
    moves = [(m.phase, m.op, m.kind, m.bytes_per_rank) for m in explain(net, AutoParallelContext(
        "semi_auto_parallel", 4)).moves if not m.local]
    assert moves == [
        ("forward", "ReLU-0", "all_gather", 128),          # DTensor: the same all-gather
        ("forward", "MSELoss-0", "all_reduce", 8),         # DTensor: the same all-reduce
        ("backward", "MSELoss-0", "all_reduce", 8),        # adjoint of the all-reduce; DTensor: none
        ("backward", "ReLU-0", "reduce_scatter", 512),     # adjoint of the all-gather; DTensor: a slice
        ("parameter_gradient", "mirror", "all_reduce", 512),  # the mirror; DTensor: left Partial(sum)
    ]
