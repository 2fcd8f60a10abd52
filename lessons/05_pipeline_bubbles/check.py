"""Autograder of lesson 05: predictions against simulate_schedule and a real pipelined train()."""

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
    viz,
)
from simulator.grading import (
    compare,
    expect,
    explanation_item,
    hidden_random,
    ok,
    own_plot_item,
    prediction_item,
)
from simulator.parallel.schedule_registry import flush_formulas

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
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas"],
                 "peak_in_flight": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas"],
                 "predicted_share": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas"],
                 "one_f_one_b_text": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas"],
                 "why_1f1b_saves_memory": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas"],
                 "bubble_fraction": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b",
                    "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas",
                    "simulator.training:train", "simulator.trace:Trace.bubble_fraction"],
                 "plot_my_schedule": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedules:one_f_one_b"]},
}

def prediction():
    """Predict, then reveal (the app's Lessons page): the answer is simulated, not typed in."""
    r = simulate_schedule(make_schedule("1f1b", 4, 8), t_f=1.0, t_b=2.0, t_w=0.0)
    return {"question": "1F1B with p = 4 stages, m = 8 micro-batches and t_b = 2 t_f: what fraction of the "
                        "step is bubble (idle)?",
            "answer": float(r.bubble_fraction), "rel_tol": 0.02, "unit": "a fraction between 0 and 1",
            "explain": "(p-1)/(m+p-1) = 3/11 = 0.273: fill and drain take p-1 slots of forwards and backwards "
                       "whatever m is, so more micro-batches shrink the bubble's share (not its length)."}


FREE = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)  # free communication
CASES = [(2, 1), (4, 8), (4, 4), (3, 7), (8, 16), (4, 2)]
BUDGET_S = 2.0   # seconds per call on a hidden case: a formula answers at once


def hidden_case():
    """A pipeline drawn when grading, too big to build (p x m > limits.MAX_SCHEDULE_SLOTS, so
    make_schedule refuses it and simulating it takes far longer than BUDGET_S): its answers are
    the closed forms (flush_formulas), which only a function that applies them itself can give."""
    rng = hidden_random()
    return rng.randint(1200, 3000), rng.randint(1000, 5000), rng.uniform(0.5, 2.0), rng.uniform(0.5, 4.0)


def check_bubble_time(s):
    "bubble_time equals the simulated idle time per device (GPipe and 1F1B), and the formula on a hidden pipeline"
    why = ("the last stage waits for p-1 forwards before its first one (fill) and the first stage waits for "
           "p-1 backwards after its last forward (drain); m does not appear")
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            for t_f, t_b in [(1.0, 1.0), (1.0, 2.0)]:
                want = simulate_schedule(make_schedule(name, p, m), t_f=t_f, t_b=t_b, t_w=0.0).bubble_time[0]
                got = s.bubble_time(p, m, t_f, t_b)
                if not np.isclose(got, want, rtol=1e-9):
                    return compare(want, got, f"{name}, p={p} stages, m={m}, t_f={t_f}, t_b={t_b}: {why}")
    p, m, t_f, t_b = hidden_case()
    return compare(flush_formulas("1f1b", p, m, t_f, t_b)["bubble_time"], s.within(BUDGET_S).bubble_time(p, m, t_f, t_b),
                   f"p={p}, m={m}, t_f={t_f:.4g}, t_b={t_b:.4g} (chosen when grading): {why}")


def check_bubble_fraction(s):
    "bubble_fraction equals SimResult.bubble_fraction, and the formula on a hidden pipeline"
    why = ("the step is the useful work of m micro-batches, m (t_f + t_b), plus the bubble (p-1)(t_f + t_b); the "
           "share is bubble / step, not bubble / work ((p-1)/m, the Ultra-Scale Playbook's ratio)")
    for p, m in CASES:
        want = simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction
        if not np.isclose(s.bubble_fraction(p, m), want, rtol=1e-9):
            return compare(want, s.bubble_fraction(p, m), f"p={p}, m={m}: {why}")
    p, m, _, _ = hidden_case()
    return compare(flush_formulas("1f1b", p, m)["bubble_fraction"], s.within(BUDGET_S).bubble_fraction(p, m),
                   f"p={p}, m={m} (chosen when grading): {why}")


def check_peak(s):
    "peak_in_flight equals SimResult.peak_in_flight for every device, and the formula on a hidden pipeline"
    def why(name):
        return ("GPipe runs all m forwards before the first backward" if name == "gpipe" else
                "1F1B stage d holds its p-d-1 warm-up forwards plus the forward of its first steady pair "
                "before its first backward frees one (never more than m)")
    for p, m in CASES:
        for name in ("gpipe", "1f1b"):
            want = list(simulate_schedule(make_schedule(name, p, m)).peak_in_flight)
            got = [int(x) for x in s.peak_in_flight(name, p, m)]
            if got != want:
                return compare(want, got, f"{name}, p={p}, m={m}: count the forwards not yet matched by their "
                               f"backward; {why(name)}")
    p, m, _, _ = hidden_case()
    for name in ("1f1b", "gpipe"):
        want = list(flush_formulas(name, p, m)["peak_in_flight"])
        got = [int(x) for x in s.within(BUDGET_S).peak_in_flight(name, p, m)]
        if got != want:
            d = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            return compare(want[d:d + 4], got[d:d + 4], f"{name}, p={p}, m={m} (chosen when grading), from device "
                           f"{d} ({len(want)} devices): {why(name)}")
    return ok()


def _first_wrong_action(mine, p, m, extra) -> str:
    """'' when every device of `mine` runs 1F1B with `extra` more warm-up forwards, else what the
    first device that does not breaks: checked action by action against the rule (w warm-up
    forwards, then F/BW pairs, then the remaining BWs), never against a generated schedule."""
    for d, row in enumerate(mine.actions):
        w = min(p - d - 1 + extra, m)
        kinds = "".join("F" if a.kind == "F" else "B" for a in row)
        order = {k: [a.microbatch for a in row if (a.kind == "F") == (k == "F")] for k in "FB"}
        rule = f"device {d} of p={p}, m={m}, extra_warmup={extra}: min(p-d-1+extra_warmup, m) = {w} warm-up forwards"
        if order["F"] != list(range(m)) or order["B"] != list(range(m)) or any(a.kind not in ("F", "BW") for a in row):
            return f"{rule}; each micro-batch's F once and its BW once, in micro-batch order (F and BW only)"
        before = kinds.index("B")
        if before != min(w + 1, m):
            return (f"{rule}, so {min(w + 1, m)} forwards before the first BW (the warm-up and the first steady "
                    f"pair's F); yours runs {before}")
        rest, rule_rest = kinds[before:], "B" + "FB" * (m - w - 1) + "B" * w if w < m else "B" * m
        if rest != rule_rest:
            k = next(i for i, (a, b) in enumerate(zip(rest, rule_rest)) if a != b)
            return (f"{rule}; after the first BW one F and one BW alternate until the forwards are done, then the "
                    f"remaining BWs: action {before + k} ({row[before + k]!r}) breaks that")
    return ""


def check_written_1f1b(s):
    "your 1F1B text parses, validates and follows the 1F1B rule action by action (extra_warmup chosen when grading)"
    rng = hidden_random()
    cases = [(2, 3, 0), (4, 8, 0), (4, 2, 0), (3, 5, 0)]
    cases.append((rng.randint(3, 7), rng.randint(8, 14), rng.randint(1, 3)))
    for p, m, extra in cases:
        text = s.one_f_one_b_text(p, m, extra) if extra else s.one_f_one_b_text(p, m)
        try:
            mine = parse_schedule(text, name="yours")
            validate_schedule(mine)  # names the action that waits for what (a deadlock) or what is missing
        except ParasimError as e:
            return expect(False, "a schedule every stage can run to the end", str(e),
                          f"p={p}, m={m}: a stage's F waits for the previous stage's F of that micro-batch, its BW "
                          "for the next stage's BW; run a forward before any stage needs its activation")
        if mine.p != p:
            return expect(False, f"{p} lines, one per device", f"{mine.p} lines", f"p={p}: one line per device")
        wrong = _first_wrong_action(mine, p, m, extra)
        if wrong:
            return expect(False, "1F1B, action by action", format_schedule(mine).splitlines()[0][:80] + " ...",
                          wrong)
    return ok()


def check_measured(s):
    "bubble_fraction is within 0.03 of the bubble of a real pipelined step (train, free communication)"
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    for m in (4, hidden_random().randint(5, 12)):   # the second drawn when grading (train is withheld)
        r = train(TrainConfig(mlp, strategy="pp", devices=4, global_batch=4 * m, microbatches=m), device_model=FREE,
                  check=False)
        measured = r.trace.bubble_fraction()
        got = s.bubble_fraction(4, m)
        if not abs(got - measured) <= 0.03:
            return compare(round(measured, 4), got, f"p=4, m={m}", atol=0.03)
    return ok()


check_prediction = prediction_item(
    "prediction: the bubble share of 1F1B with p and m drawn when grading, before any run (within 2 %)",
    answer=lambda p, m: simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction, ask="predicted_share",
    case=lambda: (hidden_random().randint(2, 16), hidden_random().randint(1, 64)),
    hint=lambda p, m: f"p={p}, m={m}: fill and drain are p - 1 slots whatever m is; the step is m + p - 1 slots")


def memory_case() -> tuple[int, int, int]:
    """(p, m, d) drawn when grading: 2 to 12 stages, 1 to 40 micro-batches, a stage d of the p."""
    rng = hidden_random()
    p = rng.randint(2, 12)
    return p, rng.randint(1, 40), rng.randrange(p)


def _peak_gap(p: int, m: int, d: int) -> int:
    """GPipe's peak minus 1F1B's on stage d (simulated)."""
    peaks = {name: simulate_schedule(make_schedule(name, p, m)).peak_in_flight[d] for name in ("gpipe", "1f1b")}
    return int(peaks["gpipe"] - peaks["1f1b"])


check_explanation = explanation_item(
    "explanation: why 1F1B holds fewer activations (a choice, and the gap on a stage drawn when grading)",
    ask="why_1f1b_saves_memory", right="b", case=memory_case, answer=_peak_gap,
    reason=lambda p, m, d: f"p={p}, m={m}, stage d={d}: GPipe holds all m forwards, 1F1B at most min(p - d, m)",
    hints={"a": "both schedules have the same bubble (p-1)(t_f+t_b): compare their peak_in_flight instead",
           "c": "neither schedule recomputes here; recomputation is another trade (lesson 08)",
           "d": "both send one activation and one gradient per micro-batch per stage boundary"})


def _your_schedule(s, p: int, m: int):
    """Your one_f_one_b_text(p, m), parsed here (text is data: nothing of yours runs in the grader)."""
    return parse_schedule(s.one_f_one_b_text(p, m), name="yours")


check_plot_of_your_schedule = own_plot_item(
    "your own schedule: the chart of your 1F1B text (p and m drawn when grading), block by block, and its bubble",
    ask="plot_my_schedule", case=lambda: (hidden_random().randint(2, 6), hidden_random().randint(2, 12)),
    given=_your_schedule, run=lambda mine, p, m: simulate_schedule(mine, t_f=1, t_b=2, t_w=0),
    draw=viz.schedule_chart, what=lambda p, m: f"your one_f_one_b_text({p}, {m}) simulated with t_f = 1, t_b = 2",
    hint="return viz.schedule_chart(simulate_schedule(parse_schedule(one_f_one_b_text(p, m)), t_f=1, t_b=2, t_w=0)) "
         "and its bubble_fraction",
    measure=lambda result: result.bubble_fraction, measured="the bubble_fraction of the schedule you drew")
