"""Autograder of lesson 14: activations, the c that fits, the experts' memory and all-to-all, and
the search's best (d, c, t, p, e), each against parasim's cost model."""

from simulator import ParallelConfig, activation_bytes_per_layer, estimate, get_model, search_training, viz
from simulator.grading import (
    compare,
    each_case,
    expect,
    explanation_item,
    hidden_random,
    own_plot_item,
    prediction_item,
)

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
    # the cost model answers these: it raises while your prediction runs
    "withhold": {"predicted_activation_gb": ["simulator.cost.analytic:estimate",
                                             "simulator.cost.memory:activation_bytes_per_layer"],
                 "why_cp_keeps_states": ["simulator.cost.analytic:estimate"]},
}

HW = "h100-sxm"


def _moe():
    return get_model("llama3-8b", seq=32768, num_experts=8, moe_router_topk=2)


def check_activation_gb(s):
    "activation_gb equals 32 x activation_bytes_per_layer(s/c, 1, 4096, 32, t, SP, 'selective')"
    out = each_case([(131072, 1, 8), (131072, 4, 8), (8192, 1, 1), (32768, 2, 4)], lambda seq, cp, tp: (
        32 * activation_bytes_per_layer(seq / cp, 1, 4096, 32, tp, True, "selective") / 1e9, s.activation_gb(seq, cp, tp),
        f"s={seq}, c={cp}, t={tp}: 34 (s/c) b h / t bytes per layer; c divides the tokens"))    # a NaN is never close
    if not out.passed:
        return out
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
    return each_case([(131072, 128), (65536, 128), (8192, 64)], lambda seq, gpus: (
        _smallest_cp(seq, gpus), s.smallest_cp(seq, gpus),
        f"s={seq} on {gpus} GPUs: loop c = 1, 2, 4, ... and stop at the first estimate(...) with not .oom "
        "(dp = gpus / (8 c))"), rtol=0.0)


def check_expert_costs(s):
    "expert_costs(e): memory falls and the expert all-to-all appears as e grows"
    def case(ep):
        cfg = ParallelConfig(tp=4, cp=2, dp=8, ep=ep, global_batch=16, recompute="selective", sequence_parallel=True)
        r = estimate(_moe(), cfg, HW)
        return ([r.memory_per_gpu_bytes / 1e9, r.comm_time_by_kind.get("expert_all_to_all", 0.0)], list(s.expert_costs(ep)),
                f"ep={ep}: memory_per_gpu_bytes / 1e9 and comm_time_by_kind['expert_all_to_all'] (0 when ep = 1: no "
                "tokens leave the GPU)")
    return each_case([(1,), (2,), (4,), (8,)], case)


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


def hidden_context() -> tuple[int, int, int]:
    """(sequence length, c, t) drawn when grading: 16k to 128k tokens, c of 1..8, t of 2..8."""
    rng = hidden_random()
    return rng.choice([16384, 32768, 65536, 131072]), rng.choice([1, 2, 4, 8]), rng.choice([2, 4, 8])


def _llama_run(seq: int, cp: int, tp: int = 8):
    """Llama-3-8B at `seq` tokens on 128 H100s: t, c, d = 128 / (t c), batch 128, selective, SP."""
    return estimate(get_model("llama3-8b", seq=seq), ParallelConfig(tp=tp, cp=cp, dp=128 // (tp * cp), global_batch=128,
                                                                   recompute="selective", sequence_parallel=True), HW)


check_prediction = prediction_item(
    "prediction: the activation GB per GPU the cost model reports for (s, c, t) drawn when grading (within 10 %)",
    ask="predicted_activation_gb", case=hidden_context, rtol=0.10,
    answer=lambda seq, cp, tp: _llama_run(seq, cp, tp).memory.activation_bytes / 1e9,
    hint=lambda seq, cp, tp: (f"s={seq}, c={cp}, t={tp}: 32 layers x 34 (s/c) b h / t bytes (part 1's rule, multi-head "
                              "attention; Llama's 8 KV heads keep a little less)"))

check_explanation = explanation_item(
    "explanation: why c cuts the activations but not the model states (a choice)", ask="why_cp_keeps_states",
    right="b", case=hidden_context,
    answer=lambda seq, cp, tp: _llama_run(seq, 1, tp).memory.activation_bytes / _llama_run(seq, cp, tp).memory.activation_bytes,
    reason=lambda seq, cp, tp: f"s={seq}, c={cp}, t={tp}: each rank runs s/c tokens, so its activations fall c-fold from c = 1",
    hints={"a": "c ranks hold the same layers: compare memory.model_state_bytes at c = 1 and c = 4",
           "c": "the K/V blocks travel around the ring and are not kept: part 1's activations fall as 1/c",
           "d": "the model states stay in bf16 weights, fp32 gradients and Adam state whatever c is"})

check_plot_of_your_plan = own_plot_item(
    "your own plan: Llama-3-8B's memory per GPU at (s, c) drawn when grading, bar by bar, and whether it fits",
    ask="plot_my_memory", case=lambda: hidden_context()[:2], run=_llama_run,
    draw=lambda r: viz.memory_breakdown({"plan": r.memory.by_category()}, capacity_bytes=r.memory.capacity_bytes),
    what=lambda seq, cp: f"estimate of s={seq}, t=8, c={cp}, d={128 // (8 * cp)} on H100s (chosen when grading)",
    hint="viz.memory_breakdown({'plan': r.memory.by_category()}, capacity_bytes=r.memory.capacity_bytes)",
    measure=lambda r: not r.oom, measured="True when it fits (not r.oom)")
