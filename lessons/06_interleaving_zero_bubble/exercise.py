# %% [markdown]
# # Lesson 06 (EXERCISE): interleaving and zero-bubble schedules, memory in flight
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 06`. Experiments sit under `if __name__ == "__main__":`.

# %%
from simulator import in_flight_microbatches, make_schedule, simulate_schedule


# %% [markdown]
# ## 1. Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2)
# Each device holds v model chunks (device d, chunk c = model stage c*p + d). A chunk's forward
# takes t_f / v, so the fill and drain are made of v-times shorter pieces.

# %%
def interleaved_bubble_time(p: int, m: int, v: int, t_f: float, t_b: float) -> float:
    """Idle time per device of interleaved 1F1B (t_f, t_b: times of a whole stage, not a chunk)."""
    raise NotImplementedError("TODO: the 1F1B bubble divided by v")


def interleaved_peak_chunks(p: int, m: int, v: int) -> int:
    """Most (micro-batch, chunk) activations device 0 holds at once under Megatron's interleaving.
    Device d runs (p - d - 1) * 2 + (v - 1) * p warm-up forwards, capped at m * v."""
    raise NotImplementedError("TODO: warm-up forwards of device 0, plus the forward of the first steady pair")


# %% [markdown]
# ## 2. Zero bubble (Qi et al. 2023)
# Split the backward into B (gradient of the input: on the critical path) and W (gradient of the
# weights: can wait). ZB-H1 keeps 1F1B's memory and fills part of the drain with W's.

# %%
def zb_bubble_time(schedule: str, p: int, t_f: float, t_b: float, t_w: float) -> float:
    """Idle time per device for schedule '1f1b' (backward = B + W together) or 'zb-h1'."""
    raise NotImplementedError("TODO: 1F1B (p-1)(t_f+t_b+t_w); ZB-H1 (p-1)(t_f+t_b-t_w)")


def zb_peak_in_flight(schedule: str, p: int, m: int) -> int:
    """Most micro-batches whose activations one device holds: 'zb-h1' or 'zb-h2' (m >= 2p)."""
    raise NotImplementedError("TODO: ZB-H1 p like 1F1B stage 0; ZB-H2 2p - 1 to remove the bubble entirely")


# %% [markdown]
# ## 3. Predict, explain, then look at your own schedule
# Predict before you simulate anything: the bubble time per device of interleaved 1F1B with p
# stages, m micro-batches, v chunks per device (the grader picks them when grading), a whole
# stage's forward and backward taking 1 each (so each chunk's action takes 1/v), free communication.

# %%
def predicted_interleaved_bubble(p: int, m: int, v: int) -> float:
    """Your prediction of the bubble time per device (the time units above)."""
    raise NotImplementedError("TODO: your interleaved_bubble_time (whole-stage times)")


# %% [markdown]
# ZB-H2 has no bubble inside each device's span. Why not always use it? Choose one letter:
#   a) it needs more communication than 1F1B
#   b) it holds up to 2p - 1 micro-batches of activations instead of 1F1B's p
#   c) its weight gradients are wrong
#   d) it only works with v > 1 chunks
# and the number your reason gives on p stages (the grader picks p; m is large): how many more
# micro-batches ZB-H2 holds at its peak than 1F1B.

# %%
def why_not_always_zb_h2(p: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; ZB-H2's peak minus 1F1B's, in micro-batches)."""
    raise NotImplementedError("TODO: compare zb_peak_in_flight(\"zb-h2\", ...) with 1F1B's")


# %% [markdown]
# Your own schedule: simulate ZB-H1 with p stages, m micro-batches and times t_f, t_b, t_w (the
# grader picks them) and return its chart, `viz.schedule_chart(result)`, with the bubble time of
# device 0 you read off it (`result.bubble_time[0]`). The grader reads the figure's blocks.

# %%
def plot_my_schedule(p: int, m: int, t_f: float, t_b: float, t_w: float):
    """(the matplotlib Figure of your simulated ZB-H1 schedule, device 0's bubble time)."""
    raise NotImplementedError("TODO: viz.schedule_chart(simulate_schedule(make_schedule(\"zb-h1\", p, m), t_f=t_f, t_b=t_b, t_w=t_w))")


# %%
# %%
if __name__ == "__main__":
    for name, v in [("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-h2", 1)]:
        r = simulate_schedule(make_schedule(name, 4, 8, v), t_f=1 / v, t_b=1 / v, t_w=0 if v > 1 else 1)
        print(r, r.bubble_time[0], r.span_bubble_time)
    print(interleaved_bubble_time(4, 8, 2, 1, 1), interleaved_peak_chunks(4, 8, 2))
    print(in_flight_microbatches("interleaved", 4, 8, 2))
