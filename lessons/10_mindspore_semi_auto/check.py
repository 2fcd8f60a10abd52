"""Autograder of lesson 10: MindSpore semi-auto rules against parasim's explain()."""

import numpy as np

from simulator import AutoParallelContext, auto, auto_train, explain
from simulator.grading import compare, ok

LESSON = {
    "title": "MindSpore semi-auto parallel: shard strategies and inserted operators",
    "goals": ["derive a MatMul's device matrix from its shard strategy, repeated calculation included",
              "predict which collective MindSpore inserts in the forward pass and over which rank groups",
              "find the mirror groups that all-reduce a weight's gradient, and the bytes each rank sends",
              "check a sharded network against the stand-alone run",
              "shard a tiny language model vocabulary-parallel and read the collectives and bytes of its plan"],
    "app_pages": ["Sharding & auto-parallel"],
    "requires": ["explain", "AutoParallelContext", "auto"],
    "minutes": 50,
    "prerequisites": [1, 7],
}

CASES = [(((2, 4), (4, 1)), 8), (((2, 1), (1, 4)), 8), (((2, 1), (1, 2)), 8), (((1, 2), (2, 2)), 8),
         (((4, 2), (2, 1)), 8), (((1, 1), (1, 1)), 4), (((2, 2), (2, 1)), 8)]
SHAPES = [(64, 32), (32, 16)]


def _explain(strategy, n):
    ctx = AutoParallelContext("semi_auto_parallel", n)
    return explain(auto.ops.MatMul().shard(strategy), ctx, shapes=SHAPES).to_dict()


def check_device_matrix(s):
    "device_matrix equals explain()'s device matrix"
    for strategy, n in CASES:
        want = tuple(_explain(strategy, n)["device_matrix"])
        got = tuple(s.device_matrix(strategy, n))
        if got != want:
            return compare(want, got, f"strategy {strategy} on {n} devices: [a, k, c] then the repeat factor")
    return ok()


def check_forward_operator(s):
    "forward_operator names the collective explain() inserts after the MatMul"
    for strategy, n in CASES:
        fwd = _explain(strategy, n)["forward"]
        want = fwd[0]["op"] if fwd else None
        got = s.forward_operator(strategy)
        if got != want:
            return compare(want, got, f"strategy {strategy}: is the contracted dimension K cut?")
    return ok()


def check_forward_groups(s):
    "forward_groups equals the groups of the inserted AllReduce"
    for strategy, n in CASES:
        fwd = _explain(strategy, n)["forward"]
        if not fwd:
            continue
        want = [tuple(g) for g in fwd[0]["groups"]]
        got = [tuple(g) for g in s.forward_groups(strategy, n)]
        if got != want:
            return compare(want, got, f"strategy {strategy} on {n}: ranks that differ only in the k coordinate")
    return ok()


def check_mirror_groups(s):
    "weight_mirror_groups equals the groups that all-reduce W's gradient"
    for strategy, n in CASES:
        grads = _explain(strategy, n)["parameter_gradient"]
        want = [tuple(g) for g in grads[0]["groups"]] if grads else [(r,) for r in range(n)]
        got = sorted(tuple(g) for g in s.weight_mirror_groups(strategy, n))
        if got != want:
            return compare(want, got, f"strategy {strategy} on {n}: who holds the same W slice?")
    return ok()


def check_bytes(s):
    "forward_bytes_per_rank equals explain()'s bytes per rank"
    for strategy, n in CASES:
        fwd = _explain(strategy, n)["forward"]
        if not fwd:
            continue
        want = fwd[0]["bytes_per_rank"]
        got = s.forward_bytes_per_rank(strategy, SHAPES[0][0], SHAPES[1][1])
        if got != want:
            return compare(want, got, f"strategy {strategy}: the (M/a, N/c) float64 block")
    return ok()


LM_CASES = [(2, 8, 16, 32), (4, 8, 16, 32), (4, 12, 8, 24)]  # device_num, tokens, hidden, vocab


def _lm_strategy_problem(strategies, d, n, h, v):
    """Why strategies are not vocabulary parallel on d devices (None if they are), from the plan."""
    net, feeds = auto.tiny_lm_network(strategies, n, h, v)
    ctx = AutoParallelContext("semi_auto_parallel", d)
    try:
        ops = explain(net, ctx).to_dict()["operators"]
    except ValueError as e:  # an illegal strategy: explain() names the rule
        return str(e)
    table, logits = ops[0]["strategy"][0], ops[2]["strategy"][0]
    if table[0] != d or logits[-1] != d or ops[1]["strategy"][1][-1] != d:
        return f"on {d} devices the table's rows, wout's columns and the classes must each be cut {d} ways"
    parallel, single = auto_train(net, ctx, feeds, steps=1), auto.standalone(net, feeds, steps=1)
    if not np.allclose(parallel.losses, single.losses, rtol=1e-9):
        return f"loss {parallel.losses} differs from the stand-alone {single.losses}"
    return None


def check_lm_strategies(s):
    "lm_strategies shards the tiny LM vocabulary-parallel and it trains equal to stand-alone"
    for d, n, h, v in LM_CASES:
        problem = _lm_strategy_problem(s.lm_strategies(d), d, n, h, v)
        if problem:
            return compare("vocabulary parallel", problem, f"{d} devices: Gather ((D, 1), (1,)) cuts the table's rows")
    return ok()


def check_lm_collectives(s):
    "lm_forward_collectives names explain()'s forward collectives and their bytes per rank"
    for d, n, h, v in LM_CASES:
        net, _ = auto.tiny_lm_network((((d, 1), (1,)), ((1, 1), (1, d)), ((1, d), (1,))), n, h, v)
        fwd = explain(net, AutoParallelContext("semi_auto_parallel", d)).to_dict()["forward"]
        want = [(m["op"], m["bytes_per_rank"]) for m in fwd]
        got = [tuple(m) for m in s.lm_forward_collectives(n, h, d)]
        if got != want:
            return compare(want, got, f"{d} devices, {n} tokens, hidden {h}: the masked lookups are partial sums; "
                                      "the MatMul needs the whole (n, H) input; the loss reduces one float64 per row")
    return ok()
