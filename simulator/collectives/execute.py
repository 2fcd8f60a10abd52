"""Execute a plan in memory: the same per-rank step functions the runtimes' devices call.

A rank's working buffer is a list of slots (see algorithms.py). One step of a plan, seen from one
rank: `outgoing` reads the slots it sends; `apply_incoming` writes what it receives, in plan
order, combining with the op when the transfer reduces. Every source slot of a step is read
before any slot is written (`run_plan` reads all payloads first; the runtimes apply a step's
receives only at the next call). Nothing is mutated in place: a slot is replaced by a new array,
so chunks shared between ranks (or read-only ones from Ray's object store) are never written.

op mean reduces as a sum and divides by n once, in `join_output` (as NCCL's ncclAvg).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ParasimError
from .algorithms import make_plan
from .plan import Plan, Transfer
from .reference import check_op, combine, join, split

REDUCING = ("all_reduce", "reduce_scatter", "reduce")
Slots = list  # list[np.ndarray | None]


def split_input(kind: str, n_chunks: int, n: int, rank: int, x: np.ndarray | None, root: int = 0,
                axis: int | None = None, counts=None) -> Slots:
    """Rank `rank`'s initial slots for a group of n. x is its input (None for non-roots of broadcast);
    `counts`: a flat reduce_scatter's element count per member (None: np.array_split's)."""
    if kind == "barrier":
        return [np.empty(0)]
    if kind == "broadcast":
        if rank != root:
            return [None] * n_chunks
        x = np.asarray(x)
        if x.ndim == 0:  # a scalar travels whole in slot 0
            return [x] + [np.empty(0, x.dtype)] * (n_chunks - 1)
        return np.array_split(x.ravel() if axis is None else x, n_chunks)  # receivers learn the shape
    x = np.asarray(x)
    if kind in ("all_reduce", "reduce"):
        return np.array_split(x.ravel(), n_chunks)
    if kind == "reduce_scatter":
        if counts is None:
            return split(x, n, axis)
        if sum(counts) != x.size:
            raise ParasimError(f"reduce_scatter counts {list(counts)} add up to {sum(counts)} elements; the input "
                               f"has {x.size}")
        return np.split(x.ravel(), np.cumsum(counts)[:-1])
    if kind == "all_gather":
        slots: Slots = [None] * n
        slots[rank] = x.ravel() if axis is None else x
        return slots
    if kind == "all_to_all":
        slots = [None] * (n * n)
        slots[rank * n:(rank + 1) * n] = split(x, n, axis)
        return slots
    raise ParasimError(f"unknown collective {kind!r}")


def outgoing(slots: Slots, sends: Sequence[Transfer]) -> list[np.ndarray]:
    return [slots[t.src_chunk] for t in sends]


def apply_incoming(slots: Slots, recvs: Sequence[Transfer], chunks: Sequence[np.ndarray], op: str,
                   alloc=None) -> None:
    """Write received chunks into their slots, in plan order; reduce=True combines with op, into
    a new array, or into `alloc(a, b)` where that gives one (a Ray actor's shared-memory buffer)."""
    for t, chunk in zip(recvs, chunks, strict=True):
        if t.reduce:
            a = slots[t.dst_chunk]
            slots[t.dst_chunk] = combine(op, a, chunk, None if alloc is None else alloc(a, chunk))
        else:
            slots[t.dst_chunk] = chunk


def join_output(kind: str, n: int, rank: int, slots: Slots, op: str = "sum", root: int = 0,
                axis: int | None = None, like: np.ndarray | None = None) -> np.ndarray | None:
    """Rank `rank`'s result from its final slots (None: a reduce's non-roots, a barrier).
    like: this rank's input, whose shape an all_reduce / reduce result takes."""
    if kind == "barrier" or (kind == "reduce" and rank != root):
        return None
    if kind in ("all_reduce", "reduce"):
        out = np.concatenate(slots).reshape(np.shape(like))
    elif kind == "reduce_scatter":
        out = slots[rank]
    elif kind == "all_gather":
        out = join(slots, axis)
    elif kind == "broadcast":
        if slots[0].ndim == 0:
            return slots[0]
        out = np.concatenate(slots, axis=0)
    elif kind == "all_to_all":
        out = join([slots[i * n + rank] for i in range(n)], axis)
    else:
        raise ParasimError(f"unknown collective {kind!r}")
    if op == "mean" and kind in REDUCING:
        out = out / n
    return out


def run_plan(plan: Plan, buffers: list[Slots], op: str = "sum", sent: list[int] | None = None) -> list[Slots]:
    """Run every step of `plan` over per-rank slot lists (new lists; inputs untouched).
    `sent`, if given, accumulates the bytes each rank really sent."""
    check_op(op)
    if len(buffers) != plan.n:
        raise ParasimError(f"plan for {plan.n} ranks got {len(buffers)} buffers")
    bufs = [list(b) for b in buffers]
    for step in plan.steps:
        payloads = [bufs[t.src][t.src_chunk] for t in step.transfers]  # read everything first
        for r in range(plan.n):
            recvs = [(t, p) for t, p in zip(step.transfers, payloads) if t.dst == r]
            apply_incoming(bufs[r], [t for t, _ in recvs], [p for _, p in recvs], op)
        if sent is not None:
            for t, p in zip(step.transfers, payloads):
                sent[t.src] += int(p.nbytes)
    return bufs


def collective(kind: str, arrays: Sequence[np.ndarray | None], algo: str | None = None, op: str = "sum",
               root: int = 0, axis: int | None = None) -> tuple[list[np.ndarray | None], Plan, list[int]]:
    """Run collective `kind` by `algo` on per-rank arrays: (outputs, plan, bytes really sent per rank)."""
    n = len(arrays)
    _check_arrays(kind, arrays, root)
    src = arrays[root] if kind == "broadcast" else arrays[0]
    itemsize = np.asarray(src).dtype.itemsize if src is not None and kind != "barrier" else 1
    if kind == "all_gather":
        sizes = [np.size(a) for a in arrays]
        plan = make_plan(kind, algo, n, sizes=sizes, itemsize=itemsize, root=root)
    else:
        plan = make_plan(kind, algo, n, 0 if kind == "barrier" else np.asarray(src).nbytes,
                         itemsize=itemsize, root=root)
    bufs = [split_input(kind, plan.n_chunks, n, r, arrays[r], root, axis) for r in range(n)]
    sent = [0] * n
    bufs = run_plan(plan, bufs, op, sent)
    outs = [join_output(kind, n, r, bufs[r], op, root, axis, arrays[r]) for r in range(n)]
    return outs, plan, sent


def _check_arrays(kind: str, arrays: Sequence[np.ndarray | None], root: int) -> None:
    """Refuse up front (one line) what would otherwise fail deep inside numpy: no ranks, a root
    outside the group, missing inputs, unequal shapes or dtypes where every rank must agree."""
    n = len(arrays)
    if n == 0:
        raise ParasimError("a collective needs at least one rank, got 0 arrays")
    if isinstance(root, bool) or int(root) != root or not 0 <= root < n:
        raise ParasimError(f"root {root} is not a rank of a group of {n}")
    if kind == "barrier":
        return
    need = [root] if kind == "broadcast" else range(n)
    missing = [r for r in need if arrays[r] is None]
    if missing:
        raise ParasimError(f"{kind} needs an input array on rank(s) {missing}, got None")
    arrs = [np.asarray(arrays[r]) for r in need]
    if len({a.dtype for a in arrs}) > 1:
        raise ParasimError(f"{kind} needs one dtype on every rank, got {sorted({str(a.dtype) for a in arrs})}")
    if kind != "all_gather" and len({a.shape for a in arrs}) > 1:
        raise ParasimError(f"{kind} needs equal shapes on every rank, got {[a.shape for a in arrs]}")
