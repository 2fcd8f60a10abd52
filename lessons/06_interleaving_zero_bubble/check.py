"""Autograder of lesson 06: interleaved and zero-bubble predictions against simulate_schedule."""


from simulator import make_schedule, simulate_schedule, viz
from simulator.grading import each_case, explanation_item, hidden_random, own_plot_item, prediction_item

LESSON = {
    "title": "Interleaving and zero-bubble schedules, memory in flight",
    "goals": ["predict the interleaved 1F1B bubble (p-1)(t_f+t_b)/v and its extra memory",
              "split the backward into B and W and predict the ZB-H1 bubble (p-1)(t_f+t_b-t_w)",
              "see that ZB-H2 removes the bubble by holding 2p-1 micro-batches"],
    "app_pages": ["Pipeline schedules"],
    "requires": ["make_schedule", "simulate_schedule", "in_flight_microbatches"],
    "minutes": 45,
    "prerequisites": [5],
    # parasim's run answers the prediction: it raises while your prediction runs
    "withhold": {"predicted_interleaved_bubble": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedule_sim:simulate_schedule", "simulator.parallel.schedule_registry:flush_formulas",
                                                     "simulator.parallel.schedule_registry:interleaved_bubble"],
                 "why_not_always_zb_h2": ["simulator.parallel.schedule_registry:make_schedule", "simulator.parallel.schedule_sim:simulate_schedule"]},
}


def check_interleaved_bubble(s):
    "interleaved_bubble_time equals the simulated idle time (chunk times t/v)"
    cases = [(p, m, v, t_f, t_b) for p, m, v in [(4, 8, 2), (4, 8, 4), (2, 4, 2), (4, 4, 2), (3, 6, 3)]
             for t_f, t_b in [(1.0, 1.0), (1.0, 2.0)]]
    return each_case(cases, lambda p, m, v, t_f, t_b: (
        simulate_schedule(make_schedule("interleaved", p, m, v), t_f=t_f / v, t_b=t_b / v, t_w=0.0).bubble_time[0],
        s.interleaved_bubble_time(p, m, v, t_f, t_b), f"p={p} m={m} v={v} t_f={t_f} t_b={t_b}"))


def check_interleaved_memory(s):
    "interleaved_peak_chunks equals the simulated peak on device 0"
    return each_case([(4, 8, 2), (4, 8, 4), (2, 4, 2), (4, 4, 2), (3, 6, 3), (2, 2, 4)], lambda p, m, v: (
        simulate_schedule(make_schedule("interleaved", p, m, v)).peak_in_flight[0], s.interleaved_peak_chunks(p, m, v),
        f"p={p} m={m} v={v}: warm-up forwards + 1, at most m*v"), rtol=0.0)


def check_zb_bubble(s):
    "zb_bubble_time equals the simulated idle time of 1F1B and ZB-H1"
    cases = [(name, p, m, t) for p, m in [(4, 8), (3, 6), (2, 4)]
             for t in [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5), (1.0, 2.0, 1.0), (2.0, 1.0, 1.0)] for name in ("1f1b", "zb-h1")]
    return each_case(cases, lambda name, p, m, t: (
        simulate_schedule(make_schedule(name, p, m), *t).bubble_time[0], s.zb_bubble_time(name, p, *t),
        f"{name} p={p} (t_f, t_b, t_w)={t}"))


def check_zb_memory(s):
    "zb_peak_in_flight equals the simulated peak of ZB-H1 and ZB-H2"
    return each_case([(name, p, m) for p, m in [(4, 8), (3, 6), (2, 4), (4, 12)] for name in ("zb-h1", "zb-h2")],
                     lambda name, p, m: (
        max(simulate_schedule(make_schedule(name, p, m)).peak_in_flight), s.zb_peak_in_flight(name, p, m),
        f"{name}, p={p}, m={m}: the most micro-batches any device holds; ZB-H1 fills the bubble with W steps and "
        "holds no more than 1F1B's first stage; ZB-H2 runs extra warm-up forwards to fill the drain too, and holds "
        "more"), rtol=0.0)


def interleaved_case() -> tuple[int, int, int]:
    """(p, m, v) drawn when grading: 2 to 6 stages, m a multiple of p up to 4 p, 2 to 4 chunks."""
    rng = hidden_random()
    p = rng.randint(2, 6)
    return p, p * rng.randint(1, 4), rng.randint(2, 4)


check_prediction = prediction_item(
    "prediction: the interleaved bubble with p, m and v drawn when grading, before any simulation (within 2 %)",
    answer=lambda p, m, v: simulate_schedule(make_schedule("interleaved", p, m, v), t_f=1 / v, t_b=1 / v, t_w=0.0).bubble_time[0],
    ask="predicted_interleaved_bubble", case=interleaved_case,
    hint=lambda p, m, v: f"p={p}, m={m}, v={v}: fill and drain now take chunk-sized slots: (p-1)(t_f+t_b)/v")

check_explanation = explanation_item(
    "explanation: why ZB-H2 is not always the choice (a choice, and its extra memory on a p drawn when grading)",
    ask="why_not_always_zb_h2", right="b", case=lambda: (hidden_random().randint(2, 8),),
    answer=lambda p: int(max(simulate_schedule(make_schedule("zb-h2", p, 3 * p)).peak_in_flight)
                         - max(simulate_schedule(make_schedule("1f1b", p, 3 * p)).peak_in_flight)),
    reason=lambda p: f"p={p}: ZB-H2 holds 2p - 1 micro-batches at its peak, 1F1B p",
    hints={"a": "ZB-H2 sends what 1F1B sends: the same activations and gradients per micro-batch",
           "c": "its W passes compute the same dW, only later (the runs match one device)",
           "d": "ZB-H2 has one chunk per device (make_schedule('zb-h2', p, m))"})


def zb_case() -> tuple:
    """(p, m, t_f, t_b, t_w) drawn when grading."""
    rng = hidden_random()
    p = rng.randint(2, 5)
    return (p, rng.randint(p, 3 * p), *(rng.choice([0.5, 1.0, 1.5, 2.0]) for _ in range(3)))


check_plot_of_your_schedule = own_plot_item(
    "your own schedule: the ZB-H1 chart (p, m and times drawn when grading), block by block, and device 0's bubble",
    ask="plot_my_schedule", case=zb_case,
    run=lambda p, m, t_f, t_b, t_w: simulate_schedule(make_schedule("zb-h1", p, m), t_f=t_f, t_b=t_b, t_w=t_w),
    draw=viz.schedule_chart, what=lambda p, m, t_f, t_b, t_w: f"ZB-H1 with p = {p}, m = {m}, t_f = {t_f}, t_b = {t_b}, t_w = {t_w}",
    hint="return viz.schedule_chart(simulate_schedule(...)) of that schedule and its bubble_time[0]",
    measure=lambda result: result.bubble_time[0], measured="device 0's bubble_time of the schedule you drew")
