# %% [markdown]
# # Lesson 03 (SOLUTION): data parallelism and gradient averaging
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
    # BEGIN SOLUTION: dp equal contiguous row blocks of x and y
    if len(x) % dp:
        raise ValueError(f"batch {len(x)} does not split into {dp} equal shards")
    k = len(x) // dp
    return [(x[i * k:(i + 1) * k], y[i * k:(i + 1) * k]) for i in range(dp)]
    # END SOLUTION


# %% [markdown]
# ## 2. Averaging the replicas' gradients gives the full-batch gradient
# Each replica computes the gradient of the mean loss over its shard (`model.loss_and_grads`).
# The all-reduce sums them; dividing by dp gives the gradient of the mean loss over the whole batch.

# %%
def dp_gradients(model, params, x, y, dp: int) -> list[dict]:
    """Per-shard gradients, summed as an all-reduce would, divided by dp. Same structure as
    `model.loss_and_grads(params, x, y)[1]`: a list with one {name: array} per layer."""
    # BEGIN SOLUTION: loss_and_grads per shard, then the element-wise mean over shards
    grads = [model.loss_and_grads(params, xs, ys)[1] for xs, ys in shard_batch(x, y, dp)]
    return [{name: sum(g[li][name] for g in grads) / dp for name in grads[0][li]}
            for li in range(len(grads[0]))]
    # END SOLUTION


# %% [markdown]
# ## 3. What does the all-reduce cost?
# parasim's data-parallel step all-reduces every parameter's gradient with a ring (lesson 02).

# %%
def grad_bytes_per_device(model, dp: int, itemsize: int = 8) -> float:
    """Bytes one device sends per step to all-reduce every gradient (float64: itemsize 8)."""
    # BEGIN SOLUTION: 2(dp-1)/dp x (all gradient bytes)
    nbytes = model.param_count * itemsize
    return 2 * (dp - 1) / dp * nbytes
    # END SOLUTION


# %% [markdown]
# ## 4. Sum or mean?
# MindSpore's `gradients_mean=False` sums the replicas' gradients instead of averaging them.
# With plain SGD, which learning rate makes the averaged run identical to a summed run at lr?

# %%
def equivalent_mean_lr(lr_sum: float, dp: int) -> float:
    """Learning rate of a gradients_mean=True SGD run equal to a gradients_mean=False run at lr_sum."""
    # BEGIN SOLUTION: the sum is dp times the mean
    return lr_sum * dp
    # END SOLUTION


# %%
if __name__ == "__main__":
    model = build_model(MODEL)
    params = model.init_params(0)
    x, y = get_batch(MODEL, 16, step=0)
    full = model.loss_and_grads(params, x, y)[1]
    mine = dp_gradients(model, params, x, y, 4)
    print("max difference:", max(np.abs(full[i][k] - mine[i][k]).max() for i in range(4) for k in full[i]))
    result = train(TrainConfig(MODEL, strategy="dp", devices=4, batch_size=16))
    print("bytes per device:", result.bytes_sent_per_device, "predicted:", grad_bytes_per_device(model, 4))
