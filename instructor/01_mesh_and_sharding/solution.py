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


# %%
if __name__ == "__main__":
    mesh = DeviceMesh({"dp": 2, "tp": 4})
    print(mesh, "rank of (1, 2):", rank_of((1, 2), (2, 4)), "parasim:", mesh.rank_at((1, 2)))
    print("tp groups:", groups_along((2, 4), 1), "parasim:", mesh.groups("tp"))
    layout = Layout.from_strategy((2, 2), 8)
    print(layout, "device matrix", device_matrix((2, 2), 8), "replicas", replica_groups((2, 2), 8))
