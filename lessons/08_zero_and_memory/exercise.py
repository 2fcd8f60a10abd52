# %% [markdown]
# # Lesson 08 (EXERCISE): ZeRO and memory
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 08`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import MLPConfig, TrainConfig, model_state_bytes_per_device, train

# Mixed-precision Adam (Rajbhandari et al. 2020): per parameter 2 bytes fp16 weights, 2 bytes fp16
# gradients, K = 12 bytes optimizer state (fp32 master weights, momentum, variance).
P_BYTES, G_BYTES, K_BYTES = 2, 2, 12


# %% [markdown]
# ## 1. Model-state memory per device
# Data parallelism replicates everything. ZeRO partitions over the N_d data-parallel ranks:
# stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the parameters.

# %%
def zero_bytes_per_device(psi: float, nd: int, stage: int) -> float:
    """Model-state bytes per device for psi parameters on nd ranks, ZeRO stage 0-3."""
    raise NotImplementedError("TODO: the partitioned parts are divided by nd")


def max_params(capacity_bytes: float, nd: int, stage: int) -> float:
    """The largest psi whose model states fit exactly in capacity_bytes per device."""
    raise NotImplementedError("TODO: memory is linear in psi")


# %% [markdown]
# ## 2. What does it cost in communication?
# Stages 1 and 2 replace the all-reduce by a reduce-scatter of the gradients plus an all-gather of
# the updated parameters: the same 2(n-1)/n S. Stage 3 gathers the parameters twice (forward and
# backward) and reduce-scatters the gradients once: 3(n-1)/n S (S = bytes of all parameters).

# %%
def zero_comm_bytes_per_device(param_bytes: float, nd: int, stage: int) -> float:
    """Bytes each rank sends per step."""
    raise NotImplementedError("TODO: 2 for stages 0-2, 3 for stage 3, times (n-1)/n S")


# %% [markdown]
# ## Predict, explain, then look at your own run
# Predict before you compute anything: the model-state bytes per device of ZeRO stage `stage` for
# a model of psi parameters on nd devices (mixed-precision Adam: 16 bytes per parameter; the
# grader picks psi, nd and stage when grading).

# %%
def predicted_zero_bytes(psi: float, nd: int, stage: int) -> float:
    """Your prediction of the model-state bytes per device."""
    raise NotImplementedError("TODO: your zero_bytes_per_device")


# %% [markdown]
# ZeRO-1 and ZeRO-2 send as many bytes as plain data parallelism. Why? Choose one letter:
#   a) they do not partition anything
#   b) a reduce-scatter followed by an all-gather moves the same bytes as one all-reduce (which
#      is built of those two halves), so partitioning the states adds no communication
#   c) they compress the gradients
#   d) they skip the optimizer step on most devices
# and the number your reason gives (the grader picks n and S): the bytes one rank sends in a ring
# reduce-scatter of S bytes followed by a ring all-gather of S bytes over n ranks.

# %%
def why_same_bytes(n: int, nbytes: int) -> tuple[str, float]:
    """(one letter: a, b, c or d; the bytes one rank sends in the reduce-scatter and the all-gather)."""
    raise NotImplementedError("TODO: compare the collectives of dp and zero1 in the README's run")


# %% [markdown]
# Your own run: train the README's MLP with ZeRO stage `stage` on nd devices (batch 16; the
# grader picks stage and nd) and return its memory over time, `viz.memory_over_time(r.trace)`.
# The grader reads the figure's data, not its pixels.

# %%
def plot_my_run(stage: int, nd: int):
    """The matplotlib Figure of your ZeRO run's memory over time."""
    raise NotImplementedError("TODO: train(TrainConfig(mlp, strategy=f\"zero{stage}\", devices=nd, global_batch=16))")


# %%
# %%
if __name__ == "__main__":
    for stage in range(4):
        print(stage, zero_bytes_per_device(7.5e9, 64, stage) / 1e9, "GB;",
              model_state_bytes_per_device(7.5e9, 64, stage) / 1e9)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    for s in ("dp", "zero1", "zero2", "zero3"):
        r = train(TrainConfig(mlp, strategy=s, devices=4, global_batch=16))
        print(s, r.trace.bytes_by_collective(), r.bytes_sent_per_device[0])
