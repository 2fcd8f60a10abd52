"""Autograder of lesson 05: predictions against simulate_schedule and a real pipelined train()."""

from pathlib import Path

import numpy as np

from simulator import (
    MLPConfig,
    ParasimError,
    SimpleDeviceModel,
    TrainConfig,
    format_schedule,
    make_schedule,
    parse_schedule,
    simulate_schedule,
    train,
    validate_schedule,
)
from simulator.grading import compare, expect, ok, shared_folder

LESSON = {
    "title": "Pipeline bubbles: GPipe vs 1F1B",
    "goals": ["predict the pipeline bubble (p-1)(t_f+t_b) and its share (p-1)/(m+p-1)",
              "predict activation memory in flight: m for GPipe, min(p - d, m) for 1F1B (p-d-1 warm-up forwards + 1)",
              "write the 1F1B schedule by hand and validate it",
              "measure the bubble on a real pipelined training step"],
    "app_pages": ["Pipeline schedules", "Training playground"],
    "requires": ["make_schedule", "simulate_schedule", "parse_schedule", "train"],
    "minutes": 50,
    "prerequisites": [4],
    # parasim's schedules and simulator compute these answers: they raise while your function runs
    "withhold": {"bubble_time": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                              "simulator.parallel.schedule_sim:simulate_schedule"],
                 "bubble_fraction": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                              "simulator.parallel.schedule_sim:simulate_schedule"],
                 "peak_in_flight": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                              "simulator.parallel.schedule_sim:simulate_schedule"],
                 "predicted_share_p8_m24": ["simulator.parallel.schedule_registry:make_schedule",
                                            "simulator.parallel.schedules:one_f_one_b",
                                            "simulator.parallel.schedule_sim:simulate_schedule"],
                 "one_f_one_b_text": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                              "simulator.parallel.schedule_sim:simulate_schedule"]},
}

def prediction():
    """Predict, then reveal (the app's Lessons page): the answer is simulated, not typed in."""
    r = simulate_schedule(make_schedule("1f1b", 4, 8), t_f=1.0, t_b=2.0, t_w=0.0)
    return {"question": "1F1B with p = 4 stages, m = 8 micro-batches and t_b = 2 t_f: what fraction of the "
                        "step is bubble (idle)?",
            "answer": float(r.bubble_fraction), "rel_tol": 0.02, "unit": "a fraction between 0 and 1",
            "explain": "(p-1)/(m+p-1) = 3/11 = 0.273: fill and drain take p-1 slots of forwards and backwards "
                       "whatever m is, so more micro-batches shrink the bubble's share (not its length)."}


CASES = [(2, 1), (4, 8), (4, 4), (3, 7), (8, 16), (4, 2)]


def check_bubble_time(s):
    "bubble_time equals the simulated idle time per device (GPipe and 1F1B)"
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            for t_f, t_b in [(1.0, 1.0), (1.0, 2.0)]:
                want = simulate_schedule(make_schedule(name, p, m), t_f=t_f, t_b=t_b, t_w=0.0).bubble_time[0]
                got = s.bubble_time(p, m, t_f, t_b)
                if not np.isclose(got, want, rtol=1e-9):
                    return compare(want, got, f"{name}, p={p} stages, m={m}, t_f={t_f}, t_b={t_b}: the last stage "
                                   "waits for p-1 forwards before its first one (fill) and the first stage waits for "
                                   "p-1 backwards after its last forward (drain); m does not appear")
    return ok()


def check_bubble_fraction(s):
    "bubble_fraction equals SimResult.bubble_fraction"
    for p, m in CASES:
        want = simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction
        if not np.isclose(s.bubble_fraction(p, m), want, rtol=1e-9):
            return compare(want, s.bubble_fraction(p, m), f"p={p}, m={m}: the step is the useful work of m "
                           "micro-batches, m (t_f + t_b), plus the bubble (p-1)(t_f + t_b); the share is bubble / step, "
                           "not bubble / work ((p-1)/m, the Ultra-Scale Playbook's ratio)")
    return ok()


def check_peak(s):
    "peak_in_flight equals SimResult.peak_in_flight for every device"
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            want = list(simulate_schedule(make_schedule(name, p, m)).peak_in_flight)
            got = [int(x) for x in s.peak_in_flight(name, p, m)]
            if got != want:
                why = ("GPipe runs all m forwards before the first backward" if name == "gpipe" else
                       "1F1B stage d holds its p-d-1 warm-up forwards plus the forward of its first steady pair "
                       "before its first backward frees one (never more than m)")
                return compare(want, got, f"{name}, p={p}, m={m}: count the forwards not yet matched by their "
                               f"backward; {why}")
    return ok()


def check_written_1f1b(s):
    "your 1F1B text parses, validates and equals make_schedule('1f1b')"
    for p, m in [(2, 3), (4, 8), (4, 2), (3, 5)]:
        text = s.one_f_one_b_text(p, m)
        want = make_schedule("1f1b", p, m)
        try:
            mine = parse_schedule(text, name="yours")
            validate_schedule(mine)  # names the action that waits for what (a deadlock) or what is missing
        except ParasimError as e:
            return expect(False, "a schedule every stage can run to the end", str(e),
                          f"p={p}, m={m}: a stage's F waits for the previous stage's F of that micro-batch, its BW "
                          "for the next stage's BW; run a forward before any stage needs its activation")
        for d, (a, b) in enumerate(zip(format_schedule(want).splitlines(), format_schedule(mine).splitlines())):
            if a != b:
                return compare(a, b, f"device {d} of p={p}, m={m}: min(p-d-1, m) = {min(p - d - 1, m)} warm-up "
                               "forwards, then pairs of one F and one BW, then the remaining BWs")
        if format_schedule(mine) != format_schedule(want):
            return compare(format_schedule(want), format_schedule(mine), f"p={p}: one line per device, {p} lines")
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


def check_prediction(s):
    "prediction: the bubble share of 1F1B with p = 8, m = 24, before any run (within 2 %)"
    want = simulate_schedule(make_schedule("1f1b", 8, 24)).bubble_fraction
    got = s.predicted_share_p8_m24()
    return compare(want, got, "fill and drain are p - 1 slots whatever m is; the step is m + p - 1 slots", rtol=0.02)


def check_explanation(s):
    "explanation: why 1F1B holds fewer activations (a choice)"
    got = str(s.why_1f1b_saves_memory()).strip().lower()[:1]
    hint = {"a": "both schedules have the same bubble (p-1)(t_f+t_b): compare their peak_in_flight instead",
            "c": "neither schedule recomputes here; recomputation is another trade (lesson 08)",
            "d": "both send one activation and one gradient per micro-batch per stage boundary"}
    return expect(got == "b", "the choice that matches peak_in_flight", got or "no letter",
                  hint.get(got, "answer with one letter: a, b, c or d"))


def check_plot_of_your_run(s):
    "your own run: a timeline PNG of it, and the bubble you measured on it"
    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    want = train(TrainConfig(mlp, strategy="pp", devices=4, batch_size=32, microbatches=8), device_model=free,
                 check=False).trace.bubble_fraction()
    with shared_folder() as tmp:
        path = Path(tmp) / "timeline.png"
        got = s.plot_my_run(str(path))
        png = path.read_bytes() if path.is_file() else b""
    if not png.startswith(b"\x89PNG\r\n\x1a\n") or len(png) < 2000:
        return expect(False, "a PNG of your run's timeline at the path given", f"{len(png)} bytes",
                      "viz.timeline(r.trace).savefig(path)")
    return compare(want, got, "r.trace.bubble_fraction() of the run you drew (4 stages, m = 8, free communication)")
