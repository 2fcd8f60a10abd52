"""Calibration: the alpha-beta fit on synthetic timings, the preset file round trip, predicted vs measured.

No timing assertions: real measurements are exercised only for their shape (bench/bench_calibration.py
reports the predicted/measured ratios)."""

import json

import numpy as np
import pytest

from simulator.calibrate import AlphaBeta, fit_alpha_beta, predicted_vs_measured, save_local, transfer_program
from simulator.cost.hardware import get_hardware, load_local
from simulator.errors import ParasimError
from simulator.program import Recv, Send
from simulator.trace import Trace, TraceEvent


def test_fit_recovers_alpha_and_beta_from_exact_timings():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    times = 20e-6 + sizes / 5e9
    ab = fit_alpha_beta(sizes, times)
    assert ab.latency_s == pytest.approx(20e-6, rel=1e-9) and ab.bandwidth_Bps == pytest.approx(5e9, rel=1e-9)
    assert ab.residual_rel == pytest.approx(0.0, abs=1e-9) and ab.time_s(1e6) == pytest.approx(20e-6 + 2e-4)


def test_fit_with_noise_stays_close():
    rng = np.random.default_rng(0)
    sizes = np.repeat([8e3, 8e4, 8e5, 8e6, 3.2e7], 5)
    times = (50e-6 + sizes / 2e9) * rng.uniform(0.95, 1.05, sizes.shape)
    ab = fit_alpha_beta(sizes, times)
    assert ab.latency_s == pytest.approx(50e-6, rel=0.1) and ab.bandwidth_Bps == pytest.approx(2e9, rel=0.1)
    assert 0 < ab.residual_rel < 0.05


def test_fit_refuses_what_has_no_line():
    with pytest.raises(ParasimError, match="2 distinct sizes"):
        fit_alpha_beta([1e3, 1e3], [1e-5, 1e-5])
    with pytest.raises(ParasimError, match="times > 0"):
        fit_alpha_beta([1e3, 1e4], [1e-5, 0.0])
    with pytest.raises(ParasimError, match="do not grow"):
        fit_alpha_beta([1e3, 1e6], [1e-3, 1e-4])


def test_preset_file_round_trip_to_a_tmp_path(tmp_path):
    ab = AlphaBeta(12e-6, 3e9)
    preset = {"name": "local", "peak_flops": {"fp64": 25e9, "fp32": 50e9}, "memory_bytes": 8e9,
              "memory_bandwidth_Bps": 12e9, "devices_per_node": 8,
              "intra": {"latency_s": ab.latency_s, "bandwidth_Bps": ab.bandwidth_Bps},
              "inter": {"latency_s": ab.latency_s, "bandwidth_Bps": ab.bandwidth_Bps}, "source": "test"}
    path = save_local(preset, tmp_path / "sub" / "local.json")
    assert json.loads(path.read_text()) == preset
    hw = load_local(path)
    assert hw.peak("fp64") == 25e9 and hw.intra.latency_s == 12e-6 and hw.inter.bandwidth_Bps == 3e9
    assert get_hardware("local", local_path=path).memory_bandwidth_Bps == 12e9
    with pytest.raises(ParasimError, match="unknown keys"):
        save_local({**preset, "bogus": 1}, tmp_path / "bad.json")


def test_transfer_program_is_one_send_and_recv():
    prog = transfer_program(80_000)
    assert prog.n_devices == 2 and isinstance(prog.code[0][0], Send) and isinstance(prog.code[1][0], Recv)
    assert prog.code[0][0].nbytes == 80_000
    prog.validate()


def _trace(wall):
    ev = [TraceEvent(0, "compute", "f", 0.0, 2.0), TraceEvent(1, "compute", "f", 0.0, 2.0),
          TraceEvent(0, "comm", "all_reduce g", 2.0, 0.5, "comm", "all_reduce"),
          TraceEvent(1, "comm", "all_reduce g", 2.0, 0.5, "comm", "all_reduce")]
    return Trace(2, ev, wall_time_s=wall)


def test_predicted_vs_measured_for_serial_and_parallel_runtimes():
    local = predicted_vs_measured(_trace(5.0), runtime="local")
    assert local["predicted_s"] == pytest.approx(2.0 + 2.0 + 0.5) and local["ratio"] == pytest.approx(4.5 / 5.0)
    ray = predicted_vs_measured(_trace(5.0), runtime="ray")
    assert ray["predicted_s"] == pytest.approx(2.5) and ray["makespan_s"] == pytest.approx(2.5)
    with pytest.raises(ParasimError, match="no measured wall time"):
        predicted_vs_measured(_trace(None))
    with pytest.raises(ParasimError, match="runtime"):
        predicted_vs_measured(_trace(1.0), runtime="gpu")


def test_calibrate_cli_writes_only_where_told(tmp_path, monkeypatch, capsys):
    import simulator.commands.calibrate as cmd
    from simulator.cli import main

    preset = {"name": "local", "peak_flops": {"fp64": 1e10}, "intra": {"latency_s": 1e-5, "bandwidth_Bps": 1e9}}
    fake = {"preset": preset, "measurements": {"training_rate_flops_per_s": 8e9, "matmul_flops_per_s": {},
                                               "copy_bandwidth_Bps": 1e10, "links": {}}}
    monkeypatch.setattr(cmd, "measure_local", lambda ray, links, progress: fake)   # the measuring is timed elsewhere
    for name, value in cmd.PINNED_BLAS.items():   # BLAS already pinned: the command measures in this process
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out = tmp_path / "local.json"
    assert main(["calibrate", "--output", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(out)
    assert load_local(out).peak("fp64") == 1e10 and not (tmp_path / "home").exists()
    assert main(["calibrate", "--links", "ray", "--output", str(out)]) == 2
    assert "--links ray needs --ray" in capsys.readouterr().err


def test_calibrate_measures_with_one_blas_thread(monkeypatch):
    """Unless BLAS is pinned already, the command measures in a fresh interpreter that pins it (BLAS
    reads its thread count when numpy loads), with the same options."""
    import simulator.commands.calibrate as cmd
    from simulator.cli import main

    calls = []
    monkeypatch.setattr(cmd.subprocess, "call", lambda argv, env: calls.append((argv, env)) or 0)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert main(["calibrate", "--output", "x.json", "--json"]) == 0
    ((argv, env),) = calls
    assert argv[1:] == ["-m", "simulator", "calibrate", "--links", "local", "--json", "--output", "x.json"]
    assert all(env[k] == "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"))


def test_a_link_fit_faster_than_a_memory_copy_stores_the_copy_bandwidth():
    from simulator.calibrate import AlphaBeta, link_of

    handed_over = AlphaBeta(12e-6, 998e9, 0.1)   # the in-process runtime: nothing is copied
    link, note = link_of(handed_over, 10e9)
    assert link == {"latency_s": 12e-6, "bandwidth_Bps": 10e9} and "without a copy" in note
    assert link_of(AlphaBeta(50e-6, 2e9, 0.01), 10e9) == ({"latency_s": 50e-6, "bandwidth_Bps": 2e9}, "")
