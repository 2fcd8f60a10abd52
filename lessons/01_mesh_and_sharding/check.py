"""Autograder of lesson 01: every answer is compared with parasim's DeviceMesh and Layout."""

import numpy as np

from simulator import DeviceMesh, Layout, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, ok, own_plot_item, prediction_item

LESSON = {
    "title": "Device mesh and sharding notation",
    "goals": ["lay out devices on a named mesh (row-major, last axis fastest)",
              "find the communicator groups along an axis",
              "read X[I_dp, J_tp] and MindSpore strategies such as (2, 4), repeated calculation included"],
    "app_pages": ["Sharding & auto-parallel"],
    "requires": ["DeviceMesh", "Layout"],
    "minutes": 40,
    "prerequisites": [],
    # parasim's Layout answers these: it raises while your function runs
    "withhold": {"predicted_copies": ["simulator.layout:Layout.from_strategy", "simulator.layout:Layout.replica_groups"],
                 "plot_my_layout": ["simulator.layout:Layout.from_strategy", "simulator.layout:Layout.replica_groups"],
                 "why_neighbours_repeat": ["simulator.layout:Layout.from_strategy",
                                           "simulator.layout:Layout.replica_groups"]},
}

SHAPES = [(2, 4), (3, 2), (2, 2, 2), (4,), (2, 3, 2)]


def _mesh(shape) -> DeviceMesh:
    return DeviceMesh.from_shape(shape, [f"a{i}" for i in range(len(shape))])


def _shape_ranks() -> list:
    return [(shape, r) for shape in SHAPES for r in _mesh(shape).ranks]


def check_rank_of(s):
    "rank_of: row-major ranks equal DeviceMesh.rank_at"
    def case(shape, r):
        c = _mesh(shape).coords(r)
        return r, s.rank_of(c, shape), f"rank_of({c}, {shape}): the last axis varies fastest"
    return each_case(_shape_ranks(), case, rtol=0.0)


def check_coords_of(s):
    "coords_of inverts rank_of (DeviceMesh.coords)"
    def case(shape, r):
        return _mesh(shape).coords(r), tuple(s.coords_of(r, shape)), f"coords_of({r}, {shape}): use divmod from the last axis"
    return each_case(_shape_ranks(), case, rtol=0.0)


def check_groups(s):
    "groups_along equals DeviceMesh.groups for every axis"
    def case(shape, k):
        return (_mesh(shape).groups(f"a{k}"), [tuple(g) for g in s.groups_along(shape, k)],
                f"shape {shape}, axis {k}: ranks that differ only in coordinate {k}")
    return each_case([(shape, k) for shape in SHAPES for k in range(len(shape))], case, rtol=0.0)


def check_device_matrix(s):
    "device_matrix appends the repeat factor (MindSpore repeated calculation)"
    return each_case([((2, 4), 8), ((2, 2), 8), ((1, 2), 8), ((4, 1), 4)], lambda strategy, n: (
        Layout.from_strategy(strategy, n).mesh.shape, tuple(s.device_matrix(strategy, n)),
        f"strategy {strategy} on {n} devices"), rtol=0.0)


def check_local_block(s):
    "local_block equals Layout.from_strategy(...).shard(x)[rank]"
    x = np.arange(8 * 12, dtype=float).reshape(8, 12)
    for strategy, n in [((2, 4), 8), ((2, 2), 8), ((1, 4), 8), ((8, 1), 8), ((2, 3), 6)]:
        blocks = Layout.from_strategy(strategy, n, x.shape).shard(x)
        for r in range(n):
            got = np.asarray(s.local_block(x, strategy, n, r))
            if got.shape != blocks[r].shape or not np.array_equal(got, blocks[r]):
                return compare(blocks[r], got, f"strategy {strategy}, {n} devices, rank {r}: "
                                               f"the repeat axis is the fastest one")
    return ok()


def check_replicas(s):
    "replica_groups equals Layout.replica_groups"
    return each_case([((2, 4), 8), ((2, 2), 8), ((1, 2), 8), ((1, 1), 4)], lambda strategy, n: (
        Layout.from_strategy(strategy, n).replica_groups(), [tuple(g) for g in s.replica_groups(strategy, n)],
        f"strategy {strategy} on {n} devices: neighbours on the rep axis"), rtol=0.0)


def hidden_strategy() -> tuple[tuple[int, int], int]:
    """A 2-D strategy and a device count drawn when grading: cuts of 1, 2 or 4 per dimension, the
    devices 1, 2 or 4 times their product (so 1, 2 or 4 copies of every block)."""
    rng = hidden_random()
    strategy = (rng.choice([1, 2, 4]), rng.choice([1, 2, 4]))
    return strategy, strategy[0] * strategy[1] * rng.choice([1, 2, 4])


check_prediction = prediction_item(
    "prediction: how many devices hold each block of a strategy drawn when grading", ask="predicted_copies",
    answer=lambda strategy, n: len(Layout.from_strategy(strategy, n).replica_groups()[0]), case=hidden_strategy,
    hint=lambda strategy, n: f"strategy {strategy} on {n} devices: how many ranks share a block?", rtol=0.0)

def hidden_repeated() -> tuple[tuple[int, int], int, int]:
    """A strategy with copies (`hidden_strategy`, repeat factor >= 2) and a rank, drawn when grading."""
    while True:
        strategy, n = hidden_strategy()
        if n > strategy[0] * strategy[1]:
            return strategy, n, hidden_random().randrange(n)


def _last_copy(strategy, n, rank) -> int:
    return max(next(g for g in Layout.from_strategy(strategy, n).replica_groups() if rank in g))


check_explanation = explanation_item(
    "explanation: why ranks 0 and 1 hold the same block of (2, 2) on 8 devices (a choice, and the highest rank "
    "holding a drawn rank's block)",
    ask="why_neighbours_repeat", right="b", case=hidden_repeated, answer=_last_copy, rtol=0.0,
    reason=lambda strategy, n, rank: (f"strategy {strategy} on {n} devices, rank {rank}: the repeat factor "
                                      f"{n // (strategy[0] * strategy[1])} is the last, fastest axis, so the copies "
                                      f"are consecutive ranks"),
    hints={"a": "parasim places no node here: the ranks only sit on the device matrix [2, 2, 2]",
           "c": "the copies are the same block computed twice (replica_groups), not a memory balance",
           "d": "the strategy's values cut the tensor; the repeat factor is appended after them"})

check_plot_of_your_layout = own_plot_item(
    "your own layout: X's blocks on its device matrix, cell by cell, and who holds rank 0's block",
    ask="plot_my_layout", case=hidden_strategy, run=Layout.from_strategy,
    draw=lambda layout: viz.layout_grid(layout, (8, 8), name="X"),
    what=lambda strategy, n: f"X (8 x 8) under strategy {strategy} on {n} devices (chosen when grading)",
    hint="build the Layout from your device_matrix and a tensor map (Layout.from_device_matrix), then viz.layout_grid",
    measure=lambda layout: list(layout.replica_groups()[0]), measured="the ranks that hold rank 0's block")
