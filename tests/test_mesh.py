import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ParasimError
from simulator.mesh import DeviceMesh


def test_construct_two_ways_and_repr():
    a = DeviceMesh({"dp": 2, "tp": 4})
    b = DeviceMesh.from_shape((2, 4), ("dp", "tp"))
    assert a == b and hash(a) == hash(b)
    assert repr(a) == "Mesh(dp=2, tp=4)"
    assert a.size == 8 and a.shape == (2, 4) and a.axis_names == ("dp", "tp")
    assert a.axes == {"dp": 2, "tp": 4} and a.axis_size("tp") == 4
    assert DeviceMesh({"x": np.int64(3)}).shape == (3,)


def test_frozen():
    m = DeviceMesh({"dp": 2})
    with pytest.raises(AttributeError):
        m.shape = (4,)


def test_row_major_last_axis_fastest():
    m = DeviceMesh({"dp": 2, "tp": 4})
    assert [m.coords(r) for r in range(8)] == list(itertools.product(range(2), range(4)))
    assert m.rank_at((1, 2)) == 6
    assert m.rank_at({"tp": 3, "dp": 0}) == 3
    assert m.coord(6, "tp") == 2


def test_groups_along_one_and_several_axes():
    m = DeviceMesh({"pp": 2, "dp": 2, "tp": 2})
    assert m.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert m.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert m.groups("pp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert m.groups(("dp", "tp")) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert m.groups(["tp", "dp"]) == m.groups(("dp", "tp"))
    assert m.groups(()) == [(r,) for r in range(8)]
    assert m.groups(("pp", "dp", "tp")) == [tuple(range(8))]
    assert m.group_of(5, "dp") == (5, 7)
    assert m.group_of(5, ("pp", "tp")) == (0, 1, 4, 5)


def test_groups_partition_the_mesh_and_differ_only_along_axes():
    m = DeviceMesh({"a": 3, "b": 2, "c": 2})
    for axes in [("a",), ("b",), ("a", "c"), ("b", "c")]:
        groups = m.groups(axes)
        assert sorted(r for g in groups for r in g) == list(range(12))
        size = np.prod([m.axis_size(x) for x in axes])
        for g in groups:
            assert len(g) == size
            others = {tuple(c for c, n in zip(m.coords(r), m.axis_names) if n not in axes) for r in g}
            assert len(others) == 1


def test_explicit_device_ids_and_submesh():
    m = DeviceMesh({"pp": 2, "tp": 4})
    stage1 = m.submesh(pp=1)
    assert stage1 == DeviceMesh({"tp": 4}, device_ids=[4, 5, 6, 7])
    assert repr(stage1) == "Mesh(tp=4, devices=[4, 5, 6, 7])"
    assert stage1.groups("tp") == [(4, 5, 6, 7)]
    assert stage1.coords(6) == (2,)
    half = m.submesh(tp=slice(2, 4))
    assert half.shape == (2, 2) and half.device_ids == (2, 3, 6, 7)
    assert half.groups("pp") == [(2, 6), (3, 7)]
    assert m[{"pp": 0}].device_ids == (0, 1, 2, 3)
    assert m.submesh(pp=-1) == stage1
    assert 6 in stage1 and 0 not in stage1


def test_groups_follow_coordinates_with_permuted_ids():
    m = DeviceMesh({"x": 2, "y": 2}, device_ids=[3, 2, 1, 0])
    assert m.rank_at((0, 0)) == 3
    assert m.groups("y") == [(1, 0), (3, 2)]
    assert m.coords(0) == (1, 1)


@pytest.mark.parametrize("make, words", [
    (lambda: DeviceMesh([("dp", 2), ("dp", 4)]), ["distinct", "dp"]),
    (lambda: DeviceMesh({"dp": 0}), ["size 0", ">= 1"]),
    (lambda: DeviceMesh({"dp": 2.5}), ["integers"]),
    (lambda: DeviceMesh({"dp": 2}, device_ids=[0, 1, 2]), ["2 positions", "3 device ids"]),
    (lambda: DeviceMesh({"dp": 2}, device_ids=[1, 1]), ["distinct", "[1]"]),
    (lambda: DeviceMesh({"dp": 2, "tp": 2}).groups("pp"), ["'pp'", "['dp', 'tp']"]),
    (lambda: DeviceMesh({"dp": 2}).submesh(tp=0), ["unknown", "'tp'"]),
    (lambda: DeviceMesh({"dp": 2}).submesh(dp=2), ["outside 0..1"]),
    (lambda: DeviceMesh({"dp": 2}).coords(5), ["rank 5", "0..1"]),
    (lambda: DeviceMesh.from_shape((2, 2), ("a",)), ["2 axes", "1 names"]),
])
def test_errors_are_one_line_and_name_the_numbers(make, words):
    with pytest.raises(ParasimError) as e:
        make()
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_rank_coords_round_trip_and_groups_partition(shape, data):
    names = [f"a{i}" for i in range(len(shape))]
    n = int(np.prod(shape))
    ids = data.draw(st.permutations(range(10, 10 + n)))
    m = DeviceMesh.from_shape(shape, names, device_ids=ids)
    expected_order = list(itertools.product(*(range(s) for s in shape)))
    assert [m.coords(r) for r in ids] == expected_order
    for r in ids:
        assert m.rank_at(m.coords(r)) == r
    axes = data.draw(st.sets(st.sampled_from(names)))
    groups = m.groups(axes)
    assert groups == sorted(groups)
    assert sorted(r for g in groups for r in g) == sorted(ids)
    for r in ids:
        assert r in m.group_of(r, axes)


def test_pickles_for_ray_and_accepts_numpy_ranks():
    import pickle
    m = DeviceMesh({"pp": 2, "tp": 2}, device_ids=[7, 5, 3, 1])
    back = pickle.loads(pickle.dumps(m))
    assert back == m and back.coords(3) == (1, 0)
    assert m.coords(np.int64(5)) == (0, 1)
