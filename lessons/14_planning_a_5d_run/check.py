"""Autograder of lesson 14: activations, the c that fits, the experts' memory and all-to-all, and
the search's best (d, c, t, p, e), each against parasim's cost model."""

import math

from simulator import ParallelConfig, activation_bytes_per_layer, estimate, get_model, search_training
from simulator.grading import compare, expect, ok

LESSON = {
    "title": "Planning a 5-D run: fit a long-context MoE model on a cluster",
    "goals": ["compute the activation memory of a long-context Llama-3-8B and see it does not fit without cp",
              "choose the context-parallel degree c that makes it fit",
              "for a mixture-of-experts variant, trade expert memory against the all-to-all with ep",
              "search every (dp, cp, tp, pp, ep) and say why the winner wins"],
    "app_pages": ["Scale explorer", "Context parallelism"],
    "requires": ["estimate", "search_training", "get_model", "activation_bytes_per_layer", "ParallelConfig"],
    "minutes": 45,
    "prerequisites": [9, 11, 13],
}

HW = "h100-sxm"


def _moe():
    return get_model("llama3-8b", seq=32768, num_experts=8, moe_router_topk=2)


def check_activation_gb(s):
    "activation_gb equals 32 x activation_bytes_per_layer(s/c, 1, 4096, 32, t, SP, 'selective')"
    for seq, cp, tp in [(131072, 1, 8), (131072, 4, 8), (8192, 1, 1), (32768, 2, 4)]:
        want = 32 * activation_bytes_per_layer(seq / cp, 1, 4096, 32, tp, True, "selective") / 1e9
        got = s.activation_gb(seq, cp, tp)
        if not math.isclose(got, want, rel_tol=1e-9):  # a NaN is never close
            return compare(round(want, 3), round(got, 3),
                           f"s={seq}, c={cp}, t={tp}: 34 (s/c) b h / t bytes per layer; c divides the tokens")
    return expect(s.activation_gb(131072, 1) > 64, "128k tokens without cp: more than 64 GB", s.activation_gb(131072, 1))


def _smallest_cp(seq, gpus):
    c = 1
    while 8 * c <= gpus:
        cfg = ParallelConfig(tp=8, cp=c, dp=gpus // (8 * c), global_batch=16, recompute="selective",
                             sequence_parallel=True)
        if not estimate(get_model("llama3-8b", seq=seq), cfg, HW).oom:
            return c
        c *= 2
    return 0


def check_smallest_cp(s):
    "smallest_cp finds the first power-of-two c that fits on H100s"
    for seq, gpus in [(131072, 128), (65536, 128), (8192, 64)]:
        want, got = _smallest_cp(seq, gpus), s.smallest_cp(seq, gpus)
        if got != want:
            return compare(want, got, f"s={seq} on {gpus} GPUs: loop c = 1, 2, 4, ... and stop at the first "
                                      "estimate(...) with not .oom (dp = gpus / (8 c))")
    return ok()


def check_expert_costs(s):
    "expert_costs(e): memory falls and the expert all-to-all appears as e grows"
    for ep in (1, 2, 4, 8):
        cfg = ParallelConfig(tp=4, cp=2, dp=8, ep=ep, global_batch=16, recompute="selective", sequence_parallel=True)
        r = estimate(_moe(), cfg, HW)
        want = [r.memory_per_gpu_bytes / 1e9, r.comm_time_by_kind.get("expert_all_to_all", 0.0)]
        got = list(s.expert_costs(ep))
        if not compare(want, got).passed:
            return compare(want, got, f"ep={ep}: memory_per_gpu_bytes / 1e9 and comm_time_by_kind"
                                      "['expert_all_to_all'] (0 when ep = 1: no tokens leave the GPU)")
    return ok()


def check_best_plan(s):
    "best_plan is search_training's fastest (dp, cp, tp, pp, ep) of the MoE model on 64 GPUs"
    best = search_training(_moe(), HW, 64, 16, schedules=("1f1b",), zero_stages=(0, 1),
                           sequence_parallel=(True,), top=1).best
    c = best.config
    want = {"dp": c.dp, "cp": c.cp, "tp": c.tp, "pp": c.pp, "ep": c.ep}
    got = s.best_plan(64)
    keys = {k: got.get(k) for k in want} if isinstance(got, dict) else got
    if keys != want:
        return compare(want, keys, "search_training(moe(), HW, 64, 16, ...).best.config: read dp, cp, tp, pp, ep")
    return expect(abs(got.get("step_s", 0) - best.result.step_time_s) <= 1e-9 * best.result.step_time_s,
                  f"step_s = {best.result.step_time_s:.4g}", got.get("step_s"), ".best.result.step_time_s")
