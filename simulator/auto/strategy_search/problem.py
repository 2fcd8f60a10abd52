"""Operator-level strategy search: the cost problem every search mode solves.

    ctx = set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8,
                                    search_mode="dynamic_programming")   # or recursive_programming
    result = search(net, ctx)            # SearchResult: strategies, objective, cost, time
    train(net, ctx, feeds)               # compiles the searched strategies (propagate.assign)

The problem (MindSpore's cost graph, `auto_parallel/graph_costmodel.cc`): one variable per
operator (Reshape excepted: it follows its producer), whose domain is its candidate strategies:
every tensor dim cut a power of two, shared letters cut alike (MatMul's two k), whole letters
uncut, the product dividing D (exactly D with fully_use_devices, MindSpore's default). The
objective (cost.py) splits into
- a unary term per operator: compute, its output's partial-sum communication (and its
  adjoint), the mirror AllReduce and memory of the parameters stored in its layout;
- a pairwise term per edge: redistributing a tensor from where it is stored (its producer's
  output, or a leaf's first consumer) to where a consumer needs it, forward and backward;
  device matrices that do not nest (cuts 3 x 2 against 2 x 3 on 6 devices) are priced with
  redistribution.py's gather + re-slice fallback; a move redistribute() refuses (another set of
  devices) is infinite, so no search picks it.
Memory is a unary sum, limited per device (`OpCostModel.memory_limit_bytes`).
dp.py and rec.py minimise it; `assign_searched` hands the choice to plan.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from ...errors import ParasimError
from ...layout import Layout
from ..graph import Network, Node
from ..ops import Reshape
from ..propagate import reshape_sharding, shapes_of, sharding_of, strategy_letters
from ..strategy import OpSharding
from .cost import (
    INFEASIBLE,
    ZERO,
    Cost,
    OpCostModel,
    compute_cost,
    inner_cost,
    mirror_cost,
    output_cost,
    param_memory,
    transfer_cost,
)


def power_of_two_strategies(net: Network, node: Node, D: int, fully_use_devices: bool = False):
    """Candidate strategies of one operator: each letter cut 1, 2, 4, ... (dividing its size
    and D), whole letters uncut, the product dividing D (equal to D if fully_use_devices)."""
    letters, size, order, whole = strategy_letters(net, node, planner=True)
    pows = [1 << i for i in range(D.bit_length()) if D % (1 << i) == 0]
    combos = [()]
    for c in order:
        opts = [1] if c in whole else [p for p in pows if size[c] % p == 0]
        combos = [t + (p,) for t in combos for p in opts if D % (prod(t) * p) == 0]
    if fully_use_devices:
        full = [t for t in combos if prod(t) == D]
        combos = full or combos  # an operator too small to use all devices keeps repeats
    return [tuple(tuple(dict(zip(order, t)).get(c, 1) for c in s) for s in letters) for t in combos]


def legal_shardings(net: Network, node: Node, D: int, strategies) -> list[OpSharding]:
    """The candidates the operator accepts (a row-split Gather refuses cut indices, say)."""
    out = []
    for s in strategies:
        try:
            out.append(sharding_of(net, node, D, s))
        except ParasimError:
            continue
    return out


@dataclass
class Problem:
    """Variables (operator node indices), their candidate shardings, unary and pairwise tables.

    unary[v]: objective per candidate; mem[v]: memory bytes per candidate; pair[(a, b)] with
    a < b: objective matrix (candidates of a) x (candidates of b). `const`: terms no choice
    changes (leaves whose layout is fixed)."""

    net: Network
    D: int
    model: OpCostModel
    order: list[int]
    cands: dict[int, list[OpSharding]]
    unary: dict[int, np.ndarray] = field(default_factory=dict)
    mem: dict[int, np.ndarray] = field(default_factory=dict)
    pair: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    const: Cost = ZERO
    terms: list = field(default_factory=list, repr=False)  # (vars, fn(choice) -> Cost)

    def neighbours(self) -> dict[int, set[int]]:
        nb = {v: set() for v in self.order}
        for a, b in self.pair:
            nb[a].add(b)
            nb[b].add(a)
        return nb

    def pair_of(self, a: int, b: int) -> np.ndarray:
        """Matrix with rows for a's candidates, columns for b's."""
        return self.pair[(a, b)] if a < b else self.pair[(b, a)].T

    def evaluate(self, choice: dict[int, int]) -> Cost:
        """The full Cost of one choice (candidate index per variable), term by term."""
        return sum((fn(choice) for _, fn in self.terms), self.const)

    def objective(self, choice: dict[int, int]) -> float:
        total = sum(float(self.unary[v][choice[v]]) for v in self.order)
        return total + sum(float(m[choice[a], choice[b]]) for (a, b), m in self.pair.items())

    def memory(self, choice: dict[int, int]) -> float:
        return self.const.memory_bytes + sum(float(self.mem[v][choice[v]]) for v in self.order)

    def shardings(self, choice: dict[int, int]) -> dict[int, OpSharding]:
        """node index -> OpSharding for every node (Reshape follows its producer)."""
        out = {v: self.cands[v][choice[v]] for v in self.order}
        for node in self.net.nodes:
            if isinstance(node.op, Reshape):
                p = self.net.producer(node.inputs[0])
                out[node.index] = reshape_sharding(self.net, node, self.D,
                                                   out[p.index].out if p is not None else None)
        return out


def build_problem(net: Network, D: int, model: OpCostModel, fully_use_devices: bool | None = None
                  ) -> Problem:
    """Enumerate candidates and price every unary and pairwise term (cached by layouts)."""
    full = model.fully_use_devices if fully_use_devices is None else fully_use_devices
    cands = _candidates(net, D, full)
    b = _Builder(net, D, model, Problem(net, D, model, sorted(cands), cands))
    b.collect_roots()
    b.add_operator_terms()
    b.add_leaf_terms()
    return b.prob


def _candidates(net: Network, D: int, full: bool) -> dict[int, list[OpSharding]]:
    """node index -> candidate shardings (the user's strategy alone when given; Reshape has none:
    it follows its producer); operators of identical specs share one list."""
    cands: dict[int, list[OpSharding]] = {}
    cache_sh: dict = {}
    for node in net.nodes:
        if isinstance(node.op, Reshape):
            continue
        if node.op.in_strategy is not None:  # the user's strategy is kept
            cands[node.index] = [sharding_of(net, node, D, node.op.in_strategy,
                                             node.op.out_strategy, True)]
            continue
        spec = (node.op.name, tuple(map(tuple, shapes_of(net, node))),
                tuple(map(str, node.op.spec(shapes_of(net, node)))), repr(node.op.attrs(shapes_of(net, node))))
        if spec not in cache_sh:
            cache_sh[spec] = legal_shardings(net, node, D, power_of_two_strategies(net, node, D, full))
        cands[node.index] = cache_sh[spec]
    return cands


class _Builder:
    """Fills a Problem's tables. Costs are cached by the layouts they depend on (`priced`) and
    identical layers, which share candidate objects, share their tables (`tables`)."""

    def __init__(self, net: Network, D: int, model: OpCostModel, prob: Problem):
        self.net, self.D, self.model, self.prob = net, D, model, prob
        self.topo = model.topology(D)
        self.needs = net.needs_grad()
        self.cache: dict = {}
        self.tables: dict = {}
        # stored layout of every tensor: (root variable or None, function of the root's sharding)
        self.roots: dict[str, tuple] = {}
        self.reshapes: dict[int, tuple] = {}

    def priced(self, key, fn) -> Cost:
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]

    def unary(self, v, fn, key=None) -> None:  # fn(sharding) -> Cost
        prob, cands = self.prob, self.prob.cands
        if key is None or key not in self.tables:
            costs = [fn(s) for s in cands[v]]
            got = (np.array([c.objective(self.model) for c in costs]),
                   np.array([c.memory_bytes for c in costs]))
            if key is None:
                key = ("unique", len(self.tables))
            self.tables[key] = got
        obj, mem = self.tables[key]
        prob.unary[v] = prob.unary.get(v, 0) + obj
        prob.mem[v] = prob.mem.get(v, 0) + mem
        prob.terms.append(((v,), lambda ch, v=v, fn=fn: fn(cands[v][ch[v]])))

    def reshape_of(self, node: Node):
        net, D = self.net, self.D
        if node.index not in self.reshapes:
            p = net.producer(node.inputs[0])
            if p is None:
                const = reshape_sharding(net, node, D, None)
                self.reshapes[node.index] = (None, lambda s, c=const: c)
            elif isinstance(p.op, Reshape):
                r, f = self.reshape_of(p)
                self.reshapes[node.index] = (r, lambda s, f=f: reshape_sharding(net, node, D, f(s).out))
            else:
                self.reshapes[node.index] = (p.index, lambda s: reshape_sharding(net, node, D, s.out))
        return self.reshapes[node.index]

    def input_layout(self, node: Node, i: int):  # (root, fn(root sharding) -> Layout) node needs
        if isinstance(node.op, Reshape):
            r, f = self.reshape_of(node)
            return r, (lambda s, f=f: f(s).inputs[0])
        return node.index, (lambda s, i=i: s.inputs[i])

    def collect_roots(self) -> None:
        """Where every tensor is stored: a leaf at its first consumer, an activation at its producer."""
        for node in self.net.nodes:
            for i, x in enumerate(node.inputs):
                if self.net.tensors[x].kind != "activation" and x not in self.roots:
                    self.roots[x] = self.input_layout(node, i)
            if isinstance(node.op, Reshape):
                r, f = self.reshape_of(node)
                self.roots[node.output] = (r, lambda s, f=f: f(s).out)
            else:
                self.roots[node.output] = (node.index, lambda s: s.out)

    def add_operator_terms(self) -> None:
        """Per operator its compute and output cost; per input edge its redistribution."""
        net, model, topo, needs, priced = self.net, self.model, self.topo, self.needs, self.priced
        for node in net.nodes:
            shapes = shapes_of(net, node)
            out_shape = net.tensors[node.output].shape
            if not isinstance(node.op, Reshape):
                back = needs[node.output]
                self.unary(node.index, lambda s, node=node, shapes=shapes, out_shape=out_shape, back=back:
                           compute_cost(node.op, s.inputs, s.out, shapes, out_shape, model)
                           + priced(("out", s.raw, s.out, out_shape, back),
                                    lambda: output_cost(s.raw, s.out, out_shape, back, model, topo))
                           + inner_cost(_inner(node, s, shapes, back and model.train), model, topo),
                           ("op", id(self.prob.cands[node.index]), back))
            for i, x in enumerate(node.inputs):
                back = needs[x] and i in node.op.grad_inputs
                _edge(self.prob, self.roots[x], self.input_layout(node, i), net.tensors[x].shape, back, priced,
                      self.unary, self.tables, model)

    def add_leaf_terms(self) -> None:
        """Per parameter or input: its memory and its mirror (gradient) AllReduce in its stored layout."""
        model, topo, priced, prob = self.model, self.topo, self.priced, self.prob
        for x, t in self.net.tensors.items():
            if t.kind == "activation" or x not in self.roots:
                continue
            r, f = self.roots[x]

            def leaf(s, f=f, t=t):
                lay = f(s)
                c = param_memory(lay, t.shape, model) if t.kind == "parameter" else ZERO
                if t.requires_grad:
                    m = priced(("mirror", lay, t.shape), lambda: mirror_cost(lay, t.shape, model, topo))
                    c = c + (m if t.kind == "parameter" else Cost(comm_s=m.param_comm_s,
                                                                   comm_bytes=m.param_comm_bytes))
                return c
            if r is None:
                prob.const = prob.const + leaf(None)
            else:
                lays = tuple(id(f(s)) for s in prob.cands[r])
                self.unary(r, leaf, ("leaf", lays, t.shape, t.kind, t.requires_grad))


def _edge(prob: Problem, src, dst, shape, back, priced, unary_fn, tables, model) -> None:
    (ra, fa), (rb, fb) = src, dst

    def move(la: Layout, lb: Layout) -> Cost:
        try:
            return transfer_cost(la, lb, shape, back, model, model.topology(prob.D))
        except ParasimError:  # a move redistribute() refuses
            return INFEASIBLE

    def cost(la: Layout, lb: Layout) -> Cost:
        return priced(("move", la, lb, shape, back), lambda: move(la, lb))

    if ra is None and rb is None:
        prob.const = prob.const + cost(fa(None), fb(None))
    elif ra is None or rb is None or ra == rb:
        v = ra if rb is None else rb
        fn = lambda s: cost(fa(s if ra is not None else None), fb(s if rb is not None else None))  # noqa: E731
        key = ("edge", tuple((id(fa(s if ra is not None else None)), id(fb(s if rb is not None else None)))
                             for s in prob.cands[v]), shape, back)
        unary_fn(v, fn, key)
    else:
        a, b = (ra, rb) if ra < rb else (rb, ra)
        la = [fa(s) for s in prob.cands[ra]]
        lb = [fb(s) for s in prob.cands[rb]]
        key = ("pair", tuple(map(id, la)), tuple(map(id, lb)), shape, back)
        if key not in tables:
            ua, ub = list(dict.fromkeys(la)), list(dict.fromkeys(lb))
            ia, ib = {l: k for k, l in enumerate(ua)}, {l: k for k, l in enumerate(ub)}
            small = np.array([[cost(x, y).objective(model) for y in ub] for x in ua])
            tables[key] = small[np.ix_([ia[l] for l in la], [ib[l] for l in lb])]
        m = tables[key] if ra == a else tables[key].T
        prob.pair[(a, b)] = prob.pair.get((a, b), 0) + m
        prob.terms.append(((ra, rb), lambda ch: cost(la[ch[ra]], lb[ch[rb]])))


def _inner(node, s, shapes, backward: bool) -> list:
    """The operator's inner collectives: the forward's, and the backward's when it runs."""
    inner = list(node.op.inner_steps(s, shapes, node.inputs[0]))
    return inner + list(node.op.inner_backward_steps(s, shapes, node.inputs[0])) if backward else inner
