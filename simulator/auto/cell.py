"""MindSpore's `nn.Cell` for auto-parallel networks: shard() at the cell boundary, recompute().

    class Mlp(Cell):
        def __init__(self, w1, w2):
            super().__init__(); self.w1, self.w2 = w1, w2
        def construct(self, x):
            return ops.MatMul()(ops.GeLU()(ops.MatMul()(x, self.w1)), self.w2)

    y = Mlp(w1, w2).shard(in_strategy=((2, 1),), out_strategy=((8, 1),))(x)
    y = shard(lambda x: ..., in_strategy=((2, 1),))(x)       # functional form (mindspore.shard)
    Mlp(w1, w2).recompute()(x)

MindSpore semantics (docs "Cell.shard", "mindspore.shard", "recompute"):
- `shard(in_strategy, out_strategy=None)`: one tuple per cell input (None: leave that input
  as it is) and per output; the inputs are laid out as in_strategy before the cell and its
  outputs as out_strategy after it. Inside, the operators without a strategy get theirs from
  the context's mode: with auto_parallel + sharding_propagation (what MindSpore requires for
  Cell.shard) they are propagated from the boundary. parasim fixes each boundary layout with
  an Identity operator carrying the strategy, so explain() lists the boundary moves by name.
- `recompute()`: the operators the cell creates form one segment whose forward the backward
  pass runs again (compile.recompute), instead of keeping their outputs. After the forward pass
  the device keeps only the cell's inputs and outputs (every tensor is freed after its last use,
  liveness.py); the segment is recomputed once, right before the first backward operator that
  needs it, and its values are freed as the backward consumes them. That is MindSpore's pass
  (`frontend/optimizer/recompute.cc`: the maximal connected recomputed subgraph is duplicated
  once, scheduled after the inputs of its first backward user). So recomputing each layer's
  cell lowers the peak (one layer's activations are alive at a time); recomputing one cell
  that is the whole network lowers the memory held between forward and backward but not the
  peak, which the recomputation rebuilds at the start of the backward pass.
"""

from __future__ import annotations

from ..errors import ParasimError
from .graph import Tensor
from .ops_math import Identity


class Cell:
    """Subclasses define construct(*tensors) with auto.ops operators."""

    def __init__(self):
        self.in_strategy = None
        self.out_strategy = None
        self._recompute = False

    def construct(self, *tensors):
        raise NotImplementedError(f"{type(self).__name__} must define construct()")

    def shard(self, in_strategy, out_strategy=None, parameter_plan=None) -> "Cell":
        name = type(self).__name__
        if parameter_plan is not None:
            raise ParasimError(f"{name}.shard: parameter_plan is not modelled; shard the operator "
                               f"that uses the parameter instead")
        for key, v in (("in_strategy", in_strategy), ("out_strategy", out_strategy)):
            if v is not None and not isinstance(v, (tuple, list)):
                raise ParasimError(f"{name}.shard: {key} must be a tuple of per-tensor strategies, "
                                   f"got {v!r}")
        self.in_strategy = None if in_strategy is None else tuple(in_strategy)
        self.out_strategy = None if out_strategy is None else tuple(out_strategy)
        return self

    def recompute(self, mode: bool = True) -> "Cell":
        if not isinstance(mode, bool):
            raise ParasimError(f"{type(self).__name__}.recompute: mode must be True or False, "
                               f"got {mode!r}")
        self._recompute = mode
        return self

    def __call__(self, *tensors):
        name = type(self).__name__
        if not tensors or not all(isinstance(t, Tensor) for t in tensors):
            raise ParasimError(f"{name}: call it with network tensors")
        net = tensors[0].net
        tensors = _laid_out(name, "in_strategy", self.in_strategy, tensors)
        with net.recompute_segment(self._recompute):
            out = self.construct(*tensors)
        many = isinstance(out, tuple)
        outs = _laid_out(name, "out_strategy", self.out_strategy, out if many else (out,))
        return outs if many else outs[0]


def _laid_out(name: str, key: str, strategy, tensors) -> tuple:
    if strategy is None:
        return tuple(tensors)
    if len(strategy) != len(tensors):
        raise ParasimError(f"{name}.shard: {key} has {len(strategy)} strategies but the cell has "
                           f"{len(tensors)} {'inputs' if key == 'in_strategy' else 'outputs'}")
    return tuple(t if s is None else Identity().shard((s,))(t) for s, t in zip(strategy, tensors))


class _FunctionCell(Cell):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, *tensors):
        return self.fn(*tensors)


def shard(fn, in_strategy, out_strategy=None, parameter_plan=None) -> Cell:
    """mindspore.shard: `fn` (a function of network tensors) with boundary strategies."""
    if not callable(fn):
        raise ParasimError(f"shard: fn must be a function or a Cell, got {fn!r}")
    cell = fn if isinstance(fn, Cell) else _FunctionCell(fn)
    return cell.shard(in_strategy, out_strategy, parameter_plan)
