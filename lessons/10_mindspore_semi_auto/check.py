"""Autograder of lesson 10: MindSpore semi-auto rules against parasim's explain()."""

from simulator import AutoParallelContext, auto, explain
from simulator.grading import compare, ok

LESSON = {
    "title": "MindSpore semi-auto parallel: shard strategies and inserted operators",
    "goals": ["derive a MatMul's device matrix from its shard strategy, repeated calculation included",
              "predict which collective MindSpore inserts in the forward pass and over which rank groups",
              "find the mirror groups that all-reduce a weight's gradient, and the bytes each rank sends",
              "check a sharded network against the stand-alone run"],
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
