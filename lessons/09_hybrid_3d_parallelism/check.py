"""Autograder of lesson 09: rank order and micro-batches against ParallelConfig, memory and the
student's design against the analytic cost model (estimate)."""


from simulator import ParallelConfig, ParasimError, estimate, get_hardware, get_model, viz
from simulator.grading import (
    compare,
    each_case,
    expect,
    explanation_item,
    hidden_random,
    ok,
    own_plot_item,
    prediction_item,
    rebuild,
)
from simulator.parallel.schedule_registry import flush_formulas

LESSON = {
    "title": "Hybrid 3-D parallelism with the cost model",
    "goals": ["place ranks on a (pipeline, data, tensor) grid the way Megatron-LM does",
              "estimate memory per GPU of GPT-3 175B under t-way TP and p stages",
              "design a 3-D configuration for 1024 A100s and judge it with the cost model (MFU, bubble, memory)"],
    "app_pages": ["Scale explorer"],
    "requires": ["ParallelConfig", "estimate", "get_model"],
    "minutes": 60,
    "prerequisites": [5, 7, 8],
    # parasim's schedules and cost model compute the bubble: they raise while your prediction runs
    "withhold": {"predicted_bubble_share": ["simulator.parallel.schedule_registry:flush_formulas",
                                            "simulator.parallel.schedule_registry:make_schedule",
                                            "simulator.parallel.schedule_sim:simulate_schedule",
                                            "simulator.cost.analytic:estimate"],
                 "why_smaller_bubble": ["simulator.parallel.schedule_registry:flush_formulas",
                                        "simulator.parallel.schedule_registry:make_schedule",
                                        "simulator.parallel.schedule_sim:simulate_schedule"]},
}


def check_rank(s):
    "megatron_rank equals ParallelConfig.rank"
    cases = [(t, p, d, i, j, k) for t, p, d in [(2, 2, 2), (8, 4, 2), (4, 1, 8), (1, 8, 1)]
             for k in range(p) for j in range(d) for i in range(t)]
    return each_case(cases, lambda t, p, d, i, j, k: (
        ParallelConfig(tp=t, pp=p, dp=d, global_batch=d).rank(i, j, k), s.megatron_rank(i, j, k, t, d),
        f"t={t} p={p} d={d}, (i, j, k)=({i}, {j}, {k}): tensor fastest"), rtol=0.0)


def check_microbatches(s):
    "microbatches equals ParallelConfig.microbatches"
    for B, b, d in [(1536, 1, 16), (512, 2, 32), (64, 4, 4), (8, 1, 8)]:
        want = ParallelConfig(dp=d, micro_batch_size=b, global_batch=B).microbatches
        if s.microbatches(B, b, d) != want:
            return compare(want, s.microbatches(B, b, d), f"B={B}, b={b}, d={d}: each of the d replicas gets B/d "
                           "sequences per step, cut into micro-batches of b")
    return ok()


def check_memory(s):
    "model_state_bytes_per_gpu is within 8% of the cost model's model states (no ZeRO)"
    model = get_model("gpt3-175b")
    def case(t, p):
        cfg = ParallelConfig(tp=t, pp=p, dp=1024 // (t * p), global_batch=1024 // (t * p) * 4)
        return (estimate(model, cfg, "a100-80gb").memory.model_state_bytes, s.model_state_bytes_per_gpu(model.params(), t, p),
                f"t={t}, p={p}: 18 bytes per parameter (Megatron-LM) over t p GPUs (the first stage also holds the embedding)")
    return each_case([(8, 8), (8, 16), (4, 16), (8, 4)], case, rtol=0.08)


def check_design(s):
    "my_config uses 1024 GPUs and batch 1536, fits in an A100's 80 GiB (85.9 GB) and reaches >= 45% MFU"
    try:
        cfg = rebuild(s.my_config(), ParallelConfig)  # built here by ParallelConfig's own constructor
    except (TypeError, ValueError, ParasimError) as e:
        return expect(False, "a ParallelConfig", str(e), "return ParallelConfig(tp=..., pp=..., ...)")
    if cfg.gpus != 1024 or cfg.global_batch != 1536:
        return expect(False, "t p d = 1024 and global_batch = 1536", f"{cfg.gpus} GPUs, batch {cfg.global_batch}",
                      "use every GPU for the batch the exercise states")
    r = estimate(get_model("gpt3-175b"), cfg, "a100-80gb")
    if r.oom:
        cap = get_hardware("a100-80gb").memory_bytes
        return expect(False, f"memory <= {cap / 2**30:.0f} GiB ({cap / 1e9:.1f} GB)", repr(r.memory),
                      "more t or p, recomputation, or sequence parallelism")
    return expect(r.mfu >= 0.45, "MFU >= 45%", f"MFU {r.mfu:.1%}, bubble {r.bubble_fraction:.1%}, "
                  f"exposed comm {r.exposed_comm_s:.3g} s", "keep t within a node, m >> p, a small micro-batch")


def hidden_pipeline() -> tuple[int, int, int]:
    """(p, d, b) drawn when grading for 1024 GPUs and batch 1536 (t = 1024 / (p d) of 1..8): m =
    1536 / (b d) micro-batches per pipeline, a whole number."""
    rng = hidden_random()
    while True:
        p, t, b = rng.choice([2, 4, 8, 16, 32]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4])
        d = 1024 // (t * p)
        if 1536 % (b * d) == 0:
            return p, d, b


check_prediction = prediction_item(
    "prediction: the 1F1B bubble share (p-1)/(m+p-1) of a (p, d, b) drawn when grading (within 2 %)",
    ask="predicted_bubble_share", case=hidden_pipeline,
    answer=lambda p, d, b: flush_formulas("1f1b", p, 1536 // (b * d))["bubble_fraction"],
    hint=lambda p, d, b: f"p={p}, d={d}, b={b}, batch 1536: m = B / (b d) micro-batches, then p-1 idle slots of m+p-1")

def hidden_step() -> tuple[int, int, float, float, float]:
    """A 1F1B pipeline drawn when grading: p stages, m micro-batches, one micro-batch's forward and
    backward per stage (s), and the step's other time (exposed communication and optimizer, s)."""
    rng = hidden_random()
    p, m = rng.choice([4, 8, 16]), rng.choice([16, 32, 64, 96])
    return p, m, rng.choice([0.5, 1.0, 1.5]), rng.choice([1.0, 2.0, 3.0]), rng.choice([4.0, 12.5, 40.0])


def _bubble_share(p, m, t_f, t_b, other_s) -> float:
    bubble = flush_formulas("1f1b", p, m, t_f, t_b)["bubble_time"]
    return bubble / (bubble + m * (t_f + t_b) + other_s)


check_explanation = explanation_item(
    "explanation: why estimate's bubble (6.3%) is below (p-1)/(m+p-1) = 7/103 = 6.8% (a choice, and the share on "
    "a step drawn when grading)",
    ask="why_smaller_bubble", right="b", case=hidden_step, answer=_bubble_share,
    reason=lambda p, m, t_f, t_b, other_s: (f"p={p}, m={m}, t_f={t_f}, t_b={t_b}, other {other_s} s: the bubble "
                                            f"(p-1)(t_f+t_b) over the whole step, its work, its bubble and the rest"),
    hints={"a": "cfg.microbatches is 96 = B / (b d) in both: the same m",
           "c": "(p-1)/m = 7/96 = 7.3% is larger still: it divides by the ideal compute, not the step",
           "d": "recomputation lengthens every backward: the bubble and the work grow together"})

check_plot_of_your_design = own_plot_item(
    "your own design: its memory per GPU, bar by bar (parasim reruns estimate on your my_config)",
    ask="plot_my_design", given=lambda s: rebuild(s.my_config(), ParallelConfig),
    run=lambda cfg: estimate(get_model("gpt3-175b"), cfg, "a100-80gb"),
    draw=lambda r: viz.memory_breakdown({"my_config": r.memory.by_category()}, capacity_bytes=r.memory.capacity_bytes),
    what="estimate(gpt3-175b, my_config(), 'a100-80gb').memory against the A100's capacity",
    hint="viz.memory_breakdown({'my_config': r.memory.by_category()}, capacity_bytes=r.memory.capacity_bytes)",
    measure=lambda r: r.mfu, measured="the MFU estimate gives your design", rtol=1e-6)
