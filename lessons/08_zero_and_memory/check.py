"""Autograder of lesson 08: ZeRO memory against the cost model, communication against train()."""


from simulator import MLPConfig, TrainConfig, build_model, make_plan, model_state_bytes_per_device, train, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, own_plot_item, prediction_item

LESSON = {
    "title": "ZeRO and memory",
    "goals": ["compute model-state memory per device for ZeRO stages 0-3 (Rajbhandari et al. 2020)",
              "find the largest model that fits a memory budget",
              "predict the communication of ZeRO stages and measure it with train(strategy='zero1'..'zero3')"],
    "app_pages": ["Scale explorer", "Training playground"],
    "requires": ["model_state_bytes_per_device", "strategy:zero1", "strategy:zero3"],
    "minutes": 40,
    "prerequisites": [3],
    # parasim's run answers the prediction: it raises while your prediction runs
    "withhold": {"predicted_zero_bytes": ["simulator.cost.memory:model_state_bytes_per_device"],
                 "why_same_bytes": ["simulator.collectives.algorithms:make_plan"]},
}

MLP = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)


def check_memory(s):
    "zero_bytes_per_device equals model_state_bytes_per_device (7.5B on 64 GPUs: 120, 31.4, 16.6, 1.9 GB)"
    cases = [(psi, nd, stage) for psi, nd in [(7.5e9, 64), (1e9, 8), (175e9, 1024), (1e6, 1)] for stage in range(4)]
    return each_case(cases, lambda psi, nd, stage: (
        model_state_bytes_per_device(psi, nd, stage), s.zero_bytes_per_device(psi, nd, stage),
        f"psi={psi:g}, N_d={nd}, stage {stage}: 2+2+12 bytes, partitioned parts / N_d"))


def check_max_params(s):
    "max_params fills the capacity exactly (model_state_bytes_per_device of the answer = capacity)"
    def case(cap, nd, stage):
        psi = s.max_params(cap, nd, stage)
        return (cap, None if psi is None else model_state_bytes_per_device(psi, nd, stage),
                f"capacity {cap:g} B, N_d={nd}, stage {stage}: bytes per parameter?")
    return each_case([(80e9, 64, 0), (80e9, 64, 1), (80e9, 64, 2), (80e9, 64, 3), (16e9, 8, 3)], case)


def check_comm(s):
    "zero_comm_bytes_per_device equals the bytes train() sends per device (dp, zero1, zero2, zero3)"
    param_bytes = build_model(MLP).param_count * 8
    cases = [(strategy, stage, nd) for strategy, stage in [("dp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3)]
             for nd in (2, 4)]
    return each_case(cases, lambda strategy, stage, nd: (
        train(TrainConfig(MLP, strategy=strategy, devices=nd, global_batch=16), check=False).bytes_sent_per_device[0],
        s.zero_comm_bytes_per_device(param_bytes, nd, stage), f"{strategy} on {nd} devices, {param_bytes} parameter "
                                                              "bytes"))


def check_zero3_exact(s):
    "ZeRO-3 still trains the same weights as one device (and your memory shrinks by N_d)"
    r = train(TrainConfig(MLP, strategy="zero3", devices=4, global_batch=16))
    ratio = s.zero_bytes_per_device(1e9, 1, 3) / s.zero_bytes_per_device(1e9, 4, 3)
    if r.max_rel_weight_diff_vs_single > 1e-9:
        return compare("< 1e-9", r.max_rel_weight_diff_vs_single, "parasim's ZeRO-3 disagrees with one device")
    return compare(4.0, ratio, "stage 3 partitions every model state over N_d = 4")


def zero_case() -> tuple[float, int, int]:
    """(psi, N_d, stage) drawn when grading: 100M to 1T parameters, 1 to 4096 devices, stage 0-3."""
    rng = hidden_random()
    return rng.uniform(1e8, 1e12), 2 ** rng.randint(0, 12), rng.randint(0, 3)


check_prediction = prediction_item(
    "prediction: ZeRO's model-state bytes per device, psi, N_d and the stage drawn when grading (within 2 %)",
    answer=model_state_bytes_per_device, ask="predicted_zero_bytes", case=zero_case,
    hint=lambda psi, nd, stage: (f"psi={psi:.4g}, N_d={nd}, stage {stage}: 2 + 2 + 12 bytes per parameter, the "
                                 "partitioned parts divided by N_d"))


def _rs_ag_bytes(n: int, nbytes: int) -> float:
    """The bytes one rank sends in a ring reduce-scatter then a ring all-gather of nbytes (parasim's plans)."""
    return float(sum(make_plan(kind, "ring", n, nbytes).bytes_sent_per_rank()[0] for kind in ("reduce_scatter", "all_gather")))


check_explanation = explanation_item(
    "explanation: why ZeRO-1 and ZeRO-2 send what data parallelism sends (a choice, and its bytes on a case drawn when grading)",
    ask="why_same_bytes", right="b",
    case=lambda: ((n := hidden_random().randint(2, 64)), 8 * n * hidden_random().randint(1_000, 100_000)),
    answer=_rs_ag_bytes, reason=lambda n, size: f"n={n}, S={size}: each half sends (n-1) chunks of S/n",
    hints={"a": "they partition the optimizer states (and ZeRO-2 the gradients): their memory is lower",
           "c": "the gradients travel in their own dtype, float64 here",
           "d": "every device updates its own partition of the parameters"})

check_plot_of_your_run = own_plot_item(
    "your own run: ZeRO's memory over time (stage and devices drawn when grading), line by line", ask="plot_my_run",
    case=lambda: (hidden_random().randint(1, 3), hidden_random().choice([2, 4])),
    run=lambda stage, nd: train(TrainConfig(MLP, strategy=f"zero{stage}", devices=nd, global_batch=16)).trace,
    draw=viz.memory_over_time, what=lambda stage, nd: f"the ZeRO-{stage} run on {nd} devices, batch 16 (chosen when grading)",
    hint="return viz.memory_over_time(r.trace) of that run")
