"""Autograder of lesson 01: every answer is compared with parasim's DeviceMesh and Layout."""

import numpy as np

from simulator import DeviceMesh, Layout
from simulator.grading import compare, ok

LESSON = {
    "title": "Device mesh and sharding notation",
    "goals": ["lay out devices on a named mesh (row-major, last axis fastest)",
              "find the communicator groups along an axis",
              "read X[I_dp, J_tp] and MindSpore strategies such as (2, 4), repeated calculation included"],
    "app_pages": ["Sharding & auto-parallel"],
    "requires": ["DeviceMesh", "Layout"],
    "minutes": 40,
    "prerequisites": [],
}

SHAPES = [(2, 4), (3, 2), (2, 2, 2), (4,), (2, 3, 2)]


def check_rank_of(s):
    "rank_of: row-major ranks equal DeviceMesh.rank_at"
    for shape in SHAPES:
        mesh = DeviceMesh.from_shape(shape, [f"a{i}" for i in range(len(shape))])
        for r in mesh.ranks:
            c = mesh.coords(r)
            got = s.rank_of(c, shape)
            if got != r:
                return compare(r, got, f"rank_of({c}, {shape}): the last axis varies fastest")
    return ok()


def check_coords_of(s):
    "coords_of inverts rank_of (DeviceMesh.coords)"
    for shape in SHAPES:
        mesh = DeviceMesh.from_shape(shape, [f"a{i}" for i in range(len(shape))])
        for r in mesh.ranks:
            got = tuple(s.coords_of(r, shape))
            if got != mesh.coords(r):
                return compare(mesh.coords(r), got, f"coords_of({r}, {shape}): use divmod from the last axis")
    return ok()


def check_groups(s):
    "groups_along equals DeviceMesh.groups for every axis"
    for shape in SHAPES:
        names = [f"a{i}" for i in range(len(shape))]
        mesh = DeviceMesh.from_shape(shape, names)
        for k, name in enumerate(names):
            want = mesh.groups(name)
            got = [tuple(g) for g in s.groups_along(shape, k)]
            if got != want:
                return compare(want, got, f"shape {shape}, axis {k}: ranks that differ only in coordinate {k}")
    return ok()


def check_device_matrix(s):
    "device_matrix appends the repeat factor (MindSpore repeated calculation)"
    for strategy, n, want in [((2, 4), 8, (2, 4)), ((2, 2), 8, (2, 2, 2)), ((1, 2), 8, (1, 2, 4)),
                              ((4, 1), 4, (4, 1))]:
        mesh_shape = Layout.from_strategy(strategy, n).mesh.shape
        got = tuple(s.device_matrix(strategy, n))
        if got != mesh_shape:
            return compare(mesh_shape, got, f"strategy {strategy} on {n} devices")
    return ok()


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
    for strategy, n in [((2, 4), 8), ((2, 2), 8), ((1, 2), 8), ((1, 1), 4)]:
        want = Layout.from_strategy(strategy, n).replica_groups()
        got = [tuple(g) for g in s.replica_groups(strategy, n)]
        if got != want:
            return compare(want, got, f"strategy {strategy} on {n} devices: neighbours on the rep axis")
    return ok()
