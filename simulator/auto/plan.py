"""The parallel plan of a network: every operator's sharding and every inserted move.

Forward (MindSpore semantics, REFERENCES §1): each input is redistributed from where it is
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
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import Layout
from .context import AutoParallelContext
from .graph import Network, Node
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

    @property
    def inner_steps(self) -> tuple[Step, ...]:
        return tuple(st for _, st, _ in self.inner if st is not None)


@dataclass(frozen=True)
class ParallelPlan:
    ctx: AutoParallelContext
    net: Network
    device_num: int
    nodes: tuple[NodePlan, ...]
    stored: dict  # tensor name -> Layout it is kept in
    needs: dict  # tensor name -> needs a gradient
    mirrors: dict  # parameter / input name -> steps resolving its gradient

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
                    grad_in[i] = tuple(redistribute(grad_layout(s.inputs[i]),
                                                    grad_layout(stored[x]), net.tensors[x].shape,
                                                    ITEMSIZE, "d" + x))
        inner = tuple(node.op.inner_steps(s, [net.tensors[x].shape for x in node.inputs], node.inputs[0]))
        plans.append(NodePlan(node, s, in_steps, out_steps, grad_out, grad_in, inner))
    mirrors = {x: tuple(redistribute(grad_layout(stored[x]), stored[x], t.shape, ITEMSIZE, "d" + x))
               for x, t in net.tensors.items() if t.kind != "activation" and t.requires_grad
               and x in stored}
    return ParallelPlan(ctx, net, D, tuple(plans), stored, needs, mirrors)
