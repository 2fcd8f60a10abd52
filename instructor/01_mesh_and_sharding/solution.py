# %% [markdown]
# # Lesson 01 (SOLUTION): the device mesh and sharding notation
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
    # BEGIN SOLUTION: fold the coordinates into one number, last axis fastest
    rank = 0
    for c, size in zip(coords, shape):
        rank = rank * size + c
    return rank
    # END SOLUTION


def coords_of(rank: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse of rank_of."""
    # BEGIN SOLUTION: peel the coordinates off with divmod, last axis first
    out = []
    for size in reversed(shape):
        rank, c = divmod(rank, size)
        out.append(c)
    return tuple(reversed(out))
    # END SOLUTION


# %% [markdown]
# ## 2. Communicator groups
# A collective "along axis k" runs in groups of ranks that differ only in coordinate k.
# On Mesh(dp=2, tp=4) the tp groups are (0,1,2,3) and (4,5,6,7); the dp groups (0,4), (1,5), ...

# %%
def groups_along(shape: tuple[int, ...], axis: int) -> list[tuple[int, ...]]:
    """Sorted list of groups (ascending tuples of ranks) that differ only along `axis`."""
    # BEGIN SOLUTION: group the ranks by their coordinates with `axis` removed
    by_rest: dict[tuple, list[int]] = {}
    n = int(np.prod(shape))
    for r in range(n):
        c = coords_of(r, shape)
        by_rest.setdefault(c[:axis] + c[axis + 1:], []).append(r)
    return sorted(tuple(g) for g in by_rest.values())
    # END SOLUTION


# %% [markdown]
# ## 3. MindSpore shard strategies
# `(2, 4)` on 8 devices cuts dim 0 in 2 and dim 1 in 4. The device matrix is the strategy; if
# the devices outnumber the blocks, the factor r = devices / prod(strategy) is appended as the
# rightmost (fastest) device-matrix axis: r neighbouring ranks hold the same block
# ("repeated calculation").

# %%
def device_matrix(strategy: tuple[int, ...], device_num: int) -> tuple[int, ...]:
    """The strategy, plus the repeat factor as a last axis when it is > 1."""
    # BEGIN SOLUTION: append device_num // prod(strategy) when it is larger than 1
    r = device_num // int(np.prod(strategy))
    return tuple(strategy) + ((r,) if r > 1 else ())
    # END SOLUTION


def local_block(x: np.ndarray, strategy: tuple[int, ...], device_num: int, rank: int) -> np.ndarray:
    """The block of `x` that `rank` holds under a MindSpore strategy."""
    # BEGIN SOLUTION: coordinates on the device matrix -> one block index per tensor dim
    coords = coords_of(rank, device_matrix(strategy, device_num))
    index = []
    for d, (cut, c) in enumerate(zip(strategy, coords)):
        size = x.shape[d] // cut
        index.append(slice(c * size, (c + 1) * size))
    return x[tuple(index)]
    # END SOLUTION


def replica_groups(strategy: tuple[int, ...], device_num: int) -> list[tuple[int, ...]]:
    """Groups of ranks that hold identical blocks (sorted, each ascending)."""
    # BEGIN SOLUTION: with repetition, the groups along the last device-matrix axis
    dm = device_matrix(strategy, device_num)
    if len(dm) == len(strategy):
        return [(r,) for r in range(device_num)]
    return groups_along(dm, len(dm) - 1)
    # END SOLUTION


# %% [markdown]
# ## 4. Predict, explain, then draw your own layout
# **Predict** without parasim's Layout (it is withheld while this function runs): how many devices
# hold each block of X under `strategy` on `device_num` devices? The grader draws the strategy.

# %%
def predicted_copies(strategy: tuple[int, ...], device_num: int) -> int:
    """How many ranks hold the same block."""
    # BEGIN SOLUTION: the repeat factor r = device_num / prod(strategy)
    return device_num // int(np.prod(strategy))
    # END SOLUTION


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
    # BEGIN SOLUTION: where does device_matrix put the repeat factor? then which ranks share rank's block
    repeat = device_num // int(np.prod(strategy))
    return "b", rank - rank % repeat + repeat - 1
    # END SOLUTION


# %% [markdown]
# **Draw your own layout.** Build X's Layout for `strategy` on `device_num` devices yourself, from
# your `device_matrix` and a tensor map (`Layout.from_device_matrix(matrix, tensor_map,
# device_num=...)`: map entry m names matrix axis len-1-m; `Layout.from_strategy` is withheld),
# draw it with `viz.layout_grid(layout, (8, 8), name="X")` and read off the ranks that hold rank
# 0's block. The grader compares your figure's cells with parasim's drawing of the same strategy.

# %%
def plot_my_layout(strategy: tuple[int, int], device_num: int):
    """(the Figure of X's layout, the ranks holding rank 0's block as a list)."""
    # BEGIN SOLUTION: on your device matrix, tensor dim d is cut by matrix axis d (map entry len(matrix)-1-d)
    from simulator import viz

    dm = device_matrix(strategy, device_num)
    layout = Layout.from_device_matrix(dm, [len(dm) - 1 - d for d in range(len(strategy))])
    return viz.layout_grid(layout, (8, 8), name="X"), list(replica_groups(strategy, device_num)[0])
    # END SOLUTION


# %%
if __name__ == "__main__":
    mesh = DeviceMesh({"dp": 2, "tp": 4})
    print(mesh, "rank of (1, 2):", rank_of((1, 2), (2, 4)), "parasim:", mesh.rank_at((1, 2)))
    print("tp groups:", groups_along((2, 4), 1), "parasim:", mesh.groups("tp"))
    layout = Layout.from_strategy((2, 2), 8)
    print(layout, "device matrix", device_matrix((2, 2), 8), "replicas", replica_groups((2, 2), 8))
