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
# ## 4. Predict, explain, then look at your own schedule
# Predict before you run anything (parasim's schedules and simulator are withheld while this
# function runs): the bubble's share of a 1F1B step with p stages and m micro-batches (the grader
# picks p and m when grading).

# %%
def predicted_share(p: int, m: int) -> float:
    """Your prediction of the bubble's share of the step (a number in [0, 1])."""
    # BEGIN SOLUTION: (p - 1) / (m + p - 1)
    return (p - 1) / (m + p - 1)
    # END SOLUTION


# %% [markdown]
# Why does 1F1B need less activation memory than GPipe, at the same bubble? Choose one letter:
#   a) its bubble is smaller, so activations wait less
#   b) each micro-batch's backward runs soon after its forward, so stage d holds at most
#      min(p - d, m) micro-batches' activations instead of m
#   c) it recomputes the activations during the backward pass
#   d) it sends fewer bytes between stages
# and the number your reason gives (the grader picks p, m and the stage d): how many more
# micro-batches' activations stage d holds at its peak under GPipe than under 1F1B.

# %%
def why_1f1b_saves_memory(p: int, m: int, d: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; GPipe's peak minus 1F1B's on stage d)."""
    # BEGIN SOLUTION: which choice matches the in-flight counts you computed in part 2?
    return "b", m - min(p - d, m)
    # END SOLUTION


# %% [markdown]
# Now your own schedule: parse your one_f_one_b_text(p, m) (the grader picks p and m), simulate
# it with t_f = 1, t_b = 2 (`simulate_schedule`), and return its chart, `viz.schedule_chart`, with
# the bubble share you measured on it (`result.bubble_fraction`). The grader simulates the text
# your function writes and compares the blocks, so the chart must be of your schedule (parasim's
# make_schedule is withheld while this runs). Compare the share with (p - 1)/(m + p - 1), and
# with the real pipelined run of part 3: there the optimizer and the loss also take time.

# %%
def plot_my_schedule(p: int, m: int):
    """(the matplotlib Figure of your 1F1B schedule's chart, its bubble fraction)."""
    # BEGIN SOLUTION: simulate_schedule(parse_schedule(one_f_one_b_text(p, m)), t_f=1, t_b=2, t_w=0)
    from simulator import viz

    result = simulate_schedule(parse_schedule(one_f_one_b_text(p, m), name="mine"), t_f=1, t_b=2, t_w=0)
    return viz.schedule_chart(result), result.bubble_fraction
    # END SOLUTION


# %%
# %%
if __name__ == "__main__":
    for name in ("gpipe", "1f1b"):
        print(simulate_schedule(make_schedule(name, 4, 8), t_f=1, t_b=2, t_w=0))
    print(bubble_time(4, 8, 1, 2), bubble_fraction(4, 8), peak_in_flight("1f1b", 4, 8))
    mine = parse_schedule(one_f_one_b_text(4, 8))
    print(format_schedule(mine) == format_schedule(make_schedule("1f1b", 4, 8)))
    free = SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e15, latency_s=0.0, bandwidth_Bps=1e30)
    mlp = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)
    r = train(TrainConfig(mlp, strategy="pp", devices=4, global_batch=32, microbatches=8), device_model=free)
    print("measured bubble", r.trace.bubble_fraction(), "predicted", bubble_fraction(4, 8))
