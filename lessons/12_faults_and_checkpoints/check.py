"""Autograder of lesson 12: replays, weights and resumed losses against train_resilient, intervals
against the goodput model."""

import math

import numpy as np

from simulator import (
    Checkpoint,
    FailureModel,
    GPTConfig,
    TrainConfig,
    goodput,
    goodput_curve,
    parse_faults,
    train_resilient,
    viz,
    young_interval_s,
)
from simulator.grading import (
    compare,
    each_case,
    expect,
    explanation_item,
    hidden_random,
    ok,
    own_plot_item,
    prediction_item,
    shared_folder,
)

LESSON = {
    "title": "Faults and checkpoints: losing a device without losing the run",
    "goals": ["see what happens when a device dies in the middle of a step",
              "recover from a data-parallel replica or from a checkpoint and predict the replayed steps",
              "show that the recovered weights equal the fault-free weights bit for bit",
              "reshard a checkpoint onto another strategy and device count and continue training",
              "compute Young's interval sqrt(2CM) and compare it with the optimum of the goodput curve"],
    "app_pages": ["Fault tolerance", "Scale explorer"],
    "requires": ["train_resilient", "parse_faults", "convert_checkpoint", "Checkpoint", "FailureModel",
                 "goodput_curve", "young_interval_s"],
    "minutes": 50,
    "prerequisites": [3, 5, 8],
    # the goodput model answers this: it raises while your prediction runs
    "withhold": {"predicted_goodput": ["simulator.cost.goodput:goodput", "simulator.cost.goodput:goodput_curve",
                                       "simulator.cost.goodput:young_interval_s",
                                       "simulator.cost.goodput:daly_interval_s"],
                 "why_not_every_step": ["simulator.cost.goodput:goodput_curve",
                                        "simulator.cost.goodput:young_interval_s",
                                        "simulator.cost.goodput:daly_interval_s"]},
}

GPT = GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8)
DP2 = TrainConfig(GPT, strategy="dp", devices=2, global_batch=4, steps=4)
DP4 = TrainConfig(GPT, strategy="dp", devices=4, global_batch=4, steps=5)
# (faults, checkpoint_every, replicas): kill early in the step, before any weight update
CASES = [(DP2, "kill:1@3#10", 2, False), (DP2, "kill:0@2#10", 2, False), (DP4, "kill:1@4#10", 3, False),
         (DP2, "kill:1@2#10", 0, True), (DP4, "kill:3@4", 2, True)]
MODELS = [FailureModel(1536, 50_000.0, 175e9 * 14, 50e9, restart_s=600.0),
          FailureModel(64, 20_000.0, 7.5e9 * 14, 5e9),
          FailureModel(16_384, 80_000.0, 405e9 * 14, 2e12, restart_s=300.0)]


def check_steps_replayed(s):
    "steps_replayed predicts train_resilient's replayed steps (replicas and checkpoints)"
    for cfg, spec, every, replicas in CASES:
        mine = s.steps_replayed(parse_faults(spec)[0].step, every or 1, replicas)
        r = train_resilient(cfg, faults=parse_faults(spec), checkpoint_every=every, replicas=replicas, check=False)
        if mine != r.replayed_steps:
            return compare(r.replayed_steps, mine,
                           f"{spec} with checkpoint_every={every}, replicas={replicas}: recovered from "
                           f"{r.recoveries[0]['from']} at step {r.recoveries[0]['resume_step']}")
    return ok()


def check_weight_difference(s):
    "max_weight_difference: 0.0 between a recovered and a fault-free run, exact max |a - b| otherwise"
    clean = train_resilient(DP2, check=False)
    other = train_resilient(TrainConfig(GPT, strategy="dp", devices=2, global_batch=4, steps=4, seed=1), check=False)
    want = max(float(np.max(np.abs(a[n] - b[n]))) for a, b in zip(clean.train.params, other.train.params) for n in a)
    got = s.max_weight_difference(clean.train.params, other.train.params)
    if not isinstance(got, (float, int, np.floating)) or not math.isclose(got, want, rel_tol=1e-12):
        return compare(want, got, "two runs with different seeds differ: the largest |a - b| over every array")
    for spec, every, replicas in (("kill:1@3#10", 2, False), ("kill:0@1#10", 0, True)):
        r = train_resilient(DP2, faults=parse_faults(spec), checkpoint_every=every, replicas=replicas, check=False)
        got = s.max_weight_difference(r.train.params, clean.train.params)
        if got != 0.0:
            return compare(0.0, got, f"after {spec} the replayed run must equal the fault-free one exactly")
    return ok()


def check_resume_elsewhere(s):
    "resume_elsewhere: 4-device dp checkpoint -> pp=2 x dp=2 and -> zero2 on 2; the run goes on unchanged"
    with shared_folder() as tmp:  # the submission writes its converted checkpoint here
        full = train_resilient(DP4, checkpoint_every=3, checkpoint_dir=f"{tmp}/dp4", check=False)
        targets = [TrainConfig(GPT, strategy="pp", devices=4, pp=2, dp=2, microbatches=2, global_batch=4, steps=5),
                   TrainConfig(GPT, strategy="zero2", devices=2, global_batch=4, steps=5)]
        for k, target in enumerate(targets):
            r = s.resume_elsewhere(f"{tmp}/dp4/step_00000003", target, f"{tmp}/out{k}")
            if r is None or not hasattr(r, "train"):
                return compare("a ResilientResult", r, "return what train_resilient returns")
            saved = Checkpoint.open(f"{tmp}/out{k}")
            if saved.config.strategy != target.strategy or saved.config.devices != target.devices:
                return compare(f"{target.strategy} on {target.devices}",
                               f"{saved.config.strategy} on {saved.config.devices}",
                               "convert_checkpoint(src, dst, target) writes the re-cut checkpoint into dst")
            # never the numbers your result reports: parasim resumes `target` from the checkpoint you wrote,
            # in a sandbox holding no code of yours
            run = s.run_in_sandbox("resume", target, f"{tmp}/out{k}")
            if len(run["losses"]) != 2 or not np.allclose(run["losses"], full.train.losses[3:], rtol=1e-9):
                return compare(full.train.losses[3:], run["losses"],
                               "resumed from your converted checkpoint (step 3): the losses of steps 3 and 4")
            if not run["max_rel_weight_diff_vs_single"] < 1e-9:
                return expect(False, "weights within 1e-9 of one device", run["max_rel_weight_diff_vs_single"])
    return ok()


def check_young(s):
    "young_interval equals sqrt(2 C M) with M = MTBF x 3600 / n and C = bytes / bandwidth"
    return each_case([(fm,) for fm in MODELS], lambda fm: (
        young_interval_s(fm), s.young_interval(fm.n_devices, fm.device_mtbf_h, fm.checkpoint_nbytes, fm.write_bandwidth_Bps),
        f"{fm!r}: is M in seconds, divided by the device count?"))


def check_best_interval(s):
    "best_interval is the curve's optimum, and Young's interval lies next to it"
    for fm in MODELS:
        curve = goodput_curve(fm, n_points=400)
        k = max(range(len(curve)), key=lambda i: curve[i].goodput)
        got = s.best_interval(fm, 400)
        if not math.isclose(got, curve[k].interval_s, rel_tol=1e-12):
            return compare(curve[k].interval_s, got, "the interval_s of the point with the highest goodput")
        tau = young_interval_s(fm)
        if not curve[max(k - 1, 0)].interval_s <= tau <= curve[min(k + 1, len(curve) - 1)].interval_s:
            return expect(False, "Young's interval within one grid point of the optimum", tau)
    return ok()


def check_every_steps(s):
    "checkpoint_every_steps rounds Young's interval to whole steps (at least 1)"
    return each_case([(fm, step_s) for fm in MODELS for step_s in (1.0, 7.3, 30.0, 1e5)], lambda fm, step_s: (
        max(1, round(young_interval_s(fm) / step_s)), s.checkpoint_every_steps(fm, step_s),
        f"{fm!r}, {step_s} s per step: Young's interval in seconds divided by the step time, rounded to the nearest "
        "whole step, and never 0 (checkpoint at least every step)"), rtol=0.0)


def hidden_failure_model() -> FailureModel:
    """A cluster drawn when grading: 256 to 16k devices, 20k to 80k h per device, 7B to 400B
    parameters' checkpoint (14 bytes each) at 10 to 1000 GB/s, up to 10 minutes of restart."""
    rng = hidden_random()
    return FailureModel(rng.choice([256, 1024, 4096, 16384]), rng.uniform(20_000.0, 80_000.0),
                        rng.uniform(7e9, 400e9) * 14, rng.uniform(10e9, 1e12), restart_s=rng.uniform(0.0, 600.0))


check_prediction = prediction_item(
    "prediction: the goodput at Young's interval of a cluster drawn when grading, before any curve (within 1 %)",
    ask="predicted_goodput", case=lambda: (hidden_failure_model(),), rtol=0.01,
    answer=lambda fm: goodput(fm, young_interval_s(fm)).goodput,
    hint=lambda fm: (f"{fm!r}: goodput = 1 / (1 + C/tau + (tau + C)/2M + R/M) at tau = sqrt(2 C M); "
                     "C, R and M are the model's checkpoint_time_s, restore_time_s and system_mtbf_s"))

check_explanation = explanation_item(
    "explanation: why checkpointing every step is not the best interval (a choice)", ask="why_not_every_step",
    right="b", case=lambda: (hidden_failure_model(),), answer=young_interval_s, rtol=1e-6,
    reason=lambda fm: (f"C={fm.checkpoint_time_s:.6g} s, M={fm.system_mtbf_s:.6g} s: C/tau + (tau + C)/2M is "
                       "smallest at Young's tau = sqrt(2 C M)"),
    hints={"a": "C = bytes / bandwidth is the same for every checkpoint: C / tau grows as tau shrinks",
           "c": "a replica recovery replays one step whatever the interval; the interval prices checkpoints",
           "d": "Young's interval minimises the waste: the curve's optimum sits next to it (part 4)"})

check_plot_of_your_recovery = own_plot_item(
    "your own recovery: the timeline of a run that loses a device (step and interval drawn when grading), "
    "bar by bar, and the steps it replays",
    ask="plot_my_recovery", case=lambda: (hidden_random().randint(1, 3), hidden_random().randint(1, 3)),
    run=lambda fail, every: train_resilient(DP2, faults=parse_faults(f"kill:1@{fail}#10"), checkpoint_every=every, replicas=False,
                                            check=False),
    draw=lambda r: viz.timeline(r.train.trace),
    what=lambda fail, every: f"DP2 (4 steps), kill:1@{fail}#10, checkpoint_every={every} (chosen when grading)",
    hint="train_resilient(DP2, faults=parse_faults(...), checkpoint_every=..., replicas=False, check=False), then viz.timeline",
    measure=lambda r: r.replayed_steps, measured="r.replayed_steps of the run you drew")
