"""The parallel plan of a network: every operator's sharding and every inserted move.

Forward (MindSpore semantics, docs "operator_parallel"): each input is redistributed from where it is
stored to the layout its operator needs; the operator computes its local shard; a cut
contraction letter leaves partial sums, resolved by AllReduce (or ReduceScatter with an
out_strategy).

Backward: gradients follow MindSpore's adjoint convention. The loss is replicated on all D
ranks and each copy is seeded with 1/D (MindSpore's _VirtualDiv), so for any tensor the sum of
the gradients held by its replicated copies is the true gradient: a gradient lives in its
tensor's layout with every replicated axis a pending sum. Then the backward of each move is its
adjoint: AllReduce <- AllReduce, ReduceScatter <- AllGather, AllGather <- ReduceScatter,
AllToAll <- AllToAll, local split <- local zero-pad. Deriving the matmul input gradient: with
W cut on its free dim N (strategy ((a, 1), (1, c))), X is replicated over the c ranks and each
computes dY_j W_j^T, a partial sum over j; summing it needs an AllReduce over those c ranks,
inserted where the gradient must be whole: at an input that asked for its gradient, at a
parameter ("mirror", below) or where a redistribution meets it.

Parameter gradients: a parameter is stored in the layout its consumer needs; its "mirror" group
is the ranks holding the same slice (`replica_groups`); the gradient is AllReduced over it and,
with gradients_mean, divided by the group size (compile.py first scales each contribution by
the group size, so the result still equals the single-device gradient).

Parallel optimizer (optimizer_shard.py): a parameter's `stored` layout is its operator's slice
cut further on dim 0, `gathered` keeps the operator's slice; the forward move is an AllGather
and the mirror a ReduceScatter (after gradient accumulation; per micro-step with
gradient_accumulation_shard). Dataset strategy (context_options.py): a network input's `stored`
layout is how the ranks load it, and the move to its operator's layout is planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..errors import ParasimError
from ..layout import Layout
from .context import AutoParallelContext
from .graph import Network, Node
from .optimizer_shard import shard_axes, sharded_layout
from .redistribution import Step
from .redistribution import redistribute as redistribute_
from .strategy import OpSharding

ITEMSIZE = 8  # float64, the reference dtype


def grad_layout(layout: Layout) -> Layout:
    """Where a tensor's gradient lives: its layout with every replicated axis a pending sum."""
    return Layout(layout.mesh, layout.dims, layout.replicated_axes)


@dataclass(frozen=True)
class NodePlan:
    node: Node
    sharding: OpSharding
    in_steps: tuple[tuple[Step, ...], ...]  # per input: stored layout -> operator layout
    out_steps: tuple[Step, ...]  # raw output (partial sums) -> stored output layout
    grad_out_steps: tuple[Step, ...]  # backward of out_steps
    grad_in_steps: dict  # input index -> steps from the local input gradient to the stored grad
    inner: tuple = ()  # collectives inside the operator: (kernel, Step or None, reduce op)
    inner_bwd: tuple = ()  # those of its backward, alike

    @property
    def inner_steps(self) -> tuple[Step, ...]:
        return tuple(st for _, st, _ in self.inner if st is not None)

    @property
    def inner_backward_steps(self) -> tuple[Step, ...]:
        return tuple(st for _, st, _ in self.inner_bwd if st is not None)


@dataclass(frozen=True)
class ParallelPlan:
    ctx: AutoParallelContext
    net: Network
    device_num: int
    nodes: tuple[NodePlan, ...]
    stored: dict  # tensor name -> Layout it is kept in
    needs: dict  # tensor name -> needs a gradient
    mirrors: dict  # parameter / input name -> steps resolving its gradient
    gathered: dict = field(default_factory=dict)  # parallel optimizer: param -> its operator slice
    regather: dict = field(default_factory=dict)  # level3: param -> steps gathering it for backward

    @property
    def loss(self) -> str | None:
        out = self.net.output
        return out.name if out.shape == () else None


def plan_from_shardings(net: Network, ctx: AutoParallelContext, shard: dict) -> ParallelPlan:
    """The plan of `net` given every operator's sharding (node index -> OpSharding; planner.py
    chooses them)."""
    D = ctx.stage_devices
    stored: dict[str, Layout] = {}
    for node in net.nodes:
        for i, x in enumerate(node.inputs):
            if net.tensors[x].kind != "activation" and x not in stored:
                stored[x] = shard[node.index].inputs[i]
        stored[node.output] = shard[node.index].out
    stored.update(dataset_layouts(net, ctx, D, stored))
    gathered = {}
    for x, lay in list(stored.items()):
        axes = shard_axes(lay, net.tensors[x].shape, ctx) if net.tensors[x].kind == "parameter" else ()
        if axes:
            gathered[x], stored[x] = lay, sharded_layout(lay, axes)
    cfg = ctx.parallel_optimizer_config
    shard_accum = cfg.gradient_accumulation_shard and ctx.grad_accumulation_step > 1
    grad_home = {x: grad_layout(gathered[x] if x in gathered and not shard_accum else stored[x])
                 for x in stored}
    needs = net.needs_grad()
    plans = []

    def redistribute(src, dst, shape, itemsize, tensor):
        return redistribute_(src, dst, shape, itemsize, tensor, ctx.enable_alltoall)
    for node in net.nodes:
        s = shard[node.index]
        shape_out = net.tensors[node.output].shape
        in_steps = tuple(tuple(redistribute(stored[x], s.inputs[i], net.tensors[x].shape,
                                            ITEMSIZE, x)) for i, x in enumerate(node.inputs))
        out_steps = tuple(redistribute(s.raw, s.out, shape_out, ITEMSIZE, node.output))
        grad_out, grad_in = (), {}
        if needs[node.output]:
            raw_grad = Layout(s.raw.mesh, s.raw.dims, s.raw.replicated_axes)
            grad_out = tuple(redistribute(grad_layout(s.out), raw_grad, shape_out, ITEMSIZE,
                                          "d" + node.output))
            for i in node.op.grad_inputs:
                x = node.inputs[i]
                if needs[x]:
                    grad_in[i] = tuple(redistribute(grad_layout(s.inputs[i]), grad_home[x],
                                                    net.tensors[x].shape, ITEMSIZE, "d" + x))
        in_shapes = [net.tensors[x].shape for x in node.inputs]
        inner = tuple(node.op.inner_steps(s, in_shapes, node.inputs[0]))
        inner_bwd = tuple(node.op.inner_backward_steps(s, in_shapes, node.inputs[0])) if needs[node.output] else ()
        plans.append(NodePlan(node, s, in_steps, out_steps, grad_out, grad_in, inner, inner_bwd))
    mirrors = {x: tuple(redistribute(grad_home[x], stored[x], t.shape, ITEMSIZE, "d" + x))
               for x, t in net.tensors.items() if t.kind != "activation" and t.requires_grad
               and x in stored}
    regather = {}
    if cfg.level >= 3:
        regather = {x: tuple(redistribute(stored[x], lay, net.tensors[x].shape, ITEMSIZE, x))
                    for x, lay in gathered.items()}
    return ParallelPlan(ctx, net, D, tuple(plans), stored, needs, mirrors, gathered, regather)


def named_dataset_strategy(net: Network, ds, D: int):
    """dataset_strategy as (input name, tuple) pairs (kept as given when already named; a
    pipeline stage's network has its own inputs, so the pipeline names them first)."""
    if ds is None or (isinstance(ds, tuple) and isinstance(ds[0][0], str)):
        return ds
    if isinstance(ds, tuple):
        if len(ds) != len(net.inputs):
            raise ParasimError(f"dataset_strategy has {len(ds)} tuple(s) but network {net.name!r} "
                               f"has {len(net.inputs)} input(s) {[t.name for t in net.inputs]}")
        return tuple((t.name, s) for t, s in zip(net.inputs, ds))
    return tuple((t.name, (D,) + (1,) * (len(t.shape) - 1) if ds == "data_parallel" and t.shape
                  else (1,) * len(t.shape)) for t in net.inputs)


def dataset_layouts(net: Network, ctx: AutoParallelContext, D: int, stored: dict) -> dict:
    """How the ranks load the network inputs under ctx.dataset_strategy (context_options.py);
    {} with None (each input is loaded as its operator needs it)."""
    ds = ctx.dataset_strategy
    if ds is None or ctx.parallel_mode == "stand_alone":
        return {}
    named = dict(named_dataset_strategy(net, ds, D))
    out = {}
    for t in net.inputs:
        if t.name not in stored:
            continue
        if t.name not in named:
            continue
        s = named[t.name]
        if len(s) != len(t.shape):
            raise ParasimError(f"dataset_strategy {s} for input {t.name!r} has {len(s)} values but "
                               f"the input has shape {t.shape}")
        for d, (size, cut) in enumerate(zip(t.shape, s)):
            if size % cut:
                raise ParasimError(f"dataset_strategy {ds if isinstance(ds, str) else s}: input "
                                   f"{t.name!r} dim {d} of size {size} cannot be split {cut} ways")
        if D % max(1, prod(s)):
            raise ParasimError(f"dataset_strategy {s} for input {t.name!r} uses {prod(s)} devices, "
                               f"which does not divide device_num {D}")
        out[t.name] = Layout.from_strategy(s, D, t.shape) if t.shape else stored[t.name]
    return out
