"""Autograder of lesson 04: stage split and idle time against train(strategy="layer")."""


from simulator import MLPConfig, SimpleDeviceModel, TrainConfig, make_schedule, simulate_schedule, train, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, ok, own_plot_item, prediction_item

LESSON = {
    "title": "Layer-wise model parallelism and its idle time",
    "goals": ["place contiguous layers on devices",
              "predict that p devices are idle (p-1)/p of the time and give no speedup",
              "count the activation bytes crossing stage boundaries, and measure all of it with train()"],
    "app_pages": ["Training playground", "Pipeline schedules"],
    "requires": ["train", "make_schedule", "simulate_schedule", "SimpleDeviceModel"],
    "minutes": 30,
    "prerequisites": [3],
    # parasim's run answers the prediction: it raises while your prediction runs
    "withhold": {"predicted_idle": ["simulator.training:train", "simulator.parallel.schedule_sim:simulate_schedule", "simulator.trace:Trace.bubble_fraction"],
                 "why_no_speedup": ["simulator.training:train", "simulator.parallel.schedule_sim:simulate_schedule"]},
}

FREE_COMM = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)


def _run(layers, p):
    mlp = MLPConfig(in_dim=16, hidden=16, layers=layers, classes=16)
    return train(TrainConfig(mlp, strategy="layer", devices=p, global_batch=16), device_model=FREE_COMM, check=False)


def check_split(s):
    "split_layers equals the stages train(strategy='layer') uses"
    return each_case([(4, 4), (6, 4), (5, 2), (7, 3)], lambda layers, p: (
        _run(layers, p).compiled.notes["stages"], tuple(tuple(x) for x in s.split_layers(layers, p)),
        f"{layers} layers on {p} devices: contiguous, first stages get the extra"), rtol=0.0)


def check_idle_exact(s):
    "idle_fraction(p) equals the bubble of a one-micro-batch pipeline (unit-time simulation)"
    return each_case([(2,), (3,), (4,), (8,)], lambda p: (
        simulate_schedule(make_schedule("gpipe", p, 1)).bubble_fraction, s.idle_fraction(p),
        f"p={p}: only one device works at any time"))


def check_idle_measured(s):
    "idle_fraction(p) is within 0.05 of the idle time train() measures (only the optimizer overlaps)"
    for p in (2, 4):
        measured = _run(4, p).trace.bubble_fraction()
        if abs(s.idle_fraction(p) - measured) > 0.05:
            return compare(round(measured, 3), s.idle_fraction(p), f"p={p}", atol=0.05)
    return ok()


def check_speedup(s):
    "speedup(p) is within 10% of the measured single-device / layer-wise step time"
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    one = train(TrainConfig(mlp, strategy="single", global_batch=16), device_model=FREE_COMM, check=False)
    return each_case([(2,), (4,)], lambda p: (
        one.trace.makespan_s / _run(4, p).trace.makespan_s, s.speedup(p), f"p={p}: does any forward or backward "
                                                                           "overlap?"), rtol=0.1)


def check_p2p_bytes(s):
    "p2p_bytes_per_step equals the send bytes of the trace"
    for p in (2, 4):
        measured = _run(4, p).trace.bytes_by_collective()["send"]
        got = s.p2p_bytes_per_step(p, 16, 16)
        if got != measured:
            return compare(measured, got, f"p={p}, batch 16, hidden 16, float64")
    return ok()


check_prediction = prediction_item(
    "prediction: the idle share of a p-stage layer-wise step, p drawn when grading (within 0.05 of the run)",
    answer=lambda p: round(_run(p, p).trace.bubble_fraction(), 4), ask="predicted_idle",
    case=lambda: (hidden_random().randint(2, 12),),
    hint=lambda p: f"p = {p} stages, one layer each: how many work at once?", rtol=1e-9, atol=0.05)

check_explanation = explanation_item(
    "explanation: why the layer-wise split is no faster (a choice, and one device's idle time on a case drawn when grading)",
    ask="why_no_speedup", right="b",
    case=lambda: (hidden_random().randint(2, 16), round(hidden_random().uniform(0.5, 5.0), 3)),
    answer=lambda p, t: simulate_schedule(make_schedule("gpipe", p, 1), t_f=t / 3, t_b=2 * t / 3, t_w=0.0).bubble_time[0],
    reason=lambda p, t: f"p={p} stages of t={t} s each: a device works its own t and waits while the other p-1 run theirs",
    hints={"a": "communication is free in these runs, and the step is still no faster",
           "c": "each device holds only its stage's layers (split_layers)",
           "d": "layer-wise parallelism does not split the batch; data parallelism does"})

check_plot_of_your_run = own_plot_item(
    "your own run: its timeline (layers and p drawn when grading), bar by bar, and the idle share you measured",
    ask="plot_my_run", case=lambda: (hidden_random().randint(4, 8), hidden_random().randint(2, 4)),
    run=lambda layers, p: _run(layers, p).trace, draw=viz.timeline,
    what=lambda layers, p: f"the layer-wise run of a {layers}-layer MLP on {p} stages, batch 16 (chosen when grading)",
    hint="return viz.timeline(r.trace), r.trace.bubble_fraction() of that run",
    measure=lambda trace: trace.bubble_fraction(), measured="r.trace.bubble_fraction() of the run you drew")
