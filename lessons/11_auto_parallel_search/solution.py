# %% [markdown]
# # Lesson 11 (SOLUTION): auto-parallel search — how a framework decides where to cut
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 11`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import ParallelConfig, estimate, get_hardware, get_model, search_configs

MODEL, HARDWARE, GPUS, BATCH = "megatron-18.4b", "a100-80gb", 64, 256


# %% [markdown]
# ## 1. The search space
# t: powers of two dividing the heads, at most the GPUs of a node (tensor parallelism stays inside
# it); p: divides the layers; d = gpus / (t p), an integer; micro-batch size b in `micro_batch_sizes`
# with B divisible by b d.

# %%
def candidates(model, gpus: int, global_batch: int, max_tp: int, micro_batch_sizes=(1, 2)) -> list[tuple]:
    """Every (t, p, d, b) of the search space above."""
    # BEGIN SOLUTION: nested loops with the divisibility rules
    out = []
    t = 1
    while t <= min(max_tp, gpus):
        if model.heads % t == 0 and gpus % t == 0:
            for p in range(1, gpus // t + 1):
                if (gpus // t) % p or model.layers % p:
                    continue
                d = gpus // (t * p)
                out += [(t, p, d, b) for b in micro_batch_sizes if global_batch % (b * d) == 0]
        t *= 2
    return out
    # END SOLUTION


# %% [markdown]
# ## 2. The cost model decides
# For every candidate build a `ParallelConfig` (1F1B, selective recomputation, sequence parallelism
# when t > 1), price it with `estimate`, drop those that do not fit (`result.oom`), keep the fastest.

# %%
def best_config(model_name: str, hardware: str, gpus: int, global_batch: int) -> ParallelConfig:
    """The fastest configuration that fits, found by brute force."""
    # BEGIN SOLUTION: enumerate, estimate, filter OOM, minimise the step time
    model, hw = get_model(model_name), get_hardware(hardware)
    best, best_time = None, float("inf")
    for t, p, d, b in candidates(model, gpus, global_batch, hw.devices_per_node):
        cfg = ParallelConfig(tp=t, pp=p, dp=d, micro_batch_size=b, global_batch=global_batch,
                             recompute="selective", sequence_parallel=t > 1)
        r = estimate(model, cfg, hw)
        if not r.oom and r.step_time_s < best_time:
            best, best_time = cfg, r.step_time_s
    return best
    # END SOLUTION


# %%
if __name__ == "__main__":
    model = get_model(MODEL)
    print(len(candidates(model, GPUS, BATCH, 8)), "candidates")
    mine = best_config(MODEL, HARDWARE, GPUS, BATCH)
    print("mine:  ", mine, estimate(model, mine, HARDWARE))
    print("parasim:", search_configs(MODEL, HARDWARE, GPUS, BATCH, recomputes=("selective",),
                                     micro_batch_sizes=(1, 2), top=1)[0])
