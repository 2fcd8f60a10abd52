import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ParasimError
from simulator.layout import Layout, P, Partial, PartitionSpec, Replicate, Shard
from simulator.mesh import DeviceMesh

MESH = DeviceMesh({"dp": 2, "tp": 4})


# ---- MindSpore operator_parallel examples -----------------------------------------------------------------------
def test_matmul_2_4_4_1_on_8_devices_device_matrix_and_groups():
    # ((2,4),(4,1)): device matrix [a, k, c] = [2, 4, 1]; X map [2, 1], W map [1, 0],
    # output map [2, 0] with a pending sum over k.
    x = Layout.from_device_matrix([2, 4, 1], [2, 1])
    w = Layout.from_device_matrix([2, 4, 1], [1, 0])
    y = Layout.from_device_matrix([2, 4, 1], [2, 0], partial=[1])
    assert x.mesh.shape == (2, 4, 1) and x.mesh.axis_names == ("d0", "d1", "d2")
    assert x.to_strategy() == (2, 4) and w.to_strategy() == (4, 1) and y.to_strategy() == (2, 1)
    # forward AllReduce groups resolve y's partial sum over k
    assert y.partial_groups() == [(0, 1, 2, 3), (4, 5, 6, 7)]
    # the weight's gradient (mirror) groups: ranks holding the same slice of W
    assert w.replica_groups() == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert repr(y) == "X[I_d0, J_d2]{U_d1}"
    assert Layout.from_device_matrix([2, 4, 1], [2, 0], partial=["d1"]) == y


def test_matmul_2_1_1_4_output_blocks_and_x_row_block():
    # ((2,1),(1,4)): device matrix [2, 1, 4]; output map [2, 0]; X map [2, 1]
    out = Layout.from_device_matrix([2, 1, 4], [2, 0])
    x = Layout.from_device_matrix([2, 1, 4], [2, 1])
    for r in range(8):
        assert out.block_index(r) == (r // 4, r % 4)
    assert x.devices_holding((0, 0)) == (0, 1, 2, 3)
    assert x.devices_holding((1, 0)) == (4, 5, 6, 7)
    assert out.partial == ()
    # The matmul done block by block reproduces the single-device product.
    rng = np.random.default_rng(0)
    X, W = rng.normal(size=(4, 6)), rng.normal(size=(6, 8))
    w = Layout.from_device_matrix([2, 1, 4], [1, 0])
    xs, ws = x.shard(X), w.shard(W)
    ys = {r: xs[r] @ ws[r] for r in range(8)}
    np.testing.assert_allclose(out.unshard(ys), X @ W, rtol=1e-9)


def test_matmul_with_contracting_split_needs_the_partial_sum():
    x = Layout.from_device_matrix([2, 4, 1], [2, 1])
    w = Layout.from_device_matrix([2, 4, 1], [1, 0])
    y = Layout.from_device_matrix([2, 4, 1], [2, 0], partial=[1])
    rng = np.random.default_rng(1)
    X, W = rng.normal(size=(4, 8)), rng.normal(size=(8, 3))
    xs, ws = x.shard(X), w.shard(W)
    np.testing.assert_allclose(y.unshard({r: xs[r] @ ws[r] for r in range(8)}), X @ W, rtol=1e-9)


def test_repeated_calculation_appends_rep_on_the_right():
    lay = Layout.from_strategy((2, 2), 8, tensor_shape=(4, 6))
    assert repr(lay.mesh) == "Mesh(d0=2, d1=2, rep=2)"
    assert lay.to_tensor_map() == ((2, 2, 2), (2, 1))
    assert lay.block_index(0) == lay.block_index(1)
    assert lay.block_index(1) != lay.block_index(2)
    assert lay.replica_groups() == [(0, 1), (2, 3), (4, 5), (6, 7)]
    blocks = lay.shard(np.arange(24).reshape(4, 6))
    np.testing.assert_array_equal(blocks[0], blocks[1])
    assert blocks[0].shape == (2, 3)
    assert Layout.from_strategy((2, 4), 8).mesh.axis_names == ("d0", "d1")


# ---- shapes, blocks, notation -----------------------------------------------------------------------
def test_notation_forms():
    assert Layout(MESH, ["dp", "tp"]).notation("X", ["M", "K"]) == "X[M_dp, K_tp]"
    assert Layout(MESH, [("dp", "tp"), None]).notation("X", ["M", "N"]) == "X[M_{dp,tp}, N]"
    assert Layout(MESH, [None, None], partial="tp").notation("X", ["M", "N"]) == "X[M, N]{U_tp}"
    assert repr(Layout(MESH, [None, "tp"])) == "X[I, J_tp]"
    three = DeviceMesh({"a": 2, "b": 2, "c": 2})
    assert repr(Layout(three, ["a", None], partial=("c", "b"))) == "X[I_a, J]{U_{b,c}}"
    assert repr(Layout(MESH, [])) == "X[]"


def test_local_shape_block_index_and_major_minor_order():
    lay = Layout(MESH, [("tp", "dp"), None])  # tp major, dp minor
    assert lay.splits == (8, 1)
    assert lay.local_shape((16, 3)) == (2, 3)
    # rank r: dp = r // 4, tp = r % 4 -> block tp * 2 + dp
    assert [lay.block_index(r)[0] for r in range(8)] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert lay.replica_groups() == [(r,) for r in range(8)]


def test_shard_copies_and_replicas_on_replicated_axes():
    lay = Layout(MESH, [None, "tp"])
    a = np.arange(32.0).reshape(4, 8)
    blocks = lay.shard(a)
    blocks[0][0, 0] = -1.0
    assert a[0, 0] == 0.0
    np.testing.assert_array_equal(blocks[1], blocks[5])
    np.testing.assert_array_equal(blocks[1], a[:, 2:4])
    assert lay.replica_groups() == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert lay.devices_holding((0, 3)) == (3, 7)


def test_unshard_refuses_disagreeing_replicas_and_missing_ranks():
    lay = Layout(MESH, ["dp", None])
    blocks = lay.shard(np.ones((4, 2)))
    blocks[6] = blocks[6] + 0.5
    with pytest.raises(ParasimError, match="replicas disagree: ranks 4 and 6"):
        lay.unshard(blocks)
    del blocks[6]
    with pytest.raises(ParasimError, match=r"missing ranks \[6\]"):
        lay.unshard(blocks)


def test_partial_unshard_sums_addends():
    lay = Layout(MESH, ["dp", None], partial="tp")
    # rank r holds (r + 1) * ones: the sum over tp groups {0..3}, {4..7}
    blocks = {r: np.full((2, 3), float(r + 1)) for r in range(8)}
    out = lay.unshard(blocks)
    np.testing.assert_array_equal(out[:2], np.full((2, 3), 1 + 2 + 3 + 4.0))
    np.testing.assert_array_equal(out[2:], np.full((2, 3), 5 + 6 + 7 + 8.0))
    ints = np.arange(12).reshape(4, 3)
    assert np.array_equal(lay.unshard(lay.shard(ints)), ints)


@pytest.mark.parametrize("mesh, dims, partial", [
    (DeviceMesh({"x": 8}), [("x",)], ()),
    (DeviceMesh({"x": 3}), [None, "x"], ()),
    (DeviceMesh({"dp": 2, "tp": 3}), ["tp", None, "dp"], ()),
    (DeviceMesh({"a": 2, "b": 2, "c": 2}), [("c", "a"), None], ("b",)),
    (DeviceMesh({"pp": 2, "tp": 2}, device_ids=[4, 5, 6, 7]), [None, "tp"], ("pp",)),
    (DeviceMesh({"a": 5}), [None], ()),
])
def test_shard_unshard_round_trip_several_meshes(mesh, dims, partial):
    lay = Layout(mesh, dims, partial)
    shape = tuple(6 * s for s in lay.splits)
    a = np.random.default_rng(2).normal(size=shape)
    blocks = lay.shard(a)
    assert set(blocks) == set(mesh.ranks)
    assert all(b.shape == lay.local_shape(shape) for b in blocks.values())
    np.testing.assert_allclose(lay.unshard(blocks), a, rtol=1e-9)


# ---- conversions ---------------------------------------------------------------------------------
def test_placement_and_spec_reprs():
    assert repr(P("dp", None)) == "P('dp', None)"
    assert repr(P(("dp", "tp"), None, unreduced=["sp"])) == "P(('dp', 'tp'), None, unreduced={'sp'})"
    assert P(("dp",), ()) == P("dp", None)
    assert (repr(Shard(0)), repr(Replicate()), repr(Partial())) == ("Shard(0)", "Replicate()", "Partial(sum)")


def test_conversions_on_a_known_layout():
    lay = Layout(MESH, [None, "tp"], partial="dp")
    assert lay.to_partition_spec() == PartitionSpec(None, "tp", unreduced=("dp",))
    assert lay.to_placements() == (Partial(), Shard(1))
    assert Layout.from_placements((Partial(), Shard(-1)), MESH, 2) == lay
    assert Layout.from_partition_spec(P(None, "tp", unreduced={"dp"}), MESH) == lay
    assert Layout.from_partition_spec(P("dp"), MESH, ndim=3) == Layout(MESH, ["dp", None, None])
    assert Layout.from_placements((Shard(0), Shard(0)), MESH, 1).dims == (("dp", "tp"),)


def test_placements_refuse_non_mesh_order_split():
    with pytest.raises(ParasimError, match="mesh-axis order"):
        Layout(MESH, [("tp", "dp")]).to_placements()


@st.composite
def layouts(draw):
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    mesh = DeviceMesh.from_shape(shape, [f"m{i}" for i in range(len(shape))])
    ndim = draw(st.integers(0, 3))
    dims = [[] for _ in range(ndim)]
    partial = []
    for axis in draw(st.permutations(mesh.axis_names)):
        where = draw(st.integers(-2, ndim - 1))
        if where >= 0:
            dims[where].append(axis)
        elif where == -2:
            partial.append(axis)
    return Layout(mesh, dims, partial)


@settings(max_examples=80, deadline=None)
@given(layouts())
def test_round_trips_spec_tensor_map_placements_and_data(lay):
    assert Layout.from_partition_spec(lay.to_partition_spec(), lay.mesh, lay.ndim) == lay
    matrix, tmap = lay.to_tensor_map()
    names = lay.mesh.axis_names
    back = Layout.from_device_matrix(matrix, tmap, partial=[len(names) - 1 - names.index(a)
                                                            for a in lay.partial])
    assert back.dims == tuple(tuple(f"d{names.index(a)}" for a in axes) for axes in lay.dims)
    assert back.to_strategy() == lay.to_strategy()
    mesh_order = all(axes == tuple(a for a in names if a in axes) for axes in lay.dims)
    if mesh_order:
        assert Layout.from_placements(lay.to_placements(), lay.mesh, lay.ndim) == lay
    else:
        with pytest.raises(ParasimError):
            lay.to_placements()
    shape = tuple(2 * s for s in lay.splits)
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    assert np.array_equal(lay.unshard(lay.shard(a)), a)
    # replica groups partition the ranks; members hold the same block
    groups = lay.replica_groups()
    assert sorted(r for g in groups for r in g) == list(lay.mesh.ranks)
    for g in groups:
        assert len({lay.block_index(r) for r in g}) == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(1, 4))
def test_strategy_round_trip(strategy, r):
    n = int(np.prod(strategy)) * r
    lay = Layout.from_strategy(tuple(strategy), n)
    assert lay.to_strategy() == tuple(strategy)
    assert lay.mesh.size == n
    assert ("rep" in lay.mesh.axis_names) == (r > 1)
    assert len(lay.replica_groups()[0]) == r


# ---- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda: Layout.from_strategy((2, 4), 8, tensor_shape=(4, 10)), "dim 1 of size 10 cannot be split 4 ways"),
    (lambda: Layout.from_strategy((2, 8), 8), "strategy (2, 8) uses 16 devices but only 8 are available"),
    (lambda: Layout.from_strategy((3, 1), 8), "strategy (3, 1) uses 3 devices, which does not divide the 8"),
    (lambda: Layout.from_strategy((2, 4), 8, tensor_shape=(4, 4, 4)), "strategy (2, 4) has 2 values but the tensor has rank 3"),
    (lambda: Layout.from_strategy((0, 2), 8), "strategy (0, 2): every value must be an integer >= 1"),
    (lambda: Layout.from_strategy((2.0, 2), 8), "every value must be an integer"),
    (lambda: Layout(MESH, ["tp", "tp"]), "mesh axis 'tp' is used twice (by dim 0 and by dim 1)"),
    (lambda: Layout(MESH, ["tp"], partial="tp"), "used twice (by dim 0 and by the partial sums)"),
    (lambda: Layout(MESH, ["pp"]), "unknown mesh axis 'pp'; this mesh has axes ['dp', 'tp']"),
    (lambda: Layout.from_device_matrix([2, 4], [2, 0]), "tensor map entry 2 is outside -1..1"),
    (lambda: Layout(MESH, ["dp"]).local_shape((4, 4)), "shape (4, 4) has rank 2"),
    (lambda: Layout(MESH, ["dp"]).devices_holding((2,)), "block (2,) does not exist"),
    (lambda: Layout.from_placements((Shard(0),), MESH, 1), "1 placements given"),
    (lambda: Layout.from_placements((Shard(2), Replicate()), MESH, 2), "Shard(2) on mesh axis 'dp'"),
    (lambda: Layout.from_partition_spec(P("dp", "tp"), MESH, ndim=1), "has 2 entries but the tensor has rank 1"),
    (lambda: Partial("max"), "Partial(max) is not supported"),
])
def test_errors_name_rule_and_numbers(make, message):
    with pytest.raises(ParasimError) as e:
        make()
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_numpy_strategy_values_and_pickle():
    import pickle
    lay = Layout.from_strategy(np.array([2, 2]), 8)
    assert lay.to_strategy() == (2, 2)
    assert pickle.loads(pickle.dumps(lay)) == lay


def test_reduced_layout_after_allreduce_matches_the_sum():
    y = Layout(MESH, ["dp", None], partial="tp")
    blocks = y.shard(np.arange(8.0).reshape(4, 2))
    total = y.unshard(blocks)
    summed = {r: sum(blocks[q] for q in y.mesh.group_of(r, "tp")) for r in MESH.ranks}
    assert repr(y.reduced()) == "X[I_dp, J]"
    np.testing.assert_array_equal(y.reduced().unshard(summed), total)
    with pytest.raises(ParasimError, match="needs a DeviceMesh"):
        Layout({"dp": 2}, ["dp"])
