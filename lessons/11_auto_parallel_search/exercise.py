# %% [markdown]
# # Lesson 11 (EXERCISE): auto-parallel search — how a framework decides where to cut
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
    raise NotImplementedError("TODO: nested loops with the divisibility rules")


# %% [markdown]
# ## 2. The cost model decides
# For every candidate build a `ParallelConfig` (1F1B, selective recomputation, sequence parallelism
# when t > 1), price it with `estimate`, drop those that do not fit (`result.oom`), keep the fastest.

# %%
def best_config(model_name: str, hardware: str, gpus: int, global_batch: int) -> ParallelConfig:
    """The fastest configuration that fits, found by brute force."""
    raise NotImplementedError("TODO: enumerate, estimate, filter OOM, minimise the step time")


# %%
if __name__ == "__main__":
    model = get_model(MODEL)
    print(len(candidates(model, GPUS, BATCH, 8)), "candidates")
    mine = best_config(MODEL, HARDWARE, GPUS, BATCH)
    print("mine:  ", mine, estimate(model, mine, HARDWARE))
    print("parasim:", search_configs(MODEL, HARDWARE, GPUS, BATCH, recomputes=("selective",),
                                     micro_batch_sizes=(1, 2), top=1)[0])
