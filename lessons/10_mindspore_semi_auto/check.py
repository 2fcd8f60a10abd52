"""Autograder of lesson 10: MindSpore semi-auto rules against parasim's explain()."""

import numpy as np

from simulator import AutoParallelContext, Layout, auto, auto_train, explain, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, ok, own_plot_item, prediction_item

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
    # parasim's plan answers these: it raises while your function runs
    "withhold": {"predicted_mirror_size": ["simulator.auto.explain:explain"],
                 "why_forward_allreduce": ["simulator.auto.explain:explain"],
                 "plot_my_x_layout": ["simulator.auto.explain:explain", "simulator.layout:Layout.from_strategy"]},
}

CASES = [(((2, 4), (4, 1)), 8), (((2, 1), (1, 4)), 8), (((2, 1), (1, 2)), 8), (((1, 2), (2, 2)), 8),
         (((4, 2), (2, 1)), 8), (((1, 1), (1, 1)), 4), (((2, 2), (2, 1)), 8)]
SHAPES = [(64, 32), (32, 16)]


def _explain(strategy, n):
    ctx = AutoParallelContext("semi_auto_parallel", n)
    return explain(auto.ops.MatMul().shard(strategy), ctx, shapes=SHAPES).to_dict()


def check_device_matrix(s):
    "device_matrix equals explain()'s device matrix"
    return each_case(CASES, lambda strategy, n: (
        tuple(_explain(strategy, n)["device_matrix"]), tuple(s.device_matrix(strategy, n)),
        f"strategy {strategy} on {n} devices: [a, k, c] then the repeat factor"), rtol=0.0)


def check_forward_operator(s):
    "forward_operator names the collective explain() inserts after the MatMul"
    def case(strategy, n):
        fwd = _explain(strategy, n)["forward"]
        got = s.forward_operator(strategy)
        # no collective: None is the answer (compare reads a None as a function that forgot to return)
        return (fwd[0]["op"] if fwd else "None"), ("None" if got is None else got), \
            f"strategy {strategy}: is the contracted dimension K cut?"
    return each_case(CASES, case, rtol=0.0)


def check_forward_groups(s):
    "forward_groups equals the groups of the inserted AllReduce"
    def case(strategy, n):
        fwd = _explain(strategy, n)["forward"]
        if fwd:
            return ([tuple(g) for g in fwd[0]["groups"]], [tuple(g) for g in s.forward_groups(strategy, n)],
                    f"strategy {strategy} on {n}: ranks that differ only in the k coordinate")
    return each_case(CASES, case, rtol=0.0)


def check_mirror_groups(s):
    "weight_mirror_groups equals the groups that all-reduce W's gradient"
    def case(strategy, n):
        grads = _explain(strategy, n)["parameter_gradient"]
        return ([tuple(g) for g in grads[0]["groups"]] if grads else [(r,) for r in range(n)],
                sorted(tuple(g) for g in s.weight_mirror_groups(strategy, n)),
                f"strategy {strategy} on {n}: who holds the same W slice?")
    return each_case(CASES, case, rtol=0.0)


def check_bytes(s):
    "forward_bytes_per_rank equals explain()'s bytes per rank"
    def case(strategy, n):
        fwd = _explain(strategy, n)["forward"]
        if fwd:
            return (fwd[0]["bytes_per_rank"], s.forward_bytes_per_rank(strategy, SHAPES[0][0], SHAPES[1][1]),
                    f"strategy {strategy}: the (M/a, N/c) float64 block")
    return each_case(CASES, case, rtol=0.0)


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
    def case(d, n, h, v):
        net, _ = auto.tiny_lm_network((((d, 1), (1,)), ((1, 1), (1, d)), ((1, d), (1,))), n, h, v)
        fwd = explain(net, AutoParallelContext("semi_auto_parallel", d)).to_dict()["forward"]
        return [(m["op"], m["bytes_per_rank"]) for m in fwd], [tuple(m) for m in s.lm_forward_collectives(n, h, d)], \
            (f"{d} devices, {n} tokens, hidden {h}: the masked lookups are partial sums; the MatMul needs the whole "
             "(n, H) input; the loss reduces one float64 per row")
    return each_case(LM_CASES, case, rtol=0.0)


def hidden_matmul() -> tuple[tuple[tuple[int, int], tuple[int, int]], int]:
    """A MatMul strategy ((a, k), (k, c)) on 8 devices drawn when grading (a k c of 1 to 8)."""
    rng = hidden_random()
    while True:
        a, k, c = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
        if 8 % (a * k * c) == 0:
            return ((a, k), (k, c)), 8


def _mirror_size(strategy, n) -> int:
    grads = _explain(strategy, n)["parameter_gradient"]
    return len(grads[0]["groups"][0]) if grads else 1


def _x_layout(strategy, n):
    """X's layout as explain() lays the MatMul out: X's tensor map [2, 1] on its device matrix
    [a, k, c] (the repeat factor appended by device_num)."""
    return Layout.from_device_matrix(_explain(strategy, n)["device_matrix"][:3], [2, 1], device_num=n)


check_prediction = prediction_item(
    "prediction: how many ranks all-reduce W's gradient together, for a strategy drawn when grading",
    ask="predicted_mirror_size", case=hidden_matmul, answer=_mirror_size, rtol=0.0,
    hint=lambda strategy, n: f"strategy {strategy} on {n} devices: W (k, c) is whole along a and the repeat axis")

def hidden_k_cut() -> tuple:
    """A MatMul strategy drawn when grading (`hidden_matmul`) whose K is cut (an AllReduce follows it)."""
    while True:
        strategy, n = hidden_matmul()
        if strategy[0][1] > 1:
            return strategy, n


def _partial_sum_bytes(strategy, n) -> int:
    return _explain(strategy, n)["forward"][0]["bytes_per_rank"]


check_explanation = explanation_item(
    "explanation: why ((2, 4), (4, 1)) inserts an AllReduce after the MatMul (a choice, and the bytes each rank's "
    "partial sum holds for a strategy drawn when grading)", ask="why_forward_allreduce",
    right="b", case=hidden_k_cut, answer=_partial_sum_bytes, rtol=0.0,
    reason=lambda strategy, n: (f"strategy {strategy} on {n}: each rank's X slice times its W slice is a whole "
                                f"(64/a) x (16/c) block of the output, partial along K (float64, 8 bytes)"),
    hints={"a": "c = 1: the output's columns are not cut, there is nothing to gather",
           "c": "the forward operator is inserted in the forward pass; W's gradient has its own mirror groups (part 3)",
           "d": "4 x 2 x 1 = 8 devices: no repeat factor here"})

check_plot_of_your_layout = own_plot_item(
    "your own layout: X's blocks for a strategy drawn when grading, cell by cell, and who holds rank 0's block",
    ask="plot_my_x_layout", case=hidden_matmul, run=_x_layout,
    draw=lambda layout: viz.layout_grid(layout, (8, 8), name="X"),
    what=lambda strategy, n: f"X (8 x 8) of MatMul strategy {strategy} on {n} devices (chosen when grading)",
    hint="Layout.from_device_matrix([a, k, c], [2, 1], device_num=n) (X's map), then viz.layout_grid(layout, (8, 8), name='X')",
    measure=lambda layout: list(layout.replica_groups()[0]), measured="the ranks that hold rank 0's block of X")
