# %% [markdown]
# # Lesson 04 (SOLUTION): layer-wise model parallelism and its idle time
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 04`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import MLPConfig, SimpleDeviceModel, TrainConfig, make_schedule, simulate_schedule, train

MODEL = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)  # 4 equal dense layers
# a teaching clock: 1 GFLOP/s devices and free communication, so only compute takes time
FREE_COMM = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)


# %% [markdown]
# ## 1. Which device holds which layers?
# Contiguous blocks, as even as possible; when the layers do not divide, the first stages get
# one more layer each.

# %%
def split_layers(n_layers: int, stages: int) -> tuple[tuple[int, ...], ...]:
    """Layer indices of each stage, e.g. split_layers(6, 4) == ((0, 1), (2, 3), (4,), (5,))."""
    # BEGIN SOLUTION: q, r = divmod(n_layers, stages); the first r stages get q + 1 layers
    q, r = divmod(n_layers, stages)
    out, start = [], 0
    for s in range(stages):
        size = q + (1 if s < r else 0)
        out.append(tuple(range(start, start + size)))
        start += size
    return tuple(out)
    # END SOLUTION


# %% [markdown]
# ## 2. Who waits?
# The forward runs on device 0, then 1, ..., then the backward comes back. At any moment exactly
# one device computes.

# %%
def idle_fraction(p: int) -> float:
    """Fraction of device-time idle in one step on p devices (equal stages, free communication)."""
    # BEGIN SOLUTION: each device works 1/p of the step
    return (p - 1) / p
    # END SOLUTION


def speedup(p: int) -> float:
    """Step time on one device divided by step time on p devices (same batch, free communication)."""
    # BEGIN SOLUTION: nothing runs concurrently, so no speedup
    return 1.0
    # END SOLUTION


def p2p_bytes_per_step(p: int, batch: int, hidden: int, itemsize: int = 8) -> int:
    """Bytes sent between stages per step: activations forward, their gradients backward."""
    # BEGIN SOLUTION: (p-1) boundaries, each crossed twice by a (batch, hidden) array
    return 2 * (p - 1) * batch * hidden * itemsize
    # END SOLUTION


# %% [markdown]
# ## 5. Predict, explain, then look at your own run
# Predict before you run anything: the idle share of the step with a p-layer MLP cut into p
# stages (one layer each), free communication (the grader picks p when grading, and runs it).

# %%
def predicted_idle(p: int) -> float:
    """Your prediction of the idle share of the step on p stages (a number in [0, 1])."""
    # BEGIN SOLUTION: only one of the p devices works at any time
    return (p - 1) / p
    # END SOLUTION


# %% [markdown]
# Why is the layer-wise split no faster than one device? Choose one letter:
#   a) sending the activations between devices takes most of the step
#   b) the batch passes through the stages one after the other, so each device waits while the
#      others run their layers: the work is the same, only spread over time
#   c) every device computes the whole model
#   d) the devices split the batch, so each step has more steps
# and the number your reason gives (the grader picks p and t): the seconds ONE device is idle in a
# step of p equal stages whose forward and backward take t seconds per stage.

# %%
def why_no_speedup(p: int, t: float) -> tuple[str, float]:
    """(one letter: a, b, c or d; one device's idle seconds in the step)."""
    # BEGIN SOLUTION: communication is free in these runs; look at the timeline
    return "b", (p - 1) * t
    # END SOLUTION


# %% [markdown]
# Your own run: a `layers`-layer MLP (hidden 16) on p stages (batch 16, free communication; the
# grader picks layers and p); return its timeline, `viz.timeline(r.trace)`, and the idle share
# you measured on it (`r.trace.bubble_fraction()`). The grader reads the figure's bars.

# %%
def plot_my_run(layers: int, p: int):
    """(the matplotlib Figure of your layer-wise run's timeline, its idle share)."""
    # BEGIN SOLUTION: train(TrainConfig(MLPConfig(..., layers=layers, ...), strategy="layer", devices=p, global_batch=16), device_model=FREE_COMM)
    from simulator import viz

    mlp = MLPConfig(in_dim=16, hidden=16, layers=layers, classes=16)
    r = train(TrainConfig(mlp, strategy="layer", devices=p, global_batch=16), device_model=FREE_COMM, check=False)
    return viz.timeline(r.trace), r.trace.bubble_fraction()
    # END SOLUTION


# %%
# %%
if __name__ == "__main__":
    r = train(TrainConfig(MODEL, strategy="layer", devices=4, global_batch=16), device_model=FREE_COMM)
    print(r.compiled.notes["stages"], "idle:", r.trace.bubble_fraction(), "predicted:", idle_fraction(4))
    print(simulate_schedule(make_schedule("gpipe", 4, 1)))
