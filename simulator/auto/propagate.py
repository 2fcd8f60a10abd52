"""Give every operator a strategy: the user's, data parallel, or one found by propagation.

- stand_alone: one device, nothing is cut.
- data_parallel: every operator cuts dim 0 of its first input D ways (MindSpore docs).
- semi_auto_parallel: the user's `.shard(...)`; unset operators get the data-parallel strategy
  (MindSpore docs "operator_parallel").
- auto_parallel + sharding_propagation (the other search modes live in strategy_search/; planner.py
  picks): breadth-first from the user-sharded operators; each
  neighbour reached takes the candidate strategy with the least redistribution cost to its
  already-placed neighbours (plus its own forward communication, the collectives inside it
  included), in ring wire bytes; ties go to
  the candidate with less repeated calculation, then to the first enumerated (MindSpore docs
  "sharding_propagation"). Unreached operators fall back to data parallel.
Reshape has no strategy of its own: it keeps its producer's cuts where they survive (plan.py).

elementwise_op_strategy_follow (MindSpore set_algo_parameters): after the assignment, each
elementwise operator (unary, or arithmetic with broadcasting) without a user strategy whose
output has exactly one consumer takes the cuts that consumer needs, from the last operator to
the first, so a chain of elementwise operators follows the operator after it.
"""

from __future__ import annotations

import itertools
from collections import deque
from math import prod

from ..errors import ParasimError
from ..layout import Layout
from ..layout_convert import mesh_from_device_matrix
from .context import AutoParallelContext
from .graph import Network, Node
from .ops import Reshape
from .ops_math import is_elementwise
from .redistribution import cost_bytes, redistribute
from .strategy import OpSharding, build_sharding


def shapes_of(net: Network, node: Node) -> list[tuple[int, ...]]:
    return [net.tensors[x].shape for x in node.inputs]


def sharding_of(net: Network, node: Node, D: int, strategy, out_strategy=None,
                user_set: bool = False) -> OpSharding:
    shapes = shapes_of(net, node)
    letters, out, order, whole = node.op.spec(shapes)
    if not user_set:  # the planner's own choice may keep a cut the operator resolves inside
        whole = "".join(c for c in whole if c not in node.op.planner_may_cut(shapes))
    sh = build_sharding(node.label, letters, out, order, shapes, D, strategy, out_strategy,
                        whole, user_set, view=node.op.strategy_view(shapes),
                        default_out=lambda raw: node.op.out_layout(raw, shapes),
                        repeat_left=node.op.repeat_on_left(strategy, D))
    node.op.check(sh)
    return sh


def strategy_letters(net: Network, node: Node, planner: bool = False):
    """(letters of each strategy tuple, letter -> size, device-matrix order, whole letters);
    planner: the letters a search may cut are not whole (`Primitive.planner_may_cut`)."""
    shapes = shapes_of(net, node)
    _, _, order, whole = node.op.spec(shapes)
    if planner:
        whole = "".join(c for c in whole if c not in node.op.planner_may_cut(shapes))
    letters, vshapes = node.op.strategy_view(shapes)
    size = {c: n for s, shape in zip(letters, vshapes) for c, n in zip(s, shape)}
    return letters, size, order, whole


def dp_strategy(net: Network, node: Node, D: int) -> tuple[tuple[int, ...], ...]:
    """Dim 0 of the first input cut by the largest divisor of D that divides it (D if it can)."""
    letters, size, order, whole = strategy_letters(net, node)
    b = node.op.batch_input
    first = letters[b][0] if letters[b] else None
    cut = 1
    if first is not None and first not in whole and first in order:
        cut = max(c for c in range(1, D + 1) if D % c == 0 and size[first] % c == 0)
    return tuple(tuple(cut if ch == first else 1 for ch in s) for s in letters)


def candidates(net: Network, node: Node, D: int, limit: int = 4096) -> list[tuple]:
    """Every strategy whose cuts divide D (product too) and their dims."""
    letters, size, order, whole = strategy_letters(net, node, planner=True)
    divisors = [d for d in range(1, D + 1) if D % d == 0]
    options = [[1] if c in whole else [d for d in divisors if size[c] % d == 0] for c in order]
    out = []
    for combo in itertools.product(*options):
        if D % prod(combo):
            continue
        cut = dict(zip(order, combo))
        out.append(tuple(tuple(cut.get(c, 1) for c in s) for s in letters))
        if len(out) >= limit:
            break
    return out


def reshape_sharding(net: Network, node: Node, D: int, source: Layout | None) -> OpSharding:
    """Reshape keeps a cut when it falls on the leading dim of a merged/split group of dims and
    divides the new leading dim. The cuts of every dim of a merged group join its leading dim when
    their product divides it and the new leading dim (XLA's choice: (8, 16) cut (2, 4) -> (128,) is
    one AllToAll of 96 B a rank, not a 384 B AllGather). A cut on another dim of a merged group whose leading dim is
    uncut moves to that leading dim first (a redistribution between dims: AllToAll with
    enable_alltoall, MindSpore's AllGather + Split by default; explain() shows its bytes),
    rather than gathering the whole tensor; any other cut is gathered."""
    in_shape, out_shape = net.tensors[node.inputs[0]].shape, node.op.shape
    if node.op.in_strategy is not None:
        source = Layout.from_strategy(tuple(node.op.in_strategy[0]), D, in_shape)
    if source is None:
        source = Layout.replicated(dp_mesh(D), len(in_shape))
    mesh = source.mesh
    in_dims = [()] * len(in_shape)
    out_dims = [()] * len(out_shape)
    def cut_axes(i):
        return tuple(a for a in source.dims[i] if mesh.axis_size(a) > 1)

    for I, O in _groups(in_shape, out_shape):
        every = tuple(a for i in I for a in cut_axes(i))  # the cuts of all the group's dims, major first
        whole = prod(mesh.axis_size(a) for a in every)
        if len(I) > 1 and every and in_shape[I[0]] % whole == 0 and out_shape[O[0]] % whole == 0:
            # (8, 16) cut (2, 4) -> (128,): the minor cut joins the leading dim (one AllToAll, 96 B a
            # rank, as XLA; MindSpore's AllGather + Split costs what a gather would) and the output
            # keeps all 8 cuts, instead of gathering dim 1 (384 B) and keeping 2
            in_dims[I[0]], out_dims[O[0]] = every, every
            continue
        axes = cut_axes(I[0])
        if not axes:  # the first cut dim of the group moves to its leading dim if it divides
            axes = next((cut_axes(i) for i in I[1:] if cut_axes(i)), ())
            if in_shape[I[0]] % prod(mesh.axis_size(a) for a in axes):
                axes = ()
        cut = prod(mesh.axis_size(a) for a in axes)
        if axes and out_shape[O[0]] % cut == 0:
            in_dims[I[0]], out_dims[O[0]] = axes, axes
    src = Layout(mesh, in_dims)
    out = Layout(mesh, out_dims)
    return OpSharding(node.label, mesh, {}, (src,), out, out, node.op.in_strategy is not None)


def dp_mesh(D: int):
    return mesh_from_device_matrix((D,), D)


def _groups(a, b):
    """Pairs (input dims, output dims) whose sizes multiply to the same number."""
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        I, O, pa, pb = [i], [j], a[i], b[j]
        while pa != pb:
            if pa < pb:
                i += 1
                I.append(i)
                pa *= a[i]
            else:
                j += 1
                O.append(j)
                pb *= b[j]
        out.append((I, O))
        i, j = i + 1, j + 1
    return out


def assign(net: Network, ctx: AutoParallelContext) -> dict[int, OpSharding]:
    """node index -> OpSharding, by the context's mode (module docstring)."""
    D = ctx.stage_devices
    mode = ctx.plans_like
    done: dict[int, OpSharding] = {}
    queue: deque[int] = deque()
    if mode in ("semi_auto_parallel", "auto_parallel"):
        for node in net.nodes:
            if node.op.in_strategy is not None and not isinstance(node.op, Reshape):
                done[node.index] = sharding_of(net, node, D, node.op.in_strategy,
                                               node.op.out_strategy, True)
                queue.append(node.index)
    propagate = mode == "auto_parallel"
    while len(done) < len(net.nodes):
        while propagate and queue:
            for nb in _neighbours(net, net.nodes[queue.popleft()]):
                if nb.index not in done and not isinstance(nb.op, Reshape):
                    done[nb.index] = _best(net, nb, D, done, ctx.enable_alltoall)
                    queue.append(nb.index)
        node = next((n for n in net.nodes if n.index not in done), None)
        if node is None:
            break
        if isinstance(node.op, Reshape):
            prod_node = net.producer(node.inputs[0])
            src = done[prod_node.index].out if prod_node is not None else None
            done[node.index] = reshape_sharding(net, node, D, src)
        elif propagate and any(nb.index in done for nb in _neighbours(net, node)):
            done[node.index] = _best(net, node, D, done, ctx.enable_alltoall)
        else:
            done[node.index] = sharding_of(net, node, D, dp_strategy(net, node, D))
        queue.append(node.index)
    return done


def _neighbours(net: Network, node: Node) -> list[Node]:
    out = [net.producer(x) for x in node.inputs]
    out += [n for n, _ in net.consumers(node.output)]
    return [n for n in out if n is not None]


def _best(net: Network, node: Node, D: int, done: dict[int, OpSharding], a2a: bool = False) -> OpSharding:
    best, best_key = None, None
    for rank_, strat in enumerate(candidates(net, node, D)):
        try:
            cand = sharding_of(net, node, D, strat)
        except ParasimError:
            continue
        try:  # a move redistribute() refuses: skip the candidate
            cost = cost_bytes(redistribute(cand.raw, cand.out, net.tensors[node.output].shape, alltoall=a2a))
            cost += cost_bytes([st for _, st, _ in node.op.inner_steps(cand, shapes_of(net, node), node.inputs[0])
                                if st is not None])
            for i, x in enumerate(node.inputs):
                p = net.producer(x)
                if p is not None and p.index in done:
                    cost += cost_bytes(redistribute(done[p.index].out, cand.inputs[i], net.tensors[x].shape,
                                                    alltoall=a2a))
            for c, j in net.consumers(node.output):
                if c.index in done:
                    cost += cost_bytes(redistribute(cand.out, done[c.index].inputs[j],
                                                    net.tensors[node.output].shape, alltoall=a2a))
        except ParasimError:
            continue
        key = (cost, cand.repeat, rank_)
        if best_key is None or key < best_key:
            best, best_key = cand, key
    if best is None:
        return sharding_of(net, node, D, dp_strategy(net, node, D))
    return best


def follow_elementwise(net: Network, D: int, done: dict[int, OpSharding]) -> dict[int, OpSharding]:
    """The assignment with elementwise operators following their consumer (module docstring)."""
    done = dict(done)
    for node in reversed(net.nodes):
        if not is_elementwise(node.op) or node.op.in_strategy is not None:
            continue
        users = net.consumers(node.output)
        if len(users) != 1 or isinstance(users[0][0].op, Reshape):
            continue
        c, j = users[0]
        want = done[c.index].inputs[j]
        ins, out, _, _ = node.op.spec(shapes_of(net, node))
        cut = dict(zip(out, want.splits))
        try:
            done[node.index] = sharding_of(net, node, D, tuple(tuple(cut.get(ch, 1) for ch in s)
                                                               for s in ins))
        except ParasimError:
            continue
    return done
