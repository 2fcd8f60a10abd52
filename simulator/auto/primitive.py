"""The base of every auto-parallel operator: `Primitive` with MindSpore's `.shard()`.

An operator declares index letters (an einsum, see strategy.py), the numpy kernels that compute
one rank's shard (op_kernels*.py) and which inputs take gradients. Hooks an operator may define:
- `strategy_view(shapes)`: the letters and sizes the user's strategy tuples refer to, when they
  differ from the inputs' (OneHot's strategy is for its output, Tile's cuts the multiples);
- `rank_attrs(sharding, shapes)`: kernel attributes that depend on the rank (Gather's row offset);
- `out_layout(raw, shapes)`: the output layout MindSpore gives when no out_strategy is set
  (a row-split Gather reduce-scatters its output);
- `inner_steps`: collectives inside the operator (the fused cross-entropy's max and sum), and
  `inner_backward_steps` those of its backward (a cut softmax axis: the row sum of dy * y);
- `planner_may_cut(shapes)`: letters MindSpore's shard() may not cut but the propagation planner
  may, paying the operator's inner collectives (a softmax axis, as XLA keeps it cut).
"""

from __future__ import annotations

from math import prod

from ..errors import ParasimError
from .graph import Tensor

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def need(cond: bool, msg: str) -> None:
    if not cond:
        raise ParasimError(msg)


def axis_tuple(name: str, axis, ndim: int) -> tuple[int, ...]:
    """Axes as non-negative ints (one int or a tuple; () means all), each inside the rank."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes:
        return tuple(range(ndim))
    out = []
    for a in axes:
        need(isinstance(a, int) and -ndim <= a < ndim,
             f"{name}: axis {a!r} is outside a rank-{ndim} input")
        out.append(a % ndim)
    need(len(set(out)) == len(out), f"{name}: axis {axes} names a dim twice")
    return tuple(sorted(out))


class Primitive:
    """Base operator. Subclasses set `name`, `n_inputs`, `grad_inputs` and implement `spec`,
    `out_shape`, and the kernel names `fwd` / `bwd`."""

    name = "Primitive"
    n_inputs = 1
    grad_inputs: tuple[int, ...] = (0,)
    fwd = bwd = ""
    batch_input = 0  # the input whose dim 0 data parallelism cuts (Gather: the indices)
    pipeline_stage: int | None = None  # set `op.pipeline_stage = k` (MindSpore's cell attribute)

    def __init__(self):
        self.in_strategy = None
        self.out_strategy = None

    def shard(self, in_strategy, out_strategy=None) -> "Primitive":
        """MindSpore `Primitive.shard`: one tuple (or Layout(...) call) per input."""
        if not isinstance(in_strategy, (tuple, list)):
            raise ParasimError(f"{self.name}.shard: in_strategy must be a tuple of per-input "
                               f"strategies, got {in_strategy!r}")
        self.in_strategy = tuple(in_strategy)
        self.out_strategy = None if out_strategy is None else tuple(out_strategy)
        return self

    def __call__(self, *tensors):
        if len(tensors) != self.n_inputs:
            raise ParasimError(f"{self.name} takes {self.n_inputs} input(s), got {len(tensors)}")
        if not all(isinstance(t, Tensor) for t in tensors):
            raise ParasimError(f"{self.name}: inputs must be network tensors (net.input, "
                               f"net.parameter or an operator's output)")
        net = tensors[0].net
        if any(t.net is not net for t in tensors):
            raise ParasimError(f"{self.name}: inputs come from different networks")
        shapes = [t.shape for t in tensors]
        return net.add_node(self, tensors, tuple(self.out_shape(shapes)))

    # ---- what subclasses define ------------------------------------------------------------------
    def spec(self, shapes) -> tuple[list[str], str, str, str]:
        """(input letters, output letters, device-matrix order, unsplittable letters)."""
        raise NotImplementedError

    def out_shape(self, shapes) -> tuple[int, ...]:
        ins, out, _, _ = self.spec(shapes)
        size = {c: n for s, shape in zip(ins, shapes) for c, n in zip(s, shape)}
        return tuple(size.get(c, 1) for c in out)

    def strategy_view(self, shapes):
        """(letters, shapes) the strategy tuples refer to: the inputs' by default."""
        return self.spec(shapes)[0], [tuple(s) for s in shapes]

    def attrs(self, shapes) -> dict:
        """Kernel attributes; may depend on global shapes (a mean divides by the global count)."""
        return {}

    def rank_attrs(self, sharding, shapes):
        """None, or rank -> extra kernel attributes (offsets of the rank's block)."""
        return None

    def out_layout(self, raw, shapes):
        """The output layout without an out_strategy; None: the raw layout with sums resolved."""
        return None

    def check(self, sharding) -> None:
        """Rules beyond the letters (raise ParasimError naming the rule)."""

    def repeat_on_left(self, strategy, device_num: int) -> bool:
        """Whether repeated calculation is the leftmost (slowest) device-matrix dimension for
        this strategy (tuples); MindSpore's default, and parasim's, is the rightmost."""
        return False

    def inner_steps(self, sharding, shapes, tensor: str):
        """Collectives inside the operator: a list of (kernel, Step or None, reduce op), empty for
        most. Each kernel reads the inputs and the earlier parts; its result, reduced by the Step,
        is handed to the next kernel and to the operator's own kernel."""
        return []

    def inner_backward_steps(self, sharding, shapes, tensor: str):
        """The backward's collectives, as `inner_steps` (their kernels read dy, the forward's
        inputs and parts); empty for most."""
        return []

    def planner_may_cut(self, shapes) -> str:
        """Letters of the unsplittable ones the propagation planner may cut (module docstring)."""
        return ""

    def flops(self, local_shapes, local_out) -> float:
        return float(prod(local_out)) if local_out else 1.0

    def __repr__(self) -> str:
        s = "" if self.in_strategy is None else f".shard({self.in_strategy})"
        return f"{self.name}(){s}"
