import numpy as np
import pytest

from simulator.collectives import algorithms, collective, make_plan, reference, run_plan
from simulator.collectives.execute import join_output, split_input
from simulator.collectives.trees import ceil_log2, pow2_floor
from simulator.errors import ParasimError

CASES = [(kind, algo) for kind, algos in algorithms().items() for algo in algos]


def _close(outs, refs):
    assert len(outs) == len(refs)
    for a, b in zip(outs, refs):
        if b is None:
            assert a is None
        else:
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind,algo", CASES)
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("size", [0, 1, 13, 24])
def test_every_algorithm_equals_reference(kind, algo, n, size):
    rng = np.random.default_rng(n * 100 + size)
    xs = [rng.standard_normal(size) for _ in range(n)]
    for op in (("sum", "mean", "max") if kind in ("all_reduce", "reduce_scatter", "reduce") else ("sum",)):
        root = (n - 1) // 2
        outs, plan, sent = collective(kind, xs, algo, op, root=root)
        _close(outs, reference(kind, xs, op, root=root))
        # every transfer's nbytes is exact: what really moved equals what the plan says
        assert sent == plan.bytes_sent_per_rank()
        assert plan.n == n and plan.kind == kind and plan.algo == algo


@pytest.mark.parametrize("kind,algo", [c for c in CASES if c[0] in ("reduce_scatter", "all_gather", "all_to_all")])
def test_along_axis_uneven(kind, algo):
    rng = np.random.default_rng(1)
    n = 3
    if kind == "all_gather":
        xs = [rng.standard_normal((r + 1, 4)) for r in range(n)]  # uneven parts
        axis = 0
    else:
        xs = [rng.standard_normal((2, 7)) for _ in range(n)]  # 7 columns cut 3, 2, 2
        axis = 1
    outs, _, _ = collective(kind, xs, algo, "sum", axis=axis)
    _close(outs, reference(kind, xs, "sum", axis=axis))


def test_reference_conventions():
    xs = [np.arange(13.0) + 100 * r for r in range(4)]
    rs = reference("reduce_scatter", xs)
    assert [len(p) for p in rs] == [4, 3, 3, 3]
    np.testing.assert_array_equal(rs[1], 4 * np.arange(4.0, 7.0) + 600)
    a2a = reference("all_to_all", xs)
    np.testing.assert_array_equal(a2a[0], np.concatenate([xs[i][:4] for i in range(4)]))
    np.testing.assert_array_equal(reference("all_reduce", [np.ones((2, 3))] * 3, "mean")[2], np.ones((2, 3)))
    assert reference("reduce", xs, root=2)[0] is None
    np.testing.assert_array_equal(reference("reduce", xs, "max", root=2)[2], xs[3])
    with pytest.raises(ParasimError, match="equal shapes"):
        reference("all_reduce", [np.ones(2), np.ones(3)])


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_textbook_bytes_and_steps(n):
    S = n * 8 * 1000  # divisible: no chunk rounding
    ar = make_plan("all_reduce", "ring", n, S, itemsize=8)
    assert len(ar.steps) == 2 * (n - 1)
    assert ar.bytes_sent_per_rank() == [2 * (n - 1) * S // n] * n
    for kind in ("reduce_scatter", "all_gather"):
        p = make_plan(kind, "ring", n, S, itemsize=8)
        assert len(p.steps) == n - 1 and p.bytes_sent_per_rank() == [(n - 1) * S // n] * n
        d = make_plan(kind, "direct", n, S, itemsize=8)
        assert len(d.steps) == 1 and d.bytes_sent_per_rank() == [(n - 1) * S // n] * n
    assert make_plan("all_reduce", "direct", n, S, itemsize=8).bytes_sent_per_rank() == [2 * (n - 1) * S // n] * n
    a2a = make_plan("all_to_all", "direct", n, S, itemsize=8)
    assert len(a2a.steps) == n - 1 and a2a.bytes_sent_per_rank() == [(n - 1) * S // n] * n
    # chain broadcast: bus factor 1, every rank but the last of the chain sends S
    bc = make_plan("broadcast", "ring", n, S, itemsize=8, root=1)
    assert sorted(bc.bytes_sent_per_rank()) == [0] + [S] * (n - 1) and len(bc.steps) == 2 * n - 2
    tb = make_plan("broadcast", "tree", n, S, root=0)
    assert len(tb.steps) == ceil_log2(n) and sum(tb.bytes_sent_per_rank()) == (n - 1) * S
    assert len(make_plan("barrier", "dissemination", n).steps) == ceil_log2(n)
    assert make_plan("barrier", "ring", n).total_bytes == 0


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_halving_doubling_figures(n):
    p = pow2_floor(n)
    S = 8 * 8 * 105
    plan = make_plan("all_reduce", "halving_doubling", n, S, itemsize=8)
    assert len(plan.steps) == 2 * (p.bit_length() - 1) + (2 if n != p else 0)
    sent = plan.bytes_sent_per_rank()
    participants = [2 * i + 1 for i in range(n - p)] + list(range(2 * (n - p), n))
    for r in participants:
        assert sent[r] == 2 * (p - 1) * S // p + (S if r < 2 * (n - p) else 0)
    # halving sends several chunks to one partner in a step; links() makes them one message
    first = plan.steps[1 if n != p else 0]
    assert all(v == S // 2 for v in first.links().values())


def test_run_plan_reads_before_writes_and_leaves_inputs():
    n = 4
    xs = [np.full(4, float(r)) for r in range(n)]
    plan = make_plan("all_reduce", "ring", n, 32, itemsize=8)
    bufs = [split_input("all_reduce", plan.n_chunks, n, r, xs[r]) for r in range(n)]
    before = [[c.copy() for c in b] for b in bufs]
    out = run_plan(plan, bufs, "sum")
    for b, c in zip(bufs, before):
        for x, y in zip(b, c):
            np.testing.assert_array_equal(x, y)
    for r in range(n):
        np.testing.assert_array_equal(join_output("all_reduce", n, r, out[r], like=xs[r]), np.full(4, 6.0))


def test_errors_name_valid_choices():
    with pytest.raises(ParasimError, match="valid: ring, direct"):
        make_plan("all_gather", "tree", 4, 16)
    with pytest.raises(ParasimError, match="valid kinds"):
        make_plan("gather", "ring", 4, 16)
    with pytest.raises(ParasimError, match="root 4"):
        make_plan("broadcast", "tree", 4, 16, root=4)
    with pytest.raises(ParasimError, match="whole number"):
        make_plan("all_reduce", "ring", 4, 13, itemsize=8)
    with pytest.raises(ParasimError, match="valid ops"):
        collective("all_reduce", [np.ones(2)] * 2, "ring", "prod")


def test_repr_is_readable():
    plan = make_plan("all_reduce", "ring", 2, 16, itemsize=8)
    assert repr(plan) == "Plan(all_reduce/ring, n=2, S=16 B, 2 steps, 2 slots)"
    assert repr(plan.steps[0].transfers[0]) == "1[1] += 0[1] (8 B)"
