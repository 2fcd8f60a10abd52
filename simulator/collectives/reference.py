"""Reference semantics of the collectives: plain numpy on a list of per-rank arrays.

These are the oracles every algorithm and runtime is checked against (MPI-3.1 standard, ch. 5;
NCCL's collective operations page). `arrays[r]` is rank r's input; the result lists each rank's
output (None where the operation leaves a rank without one: the non-roots of a reduce, a barrier).

Splitting convention (uneven sizes allowed), with n = len(arrays):
- `axis=None` (the default): work on the flattened array `x.ravel()` and cut it with
  `np.array_split(x.ravel(), n)`: the first `S % n` parts have `S // n + 1` elements, the rest
  `S // n` (S = 13, n = 4 -> 4, 3, 3, 3). Outputs that are whole arrays keep the input's shape;
  parts and gathers are 1-D.
- `axis=k`: cut and concatenate along dimension k with the same np.array_split rule (this is the
  convention of `simulator.program.Collective`).

Ops: sum, mean (sum / n), max, min.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ParasimError

OPS = ("sum", "mean", "max", "min")
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier")


def check_op(op: str) -> str:
    if op not in OPS:
        raise ParasimError(f"unknown reduction op {op!r}; valid ops: {', '.join(OPS)}")
    return op


def reduce_arrays(arrays: Sequence[np.ndarray], op: str) -> np.ndarray:
    """Elementwise reduction of equally shaped arrays, left to right: ((a0 op a1) op a2) ..."""
    check_op(op)
    shapes = {np.shape(a) for a in arrays}
    if len(shapes) != 1:
        raise ParasimError(f"reduction needs equal shapes on every rank, got {sorted(shapes)}")
    out = np.asarray(arrays[0])
    for a in arrays[1:]:
        out = combine(op, out, np.asarray(a))
    if op == "mean":
        out = out / len(arrays)
    return out


def combine(op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a op b, out of place (mean combines as sum; the division by n happens once at the end);
    `out`: a fresh buffer of a op b's shape and dtype to write into (the same ufunc: same bits)."""
    if op in ("sum", "mean"):
        return a + b if out is None else np.add(a, b, out=out)
    if op == "max":
        return np.maximum(a, b, out=out)
    if op == "min":
        return np.minimum(a, b, out=out)
    raise ParasimError(f"unknown reduction op {op!r}; valid ops: {', '.join(OPS)}")


def split(x: np.ndarray, n: int, axis: int | None = None) -> list[np.ndarray]:
    """np.array_split of x (flattened when axis is None) into n parts."""
    x = np.asarray(x)
    if axis is None:
        return np.array_split(x.ravel(), n)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ParasimError(f"cannot split along axis {axis} an array of shape {x.shape}")
    return np.array_split(x, n, axis=axis)


def join(parts: Sequence[np.ndarray], axis: int | None = None) -> np.ndarray:
    if axis is None:
        return np.concatenate([np.ravel(p) for p in parts])
    return np.concatenate(list(parts), axis=axis)


def reference(kind: str, arrays: Sequence[np.ndarray], op: str = "sum", root: int = 0,
              axis: int | None = None) -> list[np.ndarray | None]:
    """What every rank holds after collective `kind` (see the module docstring)."""
    n = len(arrays)
    if n == 0:
        raise ParasimError("a collective needs at least one rank, got 0 arrays")
    if not 0 <= root < n:
        raise ParasimError(f"root {root} is not a rank of a group of {n}")
    arrays = [np.asarray(a) for a in arrays]
    if kind == "all_reduce":
        total = reduce_arrays(arrays, op)
        return [total.copy() for _ in range(n)]
    if kind == "reduce_scatter":
        return [p.copy() for p in split(reduce_arrays(arrays, op), n, axis)]
    if kind == "all_gather":
        full = join(arrays, axis)
        return [full.copy() for _ in range(n)]
    if kind == "broadcast":
        return [arrays[root].copy() for _ in range(n)]
    if kind == "reduce":
        return [reduce_arrays(arrays, op) if r == root else None for r in range(n)]
    if kind == "all_to_all":
        parts = [split(a, n, axis) for a in arrays]  # parts[i][j]: from rank i to rank j
        return [join([parts[i][j] for i in range(n)], axis) for j in range(n)]
    if kind == "barrier":
        return [None] * n
    raise ParasimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
