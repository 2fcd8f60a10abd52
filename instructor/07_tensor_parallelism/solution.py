# %% [markdown]
# # Lesson 07 (SOLUTION): tensor parallelism — the Megatron MLP
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 07`. Experiments sit under `if __name__ == "__main__":`.

# %%
import numpy as np

from simulator import DeviceMesh, GPTConfig, Layout, TrainConfig, train


def gelu(x):
    """GeLU, tanh approximation (Hendrycks & Gimpel 2016), elementwise."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# %% [markdown]
# ## 1. Column-parallel and row-parallel linear layers
# Y = GeLU(X A) Z = Y B. Cut A by columns: A = [A_1 .. A_t]; rank i computes Y_i = GeLU(X A_i)
# without talking to anyone (GeLU is elementwise). Cut B by rows: B = [B_1; ..; B_t]; rank i
# computes Y_i B_i, a *partial sum* of Z: Z = sum_i Y_i B_i, one all-reduce.
# In parasim's notation A is `A[K, N_tp]`, B is `B[N_tp, K]` and the partial output `Z[M, K]{U_tp}`.

# %%
def column_shards(W: np.ndarray, t: int) -> list[np.ndarray]:
    """W cut into t blocks of columns (rank i gets block i)."""
    # BEGIN SOLUTION: t equal column blocks
    n = W.shape[1] // t
    return [W[:, i * n:(i + 1) * n] for i in range(t)]
    # END SOLUTION


def row_shards(W: np.ndarray, t: int) -> list[np.ndarray]:
    """W cut into t blocks of rows (rank i gets block i)."""
    # BEGIN SOLUTION: t equal row blocks
    n = W.shape[0] // t
    return [W[i * n:(i + 1) * n, :] for i in range(t)]
    # END SOLUTION


def megatron_mlp_partials(x: np.ndarray, A: np.ndarray, B: np.ndarray, t: int) -> list[np.ndarray]:
    """What each of the t ranks holds before the all-reduce: GeLU(x A_i) B_i."""
    # BEGIN SOLUTION: column-parallel A, local GeLU, row-parallel B
    return [gelu(x @ a) @ b for a, b in zip(column_shards(A, t), row_shards(B, t))]
    # END SOLUTION


# %% [markdown]
# ## 2. What does it cost in a whole GPT?
# parasim's `strategy="tp"` applies the same trick to attention (heads split across ranks), the
# embedding (vocabulary-parallel) and the LM head. Read the trace of one step and count.

# %%
def allreduces_per_block() -> int:
    """All-reduces one transformer block issues in one training step (forward + backward)."""
    # BEGIN SOLUTION: attention and MLP: one in forward (g), one in backward (f) each
    return 4
    # END SOLUTION


def tp_bytes_per_device(L: int, b: int, s: int, h: int, t: int, itemsize: int = 8) -> float:
    """Bytes each rank sends in one step: 4 all-reduces per block, one for the embedding (forward),
    one for the LM head's input gradient (backward), all of (b, s, h); plus 3 tiny all-reduces of
    b*s values for the vocabulary-parallel cross-entropy (max, sum of exp, target logit).
    A ring all-reduce of S bytes costs 2(t-1)/t S per rank (lesson 02)."""
    # BEGIN SOLUTION: (4L + 2) activations + 3 loss statistics, times the ring factor
    activation = b * s * h * itemsize
    return 2 * (t - 1) / t * ((4 * L + 2) * activation + 3 * b * s * itemsize)
    # END SOLUTION


# %% [markdown]
# ## 5. Predict, explain, then look at your own run
# Predict before you run anything: the bytes ONE device sends in one step of the README's GPT with
# `layers` layers (hidden 32, batch 4, sequence 16) with tensor parallelism over t devices (the
# grader picks layers and t when grading, and runs it).

# %%
def predicted_bytes_tp(t: int, layers: int) -> float:
    """Your prediction of the bytes one device sends in one step on t devices."""
    # BEGIN SOLUTION: your tp_bytes_per_device
    return tp_bytes_per_device(layers, 4, 16, 32, t)
    # END SOLUTION


# %% [markdown]
# Why does the Megatron MLP need no communication between its two matmuls? Choose one letter:
#   a) GeLU is linear, so it commutes with the sum
#   b) A is split by columns, so each rank holds whole columns of x A and applies GeLU to them;
#      B split by rows then gives partial sums, reduced once at the end
#   c) the all-reduce is hidden behind the compute
#   d) B is replicated on every rank
# and the number your reason gives (the grader picks h, f and t): how many columns of x A (for
# A of shape (h, f)) one rank applies GeLU to.

# %%
def why_one_allreduce(h: int, f: int, t: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; the columns of x A one rank holds)."""
    # BEGIN SOLUTION: which layout does part 3 give the GeLU input?
    return "b", f // t
    # END SOLUTION


# %% [markdown]
# Your own run: the README's GPT with `layers` layers on t tensor-parallel devices (the grader
# picks them); return its timeline, `viz.timeline(r.trace)`. The grader reads the figure's bars.

# %%
def plot_my_run(t: int, layers: int):
    """The matplotlib Figure of your tensor-parallel run's timeline."""
    # BEGIN SOLUTION: train(TrainConfig(g, strategy="tp", devices=t, tp=t, global_batch=4))
    from simulator import viz

    g = GPTConfig(layers=layers, hidden=32, heads=4, seq_len=16, vocab=32)
    return viz.timeline(train(TrainConfig(g, strategy="tp", devices=t, tp=t, global_batch=4)).trace)
    # END SOLUTION


# %%
# %%
if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x, A, B = rng.standard_normal((4, 8)), rng.standard_normal((8, 32)), rng.standard_normal((32, 8))
    parts = megatron_mlp_partials(x, A, B, 4)
    print("equal to one device:", np.allclose(sum(parts), gelu(x @ A) @ B))
    mesh = DeviceMesh({"tp": 4})
    print(Layout(mesh, [None, "tp"]).notation("A", "KN"), Layout(mesh, ["tp", None]).notation("B", "NK"))
    g = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32)
    r = train(TrainConfig(g, strategy="tp", devices=2, tp=2, global_batch=4))
    print(r.bytes_sent_per_device, tp_bytes_per_device(2, 4, 16, 32, 2))
