# %% [markdown]
# # Lesson 05 (SOLUTION): pipeline bubbles — GPipe vs 1F1B
#
# Predict, then measure. Fill in every function that raises `NotImplementedError("TODO ...")`,
# then run `parasim lesson check 05`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import (MLPConfig, SimpleDeviceModel, TrainConfig, format_schedule, make_schedule,
                       parse_schedule, simulate_schedule, train)


# %% [markdown]
# ## 1. Predict the bubble
# p stages, m micro-batches, forward t_f and backward t_b per micro-batch per stage, free
# communication. The pipeline fills in p-1 forward slots and drains in p-1 backward slots.

# %%
def bubble_time(p: int, m: int, t_f: float, t_b: float) -> float:
    """Idle time of each device in one GPipe or 1F1B step."""
    # BEGIN SOLUTION: fill + drain
    return (p - 1) * (t_f + t_b)
    # END SOLUTION


def bubble_fraction(p: int, m: int) -> float:
    """Idle share of the whole step (equal t_f, t_b on every stage)."""
    # BEGIN SOLUTION: bubble / (ideal compute + bubble)
    return (p - 1) / (m + p - 1)
    # END SOLUTION


# %% [markdown]
# ## 2. Predict the memory
# A device keeps a micro-batch's activations from its forward until its backward.
# GPipe runs all forwards first; 1F1B starts backwards as early as it can.

# %%
def peak_in_flight(schedule: str, p: int, m: int) -> list[int]:
    """Per device d = 0..p-1: the most micro-batches whose activations it holds at once."""
    # BEGIN SOLUTION: GPipe m everywhere; 1F1B stage d: its p-d-1 warm-up forwards plus the first steady forward (at most m)
    if schedule == "gpipe":
        return [m] * p
    return [min(p - d, m) for d in range(p)]
    # END SOLUTION


# %% [markdown]
# ## 3. Write 1F1B yourself
# One line per device, actions separated by spaces: `F3` = forward of micro-batch 3, `BW3` = its
# whole backward. Device d does w = min(p - d - 1 + extra_warmup, m) warm-up forwards, then
# alternates one forward and one backward, then drains the remaining backwards. `extra_warmup`
# (0 is plain 1F1B) runs that many more forwards before the first backward on every stage: more
# activations held, more slack for a slow stage. The grader picks p, m and extra_warmup when it
# grades, and checks your schedule action by action.

# %%
def one_f_one_b_text(p: int, m: int, extra_warmup: int = 0) -> str:
    """The 1F1B schedule (with `extra_warmup` more warm-up forwards per stage) in parasim's text form."""
    # BEGIN SOLUTION: warm-up forwards, steady F/BW pairs, cool-down backwards
    lines = []
    for d in range(p):
        warm = min(p - d - 1 + extra_warmup, m)
        acts = [f"F{i}" for i in range(warm)]
        for i in range(m - warm):
            acts += [f"F{warm + i}", f"BW{i}"]
        acts += [f"BW{i}" for i in range(m - warm, m)]
        lines.append(" ".join(acts))
    return "\n".join(lines)
    # END SOLUTION


# %% [markdown]
# ## 4. Predict, explain, then look at your own run
# Predict before you run anything (parasim's schedules and simulator are withheld while this
# function runs): the bubble's share of a 1F1B step with p = 8 stages and m = 24 micro-batches.

# %%
def predicted_share_p8_m24() -> float:
    """Your prediction of the bubble's share of the step, p = 8, m = 24 (a number in [0, 1])."""
    # BEGIN SOLUTION: (p - 1) / (m + p - 1)
    return 7 / 31
    # END SOLUTION


# %% [markdown]
# Why does 1F1B need less activation memory than GPipe, at the same bubble? Answer with one letter:
#   a) its bubble is smaller, so activations wait less
#   b) each micro-batch's backward runs soon after its forward, so stage d holds at most
#      min(p - d, m) micro-batches' activations instead of m
#   c) it recomputes the activations during the backward pass
#   d) it sends fewer bytes between stages

# %%
def why_1f1b_saves_memory() -> str:
    """One letter: a, b, c or d."""
    # BEGIN SOLUTION: which choice matches the in-flight counts you computed in part 2?
    return "b"
    # END SOLUTION


# %% [markdown]
# Now your own run: train the 4-stage MLP pipeline with m = 8 and free communication, draw its
# timeline with `viz.timeline(r.trace)` and return the figure with the bubble you measured
# (`r.trace.bubble_fraction()`). The grader reads the bars of your figure (not its pixels) and
# compares them with the run. Look at the picture: where is the idle time that makes the measured
# bubble differ from (p - 1)/(m + p - 1)?

# %%
def plot_my_run():
    """Train, draw the timeline; return (the matplotlib Figure, the measured bubble fraction)."""
    # BEGIN SOLUTION: train(TrainConfig(mlp, strategy="pp", devices=4, batch_size=32, microbatches=8), device_model=free)
    from simulator import viz

    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    r = train(TrainConfig(mlp, strategy="pp", devices=4, batch_size=32, microbatches=8), device_model=free,
              check=False)
    return viz.timeline(r.trace), r.trace.bubble_fraction()
    # END SOLUTION


# %%
if __name__ == "__main__":
    for name in ("gpipe", "1f1b"):
        print(simulate_schedule(make_schedule(name, 4, 8), t_f=1, t_b=2, t_w=0))
    print(bubble_time(4, 8, 1, 2), bubble_fraction(4, 8), peak_in_flight("1f1b", 4, 8))
    mine = parse_schedule(one_f_one_b_text(4, 8))
    print(format_schedule(mine) == format_schedule(make_schedule("1f1b", 4, 8)))
    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    r = train(TrainConfig(mlp, strategy="pp", devices=4, batch_size=32, microbatches=8), device_model=free)
    print("measured bubble", r.trace.bubble_fraction(), "predicted", bubble_fraction(4, 8))
