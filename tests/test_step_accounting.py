"""One accounting of the step (Trace.step_breakdown): compute, exposed communication, pipeline
bubble, other idle and optimizer add up to 100%, in the library, the CLI's JSON and across
runs and clock-only pricing."""

import json

import pytest

from simulator import (
    HardwareDeviceModel,
    MLPConfig,
    TrainConfig,
    make_schedule,
    price_training,
    simulate_schedule,
    train,
)
from simulator.trace import STEP_PARTS, Trace, TraceEvent
from simulator.viz import schedule_trace

MLP = MLPConfig(64, 256, 8, 8)
DM = HardwareDeviceModel("local", 4, dtype="fp64")


def run(strategy, m=4, steps=2):
    cfg = TrainConfig(MLP, strategy=strategy, devices=4, microbatches=m, global_batch=64, steps=steps)
    return cfg, train(cfg, device_model=DM, check=False)


@pytest.mark.parametrize("strategy,m", [("dp", 4), ("pp", 4), ("layer", 1), ("zero2", 4)])
def test_the_five_parts_add_up_to_the_whole_step(strategy, m):
    _, r = run(strategy, m)
    parts = r.trace.step_breakdown()
    assert set(parts) == set(STEP_PARTS)
    assert sum(parts.values()) == pytest.approx(1.0, rel=1e-12)
    assert all(v >= 0 for v in parts.values())
    for s in r.trace.device_stats():
        assert sum(s[f"{k}_s"] for k in STEP_PARTS) == pytest.approx(r.trace.makespan_s, rel=1e-12)


def test_data_parallel_has_no_bubble_and_its_wait_is_exposed_communication():
    _, r = run("dp")
    parts = r.trace.step_breakdown()
    assert parts["bubble"] == 0.0 and parts["other_idle"] == pytest.approx(0.0, abs=1e-12)
    # the all-reduce nothing hides: the comm lane's busy time with no compute under it, counted by hand
    span = r.trace.makespan_s
    exposed = sum(s["exposed_comm_s"] for s in r.trace.device_stats()) / (4 * span)
    assert parts["exposed_comm"] == pytest.approx(exposed) and parts["exposed_comm"] > 0.1


def test_a_pipeline_schedule_bubble_is_the_textbook_formula():
    p, m = 4, 8
    trace = schedule_trace(simulate_schedule(make_schedule("gpipe", p, m), 1.0, 2.0, 0.0, 0.0))
    assert trace.step_breakdown()["bubble"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    _, r = run("pp")
    assert r.trace.bubble_fraction() > 0.1 and r.trace.step_breakdown()["other_idle"] == pytest.approx(0.0, abs=1e-12)


def test_idle_outside_a_pipeline_is_other_idle():
    # device 1 finishes early and waits: no send/recv in the step, so it is not a pipeline bubble
    t = Trace(2, [TraceEvent(0, "compute", "a", 0.0, 2.0), TraceEvent(1, "compute", "b", 0.0, 1.0),
                  TraceEvent(0, "compute", "opt", 2.0, 1.0, phase="optimizer"),
                  TraceEvent(1, "compute", "opt", 2.0, 1.0, phase="optimizer")])
    assert t.step_breakdown() == pytest.approx({"compute": 0.5, "exposed_comm": 0.0, "bubble": 0.0,
                                                "other_idle": 1 / 6, "optimizer": 1 / 3})


def test_simulated_time_is_the_same_for_a_run_and_for_pricing_only():
    cfg, r = run("pp", steps=3)
    priced, _ = price_training(cfg, DM)
    assert priced.makespan_s == pytest.approx(r.trace.makespan_s, rel=1e-12)
    assert priced.steps == r.trace.steps == 3
    assert r.trace.step_time_s == pytest.approx(r.trace.makespan_s / 3)
    assert priced.step_breakdown() == pytest.approx(r.trace.step_breakdown())


def test_cli_json_reports_the_breakdown_and_the_time_per_step(capsys):
    from simulator.cli import main

    assert main(["train", "--strategy", "dp", "--devices", "4", "--steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["step_breakdown"]) == set(STEP_PARTS)
    assert sum(out["step_breakdown"].values()) == pytest.approx(1.0)
    assert out["steps"] == 3 and out["step_time_s"] == pytest.approx(out["simulated_time_s"] / 3)
    assert out["step_breakdown"]["bubble"] == 0.0


def test_chrome_trace_stretches_time_so_sub_nanosecond_events_survive():
    t = Trace(1, [TraceEvent(0, "compute", "tiny", 0.0, 2e-13), TraceEvent(0, "compute", "b", 1e-12, 5e-12)])
    doc = t.to_chrome()
    assert doc["otherData"]["time_scale"] == 1e4
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert min(e["dur"] for e in slices) >= 1e-3  # 1 ns in microseconds: Perfetto keeps it
    assert "time x" in doc["otherData"]["name"]
    plain = Trace(1, [TraceEvent(0, "compute", "big", 0.0, 1e-3)]).to_chrome()
    assert plain["otherData"]["time_scale"] == 1.0 and plain["traceEvents"][-1]["dur"] == pytest.approx(1e3)
