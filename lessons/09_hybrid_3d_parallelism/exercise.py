# %% [markdown]
# # Lesson 09 (EXERCISE): hybrid 3-D parallelism with the cost model on a real model
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 09`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import ParallelConfig, estimate, get_model

MODEL = "gpt3-175b"      # 96 layers, h = 12288, 96 heads, s = 2048
HARDWARE = "a100-80gb"   # 312 TFLOP/s bf16, 80 GB, 8 GPUs per NVLink node
GPUS, GLOBAL_BATCH = 1024, 1536


# %% [markdown]
# ## 1. Where does each rank sit?
# Megatron-LM orders ranks tensor-fastest, then data, then pipeline:
# rank = k (t d) + j t + i for tensor index i, data index j, pipeline stage k.
# So a tensor group (t consecutive ranks) stays inside one 8-GPU node.

# %%
def megatron_rank(i: int, j: int, k: int, t: int, d: int) -> int:
    """Global rank of tensor index i, data-parallel index j, pipeline stage k."""
    raise NotImplementedError("TODO: tensor fastest, then data, then pipeline")


def microbatches(global_batch: int, micro_batch_size: int, d: int) -> int:
    """Micro-batches each pipeline runs per step."""
    raise NotImplementedError("TODO: the global batch is shared by d pipelines")


# %% [markdown]
# ## 2. Does it fit?
# Model states (lesson 08, no ZeRO): Megatron-LM keeps 18 bytes per parameter (bf16 weights 2,
# fp32 main gradients 4, fp32 master weights and Adam moments 12); each GPU holds 1/(t p) of them.

# %%
def model_state_bytes_per_gpu(params: float, t: int, p: int) -> float:
    """Approximate Megatron-LM model states (bf16, fp32 main gradients, Adam) per GPU under t-way TP and p stages."""
    raise NotImplementedError("TODO: 18 bytes per parameter, cut t p ways")


# %% [markdown]
# ## 3. Design a configuration
# Pick t, p, d (t p d = 1024), a micro-batch size, recomputation and sequence parallelism for
# GPT-3 175B on 1024 A100-80GB with a global batch of 1536 sequences. Goal: it fits in 80 GB and
# reaches at least 45 % MFU in `estimate`. Try a few with `estimate` and read the result.

# %%
def my_config() -> ParallelConfig:
    """Your configuration for GPT-3 175B on 1024 A100-80GB, global batch 1536."""
    raise NotImplementedError("TODO: TP inside the node, a pipeline across nodes, the rest data parallel")


# %% [markdown]
# ## 4. Predict, explain, then draw your own design
# **Predict** the 1F1B bubble share (p-1)/(m+p-1) of the step for p stages and d replicas with
# micro-batch b, batch 1536, before any estimate (parasim's schedules and `estimate` are withheld
# while it runs). The grader draws p, d and b.

# %%
def predicted_bubble_share(p: int, d: int, b: int) -> float:
    """(p-1)/(m+p-1) with m = 1536 / (b d)."""
    raise NotImplementedError("TODO: m from section 1's microbatches, then p-1 idle slots of m+p-1")


# %% [markdown]
# The README's run (t8 p8 d16, b = 1, m = 96) prints bubble 6.3%, yet (p-1)/(m+p-1) = 7/103 = 6.8%.
# Why is estimate's share smaller? Answer with one letter:
#   a) estimate uses another number of micro-batches
#   b) estimate divides the bubble by the whole step, which also holds the exposed data-parallel
#      and tensor-parallel communication and the optimizer: the same bubble, a longer step
#   c) estimate uses the Ultra-Scale Playbook's (p-1)/m
#   d) selective recomputation shortens the bubble
# and the number your reason gives on a 1F1B step the grader draws: p stages, m micro-batches, one
# micro-batch's forward t_f and backward t_b per stage (s), and other_s seconds of the step that are
# neither work nor bubble (exposed communication, optimizer): the bubble's share of that step.

# %%
def why_smaller_bubble(p: int, m: int, t_f: float, t_b: float, other_s: float) -> tuple[str, float]:
    """(one letter: a, b, c or d; the bubble's share of the drawn step)."""
    raise NotImplementedError("TODO: print r.bubble_time_s and r.step_time_s of the README's run; then the same sum here")


# %% [markdown]
# **Draw your own design.** Estimate your `my_config()` and draw its memory per GPU against the
# capacity: `viz.memory_breakdown({"my_config": r.memory.by_category()},
# capacity_bytes=r.memory.capacity_bytes)`; return it with the MFU you read. The grader reruns
# estimate on the configuration your `my_config()` returns and compares the bars.

# %%
def plot_my_design():
    """(the Figure of your design's memory per GPU, its MFU)."""
    raise NotImplementedError("TODO: r = estimate(get_model(MODEL), my_config(), HARDWARE), then the memory bars")


# %%
if __name__ == "__main__":
    model = get_model(MODEL)
    print(model, f"{model.params():.4g} parameters")
    cfg = my_config()
    print(cfg, estimate(model, cfg, HARDWARE))
    print(model_state_bytes_per_gpu(model.params(), cfg.tp, cfg.pp) / 1e9, "GB of model states")
