# %% [markdown]
# # Lesson 03 (EXERCISE): data parallelism and gradient averaging
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 03`. Experiments sit under `if __name__ == "__main__":`.

# %%
import numpy as np

from simulator import MLPConfig, TrainConfig, build_model, get_batch, train

MODEL = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)  # 4 dense layers, 1088 parameters


# %% [markdown]
# ## 1. Every replica gets a slice of the batch
# With dp replicas, replica i takes rows [i B/dp, (i+1) B/dp) of the global batch of B samples.

# %%
def shard_batch(x: np.ndarray, y: np.ndarray, dp: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cut (x, y) into dp contiguous, equal shards along the batch dimension."""
    raise NotImplementedError("TODO: dp equal contiguous row blocks of x and y")


# %% [markdown]
# ## 2. Averaging the replicas' gradients gives the full-batch gradient
# Each replica computes the gradient of the mean loss over its shard (`model.loss_and_grads`).
# The all-reduce sums them; dividing by dp gives the gradient of the mean loss over the whole batch.

# %%
def dp_gradients(model, params, x, y, dp: int) -> list[dict]:
    """Per-shard gradients, summed as an all-reduce would, divided by dp. Same structure as
    `model.loss_and_grads(params, x, y)[1]`: a list with one {name: array} per layer."""
    raise NotImplementedError("TODO: loss_and_grads per shard, then the element-wise mean over shards")


# %% [markdown]
# ## 3. What does the all-reduce cost?
# parasim's data-parallel step all-reduces every parameter's gradient with a ring (lesson 02).

# %%
def grad_bytes_per_device(model, dp: int, itemsize: int = 8) -> float:
    """Bytes one device sends per step to all-reduce every gradient (float64: itemsize 8)."""
    raise NotImplementedError("TODO: 2(dp-1)/dp x (all gradient bytes)")


# %% [markdown]
# ## 4. Sum or mean?
# MindSpore's `gradients_mean=False` sums the replicas' gradients instead of averaging them.
# With plain SGD, which learning rate makes the averaged run identical to a summed run at lr?

# %%
def equivalent_mean_lr(lr_sum: float, dp: int) -> float:
    """Learning rate of a gradients_mean=True SGD run equal to a gradients_mean=False run at lr_sum."""
    raise NotImplementedError("TODO: the sum is dp times the mean")


# %% [markdown]
# ## 5. Predict, explain, then look at your own run
# Predict before you run anything: the bytes ONE device sends in ONE step of data parallelism on
# dp devices for the MLP of hidden width `hidden` (16 inputs, 4 layers, 16 classes; float64
# gradients, ring all-reduce). The grader picks dp and hidden when grading, and runs it.

# %%
def predicted_bytes(dp: int, hidden: int) -> float:
    """Your prediction of the bytes one device sends in one step on dp devices."""
    raise NotImplementedError("TODO: 2 (n-1)/n x P x 8 bytes, P the parameters of that MLP")


# %% [markdown]
# Why do the replicas end with the same weights as one device? Choose one letter:
#   a) every replica trains on the whole batch
#   b) the all-reduce averages the gradients of the replicas' shards, which is the gradient of the
#      whole batch (the loss is a mean over the samples), so every replica takes the same step
#   c) the replicas share one copy of the weights in memory
#   d) only device 0 runs the optimizer and broadcasts the weights
# and the number your reason gives when the shards are NOT equal (the grader picks their sizes):
# the weight replica 0's gradient (a mean over its own samples) must get in the full-batch
# gradient.

# %%
def why_same_weights(shard_sizes: list[int]) -> tuple[str, float]:
    """(one letter: a, b, c or d; the weight of replica 0's gradient in the full-batch gradient)."""
    raise NotImplementedError("TODO: the full batch's mean is each shard's mean weighted by its share of the samples")


# %% [markdown]
# Your own run: train data parallelism on dp replicas for `steps` steps (batch 16, the teaching
# clock below; the grader picks dp and steps) and return its timeline, `viz.timeline(r.trace)`.
# The grader reads the figure's bars (not its pixels) and compares them with that run. Where does
# the all-reduce sit against the backward?

# %%
def plot_my_run(dp: int, steps: int):
    """The matplotlib Figure of your data-parallel run's timeline."""
    raise NotImplementedError("TODO: train(TrainConfig(MODEL, strategy=\"dp\", devices=dp, global_batch=16, steps=steps), device_model=clock)")


# %%
# %%
if __name__ == "__main__":
    model = build_model(MODEL)
    params = model.init_params(0)
    x, y = get_batch(MODEL, 16, step=0)
    full = model.loss_and_grads(params, x, y)[1]
    mine = dp_gradients(model, params, x, y, 4)
    print("max difference:", max(np.abs(full[i][k] - mine[i][k]).max() for i in range(4) for k in full[i]))
    result = train(TrainConfig(MODEL, strategy="dp", devices=4, global_batch=16))
    print("bytes per device:", result.bytes_sent_per_device, "predicted:", grad_bytes_per_device(model, 4))
