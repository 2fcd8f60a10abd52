# %% [markdown]
# # Lesson 14 (EXERCISE): planning a 5-D run — fit a long-context MoE model on a cluster
#
# Llama-3-8B at 128k tokens, then a mixture-of-experts variant, on H100s: the cost model says what
# fits and what is fast. Fill in every function that raises `NotImplementedError("TODO ...")`,
# then run `parasim lesson check 14`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import ParallelConfig, estimate, get_model, search_training

HW = "h100-sxm"   # 80 GB HBM3, NVLink inside a node of 8


def llama(seq_len: int):
    """Llama-3-8B (32 layers, h = 4096, 32 heads, 8 KV heads) trained at `seq_len` tokens."""
    return get_model("llama3-8b", seq=seq_len)


def moe(seq_len: int = 32768):
    """A mixture-of-experts Llama-3-8B: 8 experts per layer, each token routed to 2 (Mixtral-style)."""
    return get_model("llama3-8b", seq=seq_len, num_experts=8, moe_router_topk=2)


# %% [markdown]
# ## 1. Activations grow with the sequence
# With tensor parallelism t and sequence parallelism, and selective recomputation (no s x s
# attention scores kept), one layer keeps 34 s b h / t bytes for its backward (Korthikanti et al.
# 2022, Table 2). Context parallelism c leaves each GPU s / c of the tokens.

# %%
def activation_gb(seq_len: int, cp: int, tp: int = 8) -> float:
    """Activation GB per GPU of Llama-3-8B's 32 layers: micro-batch 1, t = tp with SP, selective."""
    raise NotImplementedError("TODO: 32 layers x 34 (s/c) b h / t bytes, b = 1, h = 4096")


# %% [markdown]
# ## 2. Choose c so that it fits
# Ask the cost model: `estimate(llama(s), ParallelConfig(...), HW)` returns `.oom` and `.memory`.
# Use tp=8 (one node), cp=c, dp = gpus / (8 c), global batch 16, micro-batch 1, selective
# recomputation and sequence parallelism. Try c = 1, 2, 4, ... and return the first that fits.

# %%
def smallest_cp(seq_len: int, gpus: int) -> int:
    """The smallest power-of-two c for which Llama-3-8B at seq_len fits on `gpus` H100s (as above)."""
    raise NotImplementedError("TODO: c = 1, 2, 4, ... while 8 c divides the GPUs; the first with not .oom")


# %% [markdown]
# ## 3. Experts: memory against all-to-all
# The MoE model has 8 x the MLP parameters. Expert parallelism e splits the experts over e of the
# d data-parallel ranks: parameters, gradients and Adam state of the experts shrink by e, but every
# token is sent to its experts and back (two all-to-alls per MoE layer, forward and backward).
# Use tp=4, cp=2, dp=8, ep=e (64 GPUs), global batch 16, micro-batch 1, selective, SP.

# %%
def expert_costs(ep: int) -> tuple[float, float]:
    """(memory GB per GPU, seconds of expert all-to-all per step) of moe() with ep = e, as above."""
    raise NotImplementedError("TODO: estimate(...).memory_per_gpu_bytes / 1e9 and .comm_time_by_kind.get('expert_all_to_all', 0)")


# %% [markdown]
# ## 4. Let the search choose all five
# `search_training(model, HW, gpus, global_batch, ...)` tries every (t, c, p, d, e), micro-batch,
# recomputation and ZeRO stage, keeps what fits and sorts by step time. Search moe() on 64 GPUs
# with global batch 16, schedules=("1f1b",), zero_stages=(0, 1), sequence_parallel=(True,).

# %%
def best_plan(gpus: int = 64) -> dict:
    """The fastest plan as {"dp", "cp", "tp", "pp", "ep"} (ints) and "step_s" (its step time)."""
    raise NotImplementedError("TODO: search_training(...).best is a Candidate: .config and .result.step_time_s")


# %% [markdown]
# ## 5. Predict, explain, then draw your own plan
# **Predict** the activation GB per GPU that `estimate` reports for Llama-3-8B at s tokens with t,
# c (128 GPUs, d = 128 / (t c), selective, SP), before asking it (`estimate` and
# `activation_bytes_per_layer` are withheld while this runs). Within 10 %: the model has 8 KV heads.

# %%
def predicted_activation_gb(seq_len: int, cp: int, tp: int) -> float:
    """Your prediction of estimate(...).memory.activation_bytes / 1e9."""
    raise NotImplementedError("TODO: part 1's 34 (s/c) b h / t bytes per layer, 32 layers")


# %% [markdown]
# Why does context parallelism cut the activations but leave the model states per GPU as they
# are? Choose one letter:
#   a) the model states are cut by c too, but the cost model forgets it
#   b) c cuts the tokens: each of the c ranks keeps all the weights of its tensor shard and runs them
#      on s / c tokens, so only what grows with the tokens (activations) shrinks
#   c) the K/V blocks the ring passes around are model states
#   d) context parallelism stores the weights in a lower precision
# and the number your reason gives (the grader picks s, c and t): how many times smaller one GPU's
# activations are at c than at c = 1, the rest of the plan unchanged.

# %%
def why_cp_keeps_states(seq: int, cp: int, tp: int) -> tuple[str, float]:
    """(one letter: a, b, c or d; the factor by which the activations per GPU fall from c = 1)."""
    raise NotImplementedError("TODO: what does c divide? the tokens per rank, s / c")


# %% [markdown]
# **Draw your own plan.** For s tokens and context-parallel degree c (the grader draws them):
# estimate Llama-3-8B on 128 H100s with t = 8, c, d = 128 / (8 c), batch 128, selective and SP,
# draw `viz.memory_breakdown({"plan": r.memory.by_category()}, capacity_bytes=r.memory.capacity_bytes)`
# and return it with whether the plan fits.

# %%
def plot_my_memory(seq_len: int, cp: int):
    """(the Figure of the plan's memory per GPU, True when it fits)."""
    raise NotImplementedError("TODO: estimate(llama(seq_len), ParallelConfig(tp=8, cp=cp, dp=128 // (8 * cp), ...), HW)")


if __name__ == "__main__":
    for c in (1, 2, 4, 8, 16):
        print(f"128k tokens, c={c}: {activation_gb(131072, c):.1f} GB of layer activations per GPU")
    print("smallest c at 128k on 128 GPUs:", smallest_cp(131072, 128))
    for e in (1, 2, 4, 8):
        gb, a2a = expert_costs(e)
        print(f"ep={e}: {gb:.1f} GB per GPU, {a2a:.3f} s of expert all-to-all per step")
    print(best_plan())
    found = search_training(moe(), HW, 64, 16, schedules=("1f1b",), zero_stages=(0, 1), sequence_parallel=(True,))
    for alt in found.alternatives[:3]:
        print(alt)
