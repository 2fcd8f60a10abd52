"""Redistribution steps: exact groups, local slicing first, and real execution on LocalRuntime."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.auto.compile import redistribution_program
from simulator.auto.redistribution import redistribute, unify
from simulator.errors import ParasimError
from simulator.layout import Layout
from simulator.mesh import DeviceMesh
from simulator.runtime import LocalRuntime

M248 = DeviceMesh([("d0", 2), ("d1", 4)])
M42 = DeviceMesh([("d0", 4), ("d1", 2)])
M8 = DeviceMesh([("d0", 8)])
M222 = DeviceMesh([("a", 2), ("b", 2), ("c", 2)])
RT = LocalRuntime(8)


def execute(src: Layout, dst: Layout, x: np.ndarray):
    steps = redistribute(src, dst, x.shape)
    prog = redistribution_program(steps, 8)
    RT.clear()
    RT.load({r: {"act/x": b} for r, b in src.shard(x).items()})
    RT.run(prog)
    return steps, {r: RT.fetch(r, ["act/y"])["act/y"] for r in range(8)}


def test_unify_nests_device_matrices():
    fine, a, b = unify(M248, M42)
    assert fine.shape == (2, 2, 2)
    assert a == {"d0": ("u0",), "d1": ("u1", "u2")} and b == {"d0": ("u0", "u1"), "d1": ("u2",)}
    with pytest.raises(ParasimError, match="do not nest"):
        unify(DeviceMesh([("a", 2), ("b", 3)]), DeviceMesh([("a", 3), ("b", 2)]))


def test_local_slice_before_gather_and_no_comm_for_pure_split():
    steps = redistribute(Layout(M248, [(), ()]), Layout(M248, [("d0",), ("d1",)]), (8, 8))
    assert [s.kind for s in steps] == ["split", "split"] and not any(s.is_comm for s in steps)


def test_partial_to_split_is_reduce_scatter_and_to_replicated_is_all_reduce():
    src = Layout(M248, [(), ()], "d1")
    rs = redistribute(src, Layout(M248, [("d1",), ()]), (8, 8))
    assert [s.kind for s in rs] == ["reduce_scatter"]
    assert rs[0].groups == ((0, 1, 2, 3), (4, 5, 6, 7)) and rs[0].nbytes == 8 * 8 * 8
    ar = redistribute(src, Layout(M248, [(), ()]), (8, 8))
    assert [s.kind for s in ar] == ["all_reduce"]


def test_moving_a_cut_between_dims_is_all_to_all():
    steps = redistribute(Layout(M248, [("d1",), ()]), Layout(M248, [(), ("d1",)]), (8, 8))
    assert [s.kind for s in steps] == ["all_to_all"]
    assert steps[0].groups == ((0, 1, 2, 3), (4, 5, 6, 7))


def _layouts(mesh, ndim, with_partial):
    axes = list(mesh.axis_names)
    out = []
    for assign in itertools.product(range(ndim + 2), repeat=len(axes)):
        dims = [[a for a, d in zip(axes, assign) if d == i] for i in range(ndim)]
        part = [a for a, d in zip(axes, assign) if d == ndim] if with_partial else []
        if not with_partial and ndim in assign:
            continue
        out.append(Layout(mesh, dims, part))
    return out


SRC = _layouts(M222, 2, True) + _layouts(M248, 2, True)
DST = _layouts(M222, 2, True) + _layouts(M42, 2, False) + _layouts(M8, 2, False)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SRC), st.sampled_from(DST), st.integers(0, 10**6))
def test_any_pair_of_layouts_executes_exactly(src, dst, seed):
    x = np.random.default_rng(seed).standard_normal((8, 16))
    steps, blocks = execute(src, dst, x)
    np.testing.assert_allclose(dst.unshard(blocks), x, rtol=1e-12, atol=1e-12)
    for r in range(8):  # every rank holds exactly its block (pending sums: any addends)
        if not dst.partial:
            np.testing.assert_allclose(blocks[r], x[dst.block_slices(r, x.shape)], rtol=1e-12)
