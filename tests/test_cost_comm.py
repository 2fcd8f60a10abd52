"""Collective costs: nccl-tests bus bandwidth, closed forms, priced plans, topology awareness."""

import math

import pytest

from simulator.collectives.plan import Plan, PlanStep, Transfer
from simulator.cost.comm import (
    ALGOS,
    KINDS,
    algbw_Bps,
    bus_bandwidth_factor,
    closed_form_time_s,
    collective_time_s,
    plan_time,
)
from simulator.errors import ParasimError
from simulator.topology import Link, Topology

NVLINK = Link(2e-6, 300e9)
IB = Link(5e-6, 25e9)


def test_bus_bandwidth_factors_match_nccl_tests():
    n = 8
    assert bus_bandwidth_factor("all_reduce", n) == 2 * 7 / 8
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert bus_bandwidth_factor(kind, n) == 7 / 8
    assert bus_bandwidth_factor("broadcast", n) == 1 and bus_bandwidth_factor("reduce", n) == 1
    with pytest.raises(ParasimError):
        bus_bandwidth_factor("gossip", 4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3, 8, 12])
def test_ring_busbw_equals_link_bandwidth_for_large_messages(kind, n):
    S = 1e13                                     # large-message limit: latency negligible
    t = closed_form_time_s(kind, "ring", S, n, NVLINK)
    busbw = algbw_Bps(kind, S, t) * bus_bandwidth_factor(kind, n)
    assert busbw == pytest.approx(NVLINK.bandwidth_Bps, rel=1e-6)


def test_ring_all_reduce_alpha_beta_formula():
    n, S = 8, 1e8
    expected = 2 * (n - 1) * NVLINK.latency_s + 2 * (n - 1) / n * S / NVLINK.bandwidth_Bps
    assert closed_form_time_s("all_reduce", "ring", S, n, NVLINK) == pytest.approx(expected, rel=1e-12)


def test_latency_terms_per_algorithm():
    link = Link(1e-5, 1e9)
    n = 16                                       # tiny message: only alpha counts
    assert closed_form_time_s("all_reduce", "ring", 0, n, link) == pytest.approx(2 * 15 * 1e-5)
    assert closed_form_time_s("all_reduce", "tree", 0, n, link) == pytest.approx(2 * 4 * 1e-5)
    assert closed_form_time_s("all_reduce", "halving_doubling", 0, n, link) == pytest.approx(2 * 4 * 1e-5)
    assert closed_form_time_s("all_reduce", "direct", 0, n, link) == pytest.approx(2 * 1e-5)
    for algo in ALGOS:
        for kind in KINDS:
            assert closed_form_time_s(kind, algo, 1e6, 1, link) == 0.0


def _ring_all_reduce_plan(n, S):
    """Hand-built ring all-reduce: n-1 reduce-scatter steps, n-1 all-gather steps, chunks S/n."""
    c = S // n
    steps = []
    for s in range(n - 1):
        steps.append(PlanStep(tuple(Transfer(r, (r + 1) % n, (r - s) % n, (r - s) % n, c, True) for r in range(n))))
    for s in range(n - 1):
        steps.append(PlanStep(tuple(Transfer(r, (r + 1) % n, (r + 1 - s) % n, (r + 1 - s) % n, c) for r in range(n))))
    return Plan("all_reduce", "ring", n, n, S, tuple(steps))


def test_plan_time_matches_closed_form_on_a_uniform_link():
    n, S = 8, 8 * 10**7
    plan = _ring_all_reduce_plan(n, S)
    t = plan_time(plan, lambda a, b: (NVLINK.latency_s, NVLINK.bandwidth_Bps))
    assert t == pytest.approx(closed_form_time_s("all_reduce", "ring", S, n, NVLINK), rel=1e-12)


def test_plan_time_is_bounded_by_the_slowest_link_of_each_step():
    n, S = 4, 4 * 10**6
    plan = _ring_all_reduce_plan(n, S)
    topo = Topology(4, 2, NVLINK, IB)            # ring 0-1-2-3-0 crosses nodes twice
    t = plan_time(plan, topo.link_of)
    assert t == pytest.approx(2 * (n - 1) * IB.time_s(S / n), rel=1e-12)
    # a group mapping puts all four group ranks on one node -> NVLink only
    t_one_node = plan_time(plan, Topology(8, 8, NVLINK, IB).link_of, group=[4, 5, 6, 7])
    assert t_one_node == pytest.approx(2 * (n - 1) * NVLINK.time_s(S / n), rel=1e-12)


def test_group_inside_a_node_uses_nvlink():
    topo = Topology(16, 8, NVLINK, IB)
    S = 1e9
    assert collective_time_s("all_reduce", S, range(8), topo) == pytest.approx(
        closed_form_time_s("all_reduce", "ring", S, 8, NVLINK))


def test_hierarchical_all_reduce_across_nodes():
    topo = Topology(32, 8, NVLINK, IB)
    S, g, k = 1e9, 8, 4
    expected = (closed_form_time_s("reduce_scatter", "ring", S, g, NVLINK)
                + closed_form_time_s("all_reduce", "ring", S / g, k, IB)
                + closed_form_time_s("all_gather", "ring", S, g, NVLINK))
    t = collective_time_s("all_reduce", S, range(32), topo)
    assert t == pytest.approx(expected, rel=1e-12)
    # much faster than a flat ring at IB speed, slower than NVLink alone
    assert closed_form_time_s("all_reduce", "ring", S, 32, NVLINK) < t < closed_form_time_s(
        "all_reduce", "ring", S, 32, IB)


def test_one_rank_per_node_and_uneven_groups_run_flat_on_the_slow_link():
    topo = Topology(32, 8, NVLINK, IB)
    S = 1e8
    assert collective_time_s("all_reduce", S, [0, 8, 16, 24], topo) == pytest.approx(
        closed_form_time_s("all_reduce", "ring", S, 4, IB))
    assert collective_time_s("all_gather", S, [0, 1, 2, 8], topo) == pytest.approx(
        closed_form_time_s("all_gather", "ring", S, 4, IB))
    assert collective_time_s("all_to_all", S, range(16), topo) == pytest.approx(
        closed_form_time_s("all_to_all", "ring", S, 16, IB))


def test_hierarchical_reduce_scatter_plus_all_gather_equals_all_reduce():
    topo = Topology(64, 8, NVLINK, IB)
    S = 3e9
    rs = collective_time_s("reduce_scatter", S, range(64), topo)
    ag = collective_time_s("all_gather", S, range(64), topo)
    ar = collective_time_s("all_reduce", S, range(64), topo)
    assert rs + ag == pytest.approx(ar, rel=1e-12)


def test_bad_collectives_are_refused():
    with pytest.raises(ParasimError, match="kind"):
        closed_form_time_s("scatter_gather", "ring", 1, 4, NVLINK)
    with pytest.raises(ParasimError, match="algorithm"):
        closed_form_time_s("all_reduce", "butterfly", 1, 4, NVLINK)
    with pytest.raises(ParasimError, match="repeated"):
        collective_time_s("all_reduce", 1, [0, 0], Topology(2, 2, NVLINK, IB))


def test_halving_doubling_pays_for_non_powers_of_two():
    S = 1e9
    t6 = closed_form_time_s("all_reduce", "halving_doubling", S, 6, NVLINK)
    t8 = closed_form_time_s("all_reduce", "halving_doubling", S, 8, NVLINK)
    assert t6 > t8
    assert math.isclose(closed_form_time_s("all_reduce", "halving_doubling", S, 8, NVLINK),
                        2 * 3 * NVLINK.latency_s + 2 * 7 / 8 * S / NVLINK.bandwidth_Bps, rel_tol=1e-12)
