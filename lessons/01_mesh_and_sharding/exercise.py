# %% [markdown]
# # Lesson 01 (EXERCISE): the device mesh and sharding notation
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 01` (or `parasim lesson check 01 path/to/this_file.py`).
# Cells under `if __name__ == "__main__":` are experiments: they run in Jupyter and with
# `python exercise.py`, not when the autograder imports the file.

# %%
import numpy as np

from simulator import DeviceMesh, Layout


# %% [markdown]
# ## 1. Ranks and coordinates
# A mesh of shape (2, 4) numbers its devices row-major, last axis fastest:
# rank = i * 4 + j for coordinates (i, j).

# %%
def rank_of(coords: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """Row-major rank of `coords` on a mesh of `shape` (last axis fastest)."""
    raise NotImplementedError("TODO: fold the coordinates into one number, last axis fastest")


def coords_of(rank: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse of rank_of."""
    raise NotImplementedError("TODO: peel the coordinates off with divmod, last axis first")


# %% [markdown]
# ## 2. Communicator groups
# A collective "along axis k" runs in groups of ranks that differ only in coordinate k.
# On Mesh(dp=2, tp=4) the tp groups are (0,1,2,3) and (4,5,6,7); the dp groups (0,4), (1,5), ...

# %%
def groups_along(shape: tuple[int, ...], axis: int) -> list[tuple[int, ...]]:
    """Sorted list of groups (ascending tuples of ranks) that differ only along `axis`."""
    raise NotImplementedError("TODO: group the ranks by their coordinates with `axis` removed")


# %% [markdown]
# ## 3. MindSpore shard strategies
# `(2, 4)` on 8 devices cuts dim 0 in 2 and dim 1 in 4. The device matrix is the strategy; if
# the devices outnumber the blocks, the factor r = devices / prod(strategy) is appended as the
# rightmost (fastest) device-matrix axis: r neighbouring ranks hold the same block
# ("repeated calculation").

# %%
def device_matrix(strategy: tuple[int, ...], device_num: int) -> tuple[int, ...]:
    """The strategy, plus the repeat factor as a last axis when it is > 1."""
    raise NotImplementedError("TODO: append device_num // prod(strategy) when it is larger than 1")


def local_block(x: np.ndarray, strategy: tuple[int, ...], device_num: int, rank: int) -> np.ndarray:
    """The block of `x` that `rank` holds under a MindSpore strategy."""
    raise NotImplementedError("TODO: coordinates on the device matrix -> one block index per tensor dim")


def replica_groups(strategy: tuple[int, ...], device_num: int) -> list[tuple[int, ...]]:
    """Groups of ranks that hold identical blocks (sorted, each ascending)."""
    raise NotImplementedError("TODO: with repetition, the groups along the last device-matrix axis")


# %% [markdown]
# ## 4. Predict, explain, then draw your own layout
# **Predict** without parasim's Layout (it is withheld while this function runs): how many devices
# hold each block of X under `strategy` on `device_num` devices? The grader draws the strategy.

# %%
def predicted_copies(strategy: tuple[int, ...], device_num: int) -> int:
    """How many ranks hold the same block."""
    raise NotImplementedError("TODO: the repeat factor r = device_num / prod(strategy)")


# %% [markdown]
# Strategy (2, 2) on 8 devices: why do ranks 0 and 1 hold the same block (and not ranks 0 and 4)?
# Answer with one letter:
#   a) ranks 0 and 1 sit in the same node, which shares its memory
#   b) the repeat factor is the last, fastest axis of the device matrix [2, 2, 2]: ranks that differ
#      only in their last coordinate (r and r + 1 here) hold the same block
#   c) MindSpore copies blocks to balance the memory of the devices
#   d) the first value of the strategy is the repeat factor
# and the number your reason gives for a strategy, a device count (with copies) and a rank the grader
# draws: the highest rank that holds the same block as `rank`.

# %%
def why_neighbours_repeat(strategy: tuple[int, ...], device_num: int, rank: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; the highest rank holding rank's block)."""
    raise NotImplementedError("TODO: where does device_matrix put the repeat factor? then which ranks share rank's block")


# %% [markdown]
# **Draw your own layout.** Build X's Layout for `strategy` on `device_num` devices yourself, from
# your `device_matrix` and a tensor map (`Layout.from_device_matrix(matrix, tensor_map,
# device_num=...)`: map entry m names matrix axis len-1-m; `Layout.from_strategy` is withheld),
# draw it with `viz.layout_grid(layout, (8, 8), name="X")` and read off the ranks that hold rank
# 0's block. The grader compares your figure's cells with parasim's drawing of the same strategy.

# %%
def plot_my_layout(strategy: tuple[int, int], device_num: int):
    """(the Figure of X's layout, the ranks holding rank 0's block as a list)."""
    raise NotImplementedError("TODO: on your device matrix, tensor dim d is cut by matrix axis d (map entry len(matrix)-1-d)")


# %%
if __name__ == "__main__":
    mesh = DeviceMesh({"dp": 2, "tp": 4})
    print(mesh, "rank of (1, 2):", rank_of((1, 2), (2, 4)), "parasim:", mesh.rank_at((1, 2)))
    print("tp groups:", groups_along((2, 4), 1), "parasim:", mesh.groups("tp"))
    layout = Layout.from_strategy((2, 2), 8)
    print(layout, "device matrix", device_matrix((2, 2), 8), "replicas", replica_groups((2, 2), 8))
