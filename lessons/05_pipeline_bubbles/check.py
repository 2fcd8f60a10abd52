"""Autograder of lesson 05: predictions against simulate_schedule and a real pipelined train()."""

import numpy as np

from simulator import (
    MLPConfig,
    SimpleDeviceModel,
    TrainConfig,
    format_schedule,
    make_schedule,
    parse_schedule,
    simulate_schedule,
    train,
)
from simulator.lessons import compare, ok

LESSON = {
    "title": "Pipeline bubbles: GPipe vs 1F1B",
    "goals": ["predict the pipeline bubble (p-1)(t_f+t_b) and its share (p-1)/(m+p-1)",
              "predict activation memory in flight: m for GPipe, p - d for 1F1B",
              "write the 1F1B schedule by hand and validate it",
              "measure the bubble on a real pipelined training step"],
    "app_pages": ["Pipeline schedules", "Training playground"],
    "requires": ["make_schedule", "simulate_schedule", "parse_schedule", "train"],
    "minutes": 50,
    "prerequisites": [4],
}

CASES = [(2, 1), (4, 8), (4, 4), (3, 7), (8, 16), (4, 2)]


def check_bubble_time(s):
    "bubble_time equals the simulated idle time per device (GPipe and 1F1B)"
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            for t_f, t_b in [(1.0, 1.0), (1.0, 2.0)]:
                want = simulate_schedule(make_schedule(name, p, m), t_f=t_f, t_b=t_b, t_w=0.0).bubble_time[0]
                got = s.bubble_time(p, m, t_f, t_b)
                if not np.isclose(got, want, rtol=1e-9):
                    return compare(want, got, f"{name} p={p} m={m} t_f={t_f} t_b={t_b}: fill and drain")
    return ok()


def check_bubble_fraction(s):
    "bubble_fraction equals SimResult.bubble_fraction"
    for p, m in CASES:
        want = simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction
        if not np.isclose(s.bubble_fraction(p, m), want, rtol=1e-9):
            return compare(want, s.bubble_fraction(p, m), f"p={p} m={m}")
    return ok()


def check_peak(s):
    "peak_in_flight equals SimResult.peak_in_flight for every device"
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            want = list(simulate_schedule(make_schedule(name, p, m)).peak_in_flight)
            got = [int(x) for x in s.peak_in_flight(name, p, m)]
            if got != want:
                return compare(want, got, f"{name} p={p} m={m}: count forwards not yet matched by a backward")
    return ok()


def check_written_1f1b(s):
    "your 1F1B text parses, validates and equals make_schedule('1f1b')"
    for p, m in [(2, 3), (4, 8), (4, 2), (3, 5)]:
        text = s.one_f_one_b_text(p, m)
        mine = parse_schedule(text, name="yours")
        want = format_schedule(make_schedule("1f1b", p, m))
        if format_schedule(mine) != want:
            return compare(want, format_schedule(mine), f"p={p} m={m}: warm-up min(p-d-1, m) forwards")
    return ok()


def check_measured(s):
    "bubble_fraction is within 0.03 of the bubble of a real pipelined step (train, free communication)"
    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    for m in (4, 8):
        r = train(TrainConfig(mlp, strategy="pp", devices=4, batch_size=32, microbatches=m), device_model=free,
                  check=False)
        measured = r.trace.bubble_fraction()
        if abs(s.bubble_fraction(4, m) - measured) > 0.03:
            return compare(round(measured, 4), s.bubble_fraction(4, m), f"p=4, m={m}", atol=0.03)
    return ok()
