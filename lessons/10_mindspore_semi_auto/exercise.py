# %% [markdown]
# # Lesson 10 (EXERCISE): MindSpore semi-auto parallel — shard strategies, repeated calculation,
# inserted operators
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 10`. Experiments sit under `if __name__ == "__main__":`.

# %%
from math import prod

from simulator import DeviceMesh, auto, explain, set_auto_parallel_context

# MatMul X (M, K) @ W (K, N) with strategy ((a, k), (k, c)) on D devices (MindSpore rules):
# device matrix [a, k, c], plus r = D / (a k c) as the rightmost axis when r > 1; ranks are laid
# on it row-major (last axis fastest). Rank coordinates: (i_a, i_k, i_c[, i_r]).


# %%
def device_matrix(strategy, device_num: int) -> tuple[int, ...]:
    """The MatMul device matrix [a, k, c] (+ repeat factor)."""
    raise NotImplementedError("TODO: [a, k, c] and the repeat factor on the right")


def forward_operator(strategy) -> str | None:
    """The collective MindSpore inserts after the MatMul in the forward pass, or None."""
    raise NotImplementedError("TODO: a cut of the contracted dim K leaves partial sums")


def forward_groups(strategy, device_num: int) -> list[tuple[int, ...]]:
    """Groups of the forward AllReduce: ranks that differ only in their k coordinate."""
    raise NotImplementedError("TODO: a DeviceMesh on the device matrix, groups along the k axis")


def weight_mirror_groups(strategy, device_num: int) -> list[tuple[int, ...]]:
    """Groups that hold the same slice of W (its gradient is AllReduced over them): W uses the
    k and c axes, so its replicas differ in the a (and repeat) coordinates."""
    raise NotImplementedError("TODO: groups along every device-matrix axis W does not use")


def forward_bytes_per_rank(strategy, M: int, N: int, itemsize: int = 8) -> int:
    """Bytes each rank contributes to the forward AllReduce: its partial (M/a, N/c) block."""
    raise NotImplementedError("TODO: the local output block")


# %% [markdown]
# A tiny language model on D devices (`auto.tiny_lm_network`): tokens (n,) -> Gather from the
# table wte (V, H) -> MatMul wout (H, V) -> SparseSoftmaxCrossEntropyWithLogits. Vocabulary
# parallel: the table's rows, wout's columns and the loss's classes are each cut D ways.


# %%
def lm_strategies(device_num: int):
    """shard() strategies (gather, matmul, loss) of the tiny LM, vocabulary parallel on device_num."""
    raise NotImplementedError("TODO: table rows (V) cut D ways; wout columns and the loss classes cut D ways")


def lm_forward_collectives(n_tokens: int, hidden: int, device_num: int, itemsize: int = 8):
    """The forward collectives explain() inserts for lm_strategies, in order, as
    (name, bytes_per_rank): the embedding's partial sums reduce-scattered (each rank sends its whole
    (n, H) partial), gathered back whole for the MatMul (each rank sends its n/D rows), then the
    fused cross-entropy's AllReduce(max) and AllReduce(sum) of one number per row, and the loss."""
    raise NotImplementedError("TODO: ReduceScatter, AllGather, then three AllReduces")


# %%
# %% [markdown]
# ## 5. Predict, explain, then draw your own layout
# **Predict** without explain() (withheld while this runs): for a MatMul strategy ((a, k), (k, c))
# on `device_num` devices, how many ranks hold the same W slice and so all-reduce its gradient?

# %%
def predicted_mirror_size(strategy, device_num: int) -> int:
    """The size of W's mirror groups (1 when no rank shares its slice)."""
    raise NotImplementedError("TODO: W (k, c) is cut k c ways; the other devices repeat it")


# %% [markdown]
# Strategy ((2, 4), (4, 1)) on 8 devices: why does MindSpore insert an AllReduce after the MatMul?
# Answer with one letter:
#   a) to gather the output's columns
#   b) K is cut 4 ways: each rank multiplies its K slice of X by its K slice of W, which gives a
#      partial sum of the output; the 4 ranks of a k group add them up
#   c) to synchronise W's gradient
#   d) because of repeated calculation
# and the number your reason gives for the strategy ((a, k), (k, c)) on n devices the grader draws
# (k > 1; X of shape (64, 32) and W (32, 16), the shapes the grader explains; float64): the bytes of the partial sum each
# rank holds before the AllReduce adds them up.

# %%
def why_forward_allreduce(strategy, n: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; the bytes of one rank's partial sum for strategy on n devices)."""
    raise NotImplementedError("TODO: what does each rank's product miss? and how big is what it holds?")


# %% [markdown]
# **Draw your own layout.** For a strategy the grader draws, build X's Layout yourself from your
# [a, k, c] and X's tensor map [2, 1] (`Layout.from_device_matrix(..., device_num=...)` appends
# the repeat factor; explain() and
# `Layout.from_strategy` are withheld), draw it with `viz.layout_grid(layout, (8, 8), name="X")`
# and read off the ranks that hold rank 0's block of X.

# %%
def plot_my_x_layout(strategy, device_num: int):
    """(the Figure of X's layout, the ranks holding rank 0's block as a list)."""
    raise NotImplementedError("TODO: X (M, K) is cut by a and k: map [2, 1] on [a, k, c(, r)]; replicated along c")


if __name__ == "__main__":
    ctx = set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    op = auto.ops.MatMul().shard(((2, 4), (4, 1)))
    print(explain(op, ctx, shapes=[(64, 32), (32, 16)]).to_text())
    print(device_matrix(((2, 4), (4, 1)), 8), forward_groups(((2, 4), (4, 1)), 8))
    net, feeds = auto.tiny_lm_network(lm_strategies(4))
    print(explain(net, set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=4)).to_text())
