"""Goodput with failures and checkpoints: the curve peaks at Young's interval; bad inputs refused."""

import math

import pytest

from simulator.cost.goodput import (
    FailureModel,
    checkpoint_nbytes,
    daly_interval_s,
    goodput,
    goodput_curve,
    young_interval_s,
)
from simulator.errors import ParasimError

# GPT-3 175B on 1536 GPUs: 2.45 TB checkpoint written at 50 GB/s, 50,000 h per GPU
GPT3 = FailureModel(1536, 50_000.0, checkpoint_nbytes(175e9), 50e9, restart_s=600.0)


def test_checkpoint_and_system_mtbf_arithmetic():
    assert checkpoint_nbytes(175e9) == 175e9 * 14
    assert GPT3.checkpoint_time_s == pytest.approx(175e9 * 14 / 50e9)
    assert GPT3.system_mtbf_s == pytest.approx(50_000 * 3600 / 1536)
    assert GPT3.restore_time_s == pytest.approx(GPT3.checkpoint_time_s + 600)


def test_curve_peaks_at_the_young_daly_interval_within_grid_resolution():
    curve = goodput_curve(GPT3, n_points=400)
    best = max(range(len(curve)), key=lambda i: curve[i].goodput)
    tau = young_interval_s(GPT3)
    assert tau == pytest.approx(math.sqrt(2 * GPT3.checkpoint_time_s * GPT3.system_mtbf_s))
    lo, hi = curve[max(best - 1, 0)].interval_s, curve[min(best + 1, len(curve) - 1)].interval_s
    assert lo <= tau <= hi
    # Daly's higher-order interval is close to Young's when C << M
    assert daly_interval_s(GPT3) == pytest.approx(tau, rel=0.1)


def test_goodput_terms_and_run_length():
    tau = young_interval_s(GPT3)
    g = goodput(GPT3, tau, useful_s=30 * 86400)
    C, M, R = GPT3.checkpoint_time_s, GPT3.system_mtbf_s, GPT3.restore_time_s
    assert g.goodput == pytest.approx(1 / (1 + C / tau + (tau + C) / (2 * M) + R / M))
    assert g.wall_time_s == pytest.approx(30 * 86400 / g.goodput)
    assert g.expected_failures == pytest.approx(g.wall_time_s / M)
    assert goodput(GPT3, tau / 10).goodput < g.goodput > goodput(GPT3, tau * 10).goodput


def test_more_devices_fail_more_often_and_lower_goodput():
    small = FailureModel(64, 50_000.0, checkpoint_nbytes(175e9), 50e9, restart_s=600.0)
    assert small.system_mtbf_s == pytest.approx(GPT3.system_mtbf_s * 1536 / 64)
    assert goodput(small, young_interval_s(small)).goodput > goodput(GPT3, young_interval_s(GPT3)).goodput


@pytest.mark.parametrize("kw,match", [
    (dict(n_devices=0), "n_devices"), (dict(device_mtbf_h=0.0), "device_mtbf_h"),
    (dict(write_bandwidth_Bps=-1.0), "write_bandwidth"), (dict(checkpoint_nbytes=-5.0), "checkpoint_nbytes"),
    (dict(restart_s=-1.0), "restart_s"), (dict(read_bandwidth_Bps=0.0), "read_bandwidth"),
])
def test_bad_failure_models_are_refused(kw, match):
    base = dict(n_devices=8, device_mtbf_h=1000.0, checkpoint_nbytes=1e9, write_bandwidth_Bps=1e9)
    with pytest.raises(ParasimError, match=match):
        FailureModel(**{**base, **kw})


def test_edge_cases_refused():
    with pytest.raises(ParasimError, match="interval_s"):
        goodput(GPT3, 0.0)
    with pytest.raises(ParasimError, match="below the system MTBF"):
        goodput(GPT3, GPT3.system_mtbf_s)
    # 100,000 devices failing every 5 h each: the checkpoint takes longer than the system MTBF
    hopeless = FailureModel(100_000, 5.0, checkpoint_nbytes(1e12), 10e9)
    with pytest.raises(ParasimError, match="first-order model"):
        goodput(hopeless, 10.0)
    with pytest.raises(ParasimError, match="at least 3"):
        goodput_curve(GPT3, n_points=2)
    with pytest.raises(ParasimError, match="C = 0"):
        goodput_curve(FailureModel(8, 1000.0, 0.0, 1e9))
    with pytest.raises(ParasimError, match="params"):
        checkpoint_nbytes(0)
