"""Autograder of lesson 09: rank order and micro-batches against ParallelConfig, memory and the
student's design against the analytic cost model (estimate)."""

import numpy as np

from simulator import ParallelConfig, ParasimError, estimate, get_hardware, get_model
from simulator.grading import compare, expect, ok, rebuild

LESSON = {
    "title": "Hybrid 3-D parallelism with the cost model",
    "goals": ["place ranks on a (pipeline, data, tensor) grid the way Megatron-LM does",
              "estimate memory per GPU of GPT-3 175B under t-way TP and p stages",
              "design a 3-D configuration for 1024 A100s and judge it with the cost model (MFU, bubble, memory)"],
    "app_pages": ["Scale explorer"],
    "requires": ["ParallelConfig", "estimate", "get_model"],
    "minutes": 60,
    "prerequisites": [5, 7, 8],
}


def check_rank(s):
    "megatron_rank equals ParallelConfig.rank"
    for t, p, d in [(2, 2, 2), (8, 4, 2), (4, 1, 8), (1, 8, 1)]:
        cfg = ParallelConfig(tp=t, pp=p, dp=d, global_batch=d)
        for k in range(p):
            for j in range(d):
                for i in range(t):
                    want = cfg.rank(i, j, k)
                    got = s.megatron_rank(i, j, k, t, d)
                    if got != want:
                        return compare(want, got, f"t={t} p={p} d={d}, (i, j, k)=({i}, {j}, {k}): tensor fastest")
    return ok()


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
    for t, p in [(8, 8), (8, 16), (4, 16), (8, 4)]:
        cfg = ParallelConfig(tp=t, pp=p, dp=1024 // (t * p), global_batch=1024 // (t * p) * 4)
        want = estimate(model, cfg, "a100-80gb").memory.model_state_bytes
        got = s.model_state_bytes_per_gpu(model.params(), t, p)
        if not np.isclose(got, want, rtol=0.08):
            return compare(want, got, f"t={t}, p={p}: 18 bytes per parameter (Megatron-LM) over t p GPUs (the first stage also holds the embedding)", rtol=0.08)
    return ok()


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
