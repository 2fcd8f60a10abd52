"""Small ready-made programs with their inputs and the expected result (CLI, bench, tests)."""

from __future__ import annotations

import numpy as np

from ..collectives.algorithms import DEFAULT_ALGO
from ..collectives.reference import reference
from ..program import Collective, ProgramBuilder


def collective_program(kind: str, n: int, size: int, algo: str | None = None, op: str = "sum", root: int = 0,
                       dtype: str = "float64", seed: int = 0, group: tuple[int, ...] | None = None):
    """One collective over `group` (default all n devices) of 1-D tensors `act/x` -> `act/y`.

    size: elements of each member's input, except all_gather where `size` is the gathered total
    (members hold np.array_split parts of it, uneven allowed). root: a global rank.
    Returns (program, inputs {rank: {name: array}}, expected {rank: array or None})."""
    group = tuple(range(n)) if group is None else tuple(group)
    rng = np.random.default_rng(seed)
    if kind == "all_gather":
        sizes = [len(p) for p in np.array_split(np.empty(size), len(group))]
    else:
        sizes = [size] * len(group)
    xs = [rng.standard_normal(s).astype(dtype) for s in sizes]
    algo = algo or DEFAULT_ALGO[kind]
    b = ProgramBuilder(n, name=f"{kind}/{algo} over {len(group)}")
    for g, r in enumerate(group):
        b.add(r, Collective(kind, "act/x", "act/y", group, algo=algo, op=op, root=root,
                            nbytes=int(xs[g].nbytes)))
    refs = reference(kind, xs, op, root=group.index(root), axis=0)
    inputs = {r: {"act/x": xs[g]} for g, r in enumerate(group)}
    return b.build(), inputs, {r: refs[g] for g, r in enumerate(group)}


def sharded_matmul_program(n: int, m: int, k: int, p: int, dtype: str = "float32", seed: int = 0):
    """C = A @ B with A's rows cut n ways (np.array_split) and B replicated:
    rank r: (m_r, k) @ (k, p) -> (m_r, p), then all_gather along rows -> (m, p) everywhere.
    Returns (program, inputs, expected C)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    bm = rng.standard_normal((k, p)).astype(dtype)
    blocks = np.array_split(a, n, axis=0)
    b = ProgramBuilder(n, name=f"sharded matmul {m}x{k}x{p} over {n}")
    for r, blk in enumerate(blocks):
        b.compute(r, "matmul", ("act/a", "param/b"), ("act/c",), flops=2.0 * blk.shape[0] * k * p,
                  label="matmul block")
    itemsize = np.dtype(dtype).itemsize
    b.collective("all_gather", range(n), "act/c", "act/out", algo="ring",
                 nbytes=int(-(-m // n)) * p * itemsize)
    inputs = {r: {"act/a": blocks[r], "param/b": bm} for r in range(n)}
    return b.build(), inputs, a @ bm

