"""The closed-form bubbles of the zero-bubble schedules against the schedules as executed
(schedule_registry's docstring): ZB-H1's formula equals the executed bubble for every B >= F, ZB-H2
is the executed schedule's own, and each `bubble_floor` is below the executed bubble. Found by
pricing configurations outside tests/test_step_model.py's grid: with Qi et al.'s (p-1)(F+B-W) and
(p-1)(F+B-2W), a zb-h2 llama3-8b t8 p4 run with one micro-batch was 22 % below the event clock, and
megatron-18.4b t4 p8 d8 with one micro-batch per replica 40 % below."""

import random

import pytest

from simulator.parallel.schedule_registry import SCHEDULE_SPECS, time_schedule


def _cases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        F = rng.uniform(0.2, 3.0)
        B = F * rng.uniform(1.0, 3.0)          # the input gradient costs at least the forward
        W = B * rng.uniform(0.1, 1.5)
        p = rng.choice([2, 3, 4, 5, 8, 12])
        m = rng.choice([1, 2, p - 1, p, p + 1, 2 * p - 1, 2 * p, 3 * p + 1, rng.randint(1, 48)])
        yield p, max(m, 1), F, B, W


def executed(name, p, m, F, B, W) -> float:
    return time_schedule(name, p, m, 1, F, B, W, 0.0).makespan - m * (F + B + W)


@pytest.mark.parametrize("seed", range(4))
def test_zb_h1_formula_is_the_executed_bubble(seed):
    spec = SCHEDULE_SPECS["zb-h1"]
    for p, m, F, B, W in _cases(seed, 60):
        assert spec.bubble(p, m, F, B, W, 1) == pytest.approx(executed("zb-h1", p, m, F, B, W), rel=1e-9, abs=1e-12), \
            (p, m, F, B, W)


def test_zb_h1_formula_at_equal_times_is_qi_et_al():
    # F = B = W, m >= p: Qi et al. 2023 Table 2, (p-1)(F+B-W) = (p-1) F
    assert SCHEDULE_SPECS["zb-h1"].bubble(4, 8, 1.0, 1.0, 1.0, 1) == 3.0


@pytest.mark.parametrize("seed", range(2))
def test_zb_h2_is_the_executed_schedule_and_its_floor_is_below(seed):
    spec = SCHEDULE_SPECS["zb-h2"]
    for p, m, F, B, W in _cases(100 + seed, 40):
        got = spec.bubble(p, m, F, B, W, 1)
        assert got == pytest.approx(executed("zb-h2", p, m, F, B, W), rel=1e-12, abs=1e-12)
        assert spec.bubble_floor(p, m, F, B, W, 1) <= got * (1 + 1e-12) + 1e-12, (p, m, F, B, W)
        # the floor holds for any W at least the true one (how a search bounds it)
        assert spec.bubble_floor(p, m, F, B, 1.3 * W, 1) <= got * (1 + 1e-12) + 1e-12


def test_zb_h1_floor_is_below_for_larger_w():
    spec = SCHEDULE_SPECS["zb-h1"]
    for p, m, F, B, W in _cases(7, 60):
        assert spec.bubble_floor(p, m, F, B, 1.5 * W, 1) <= executed("zb-h1", p, m, F, B, W) * (1 + 1e-12) + 1e-12


def test_zb_h2_one_step_cannot_beat_the_warmup():
    # F = B = W: Qi et al.'s (p-1)(F+B-2W) is 0; one step with a synchronous optimizer idles (p-1) F
    assert SCHEDULE_SPECS["zb-h2"].bubble(4, 16, 1.0, 1.0, 1.0, 1) == pytest.approx(3.0, rel=1e-12)
