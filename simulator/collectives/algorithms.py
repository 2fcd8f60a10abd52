"""Collective algorithms as plans (lists of steps of chunk transfers), and `make_plan`.

Ranks are group-local 0..n-1. The buffer of every rank is a list of `n_chunks` slots; chunk c is
part c of `np.array_split` of the flattened array (uneven sizes allowed, chunk nbytes exact).
Slot conventions per kind (shared with `execute.split_input` / `execute.join_output`):

- all_reduce, reduce_scatter, all_gather, broadcast, reduce: slot c = chunk c of the array.
  reduce_scatter leaves the reduced chunk r on rank r; all_gather starts with chunk r on rank r.
- all_to_all: n*n slots, slot i*n + j = the part rank i sends to rank j.
- barrier: one empty slot, every transfer carries 0 bytes.

Textbook figures (nccl-tests doc/PERFORMANCE.md; Thakur, Rabenseifner & Gropp 2005, "Optimization
of collective communication operations in MPICH"), S = Plan.nbytes:
- ring all_reduce: 2(n-1) steps, each rank sends 2(n-1)/n S (Patarasuk & Yuan 2009);
- ring reduce_scatter / all_gather: n-1 steps, each rank sends (n-1)/n S;
- direct: one step per phase, the same bytes as the ring but n-1 messages per rank per step.
Tree, chain and halving-doubling plans live in `trees.py`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..errors import ParasimError
from ..limits import MAX_TRANSFERS
from .plan import Plan, PlanStep, Transfer
from .reference import KINDS

Builder = Callable[[int, list[int], int], list[PlanStep]]  # (n, chunk nbytes per slot, root) -> steps


# ---- ring and direct ------------------------------------------------------------------------
def ring_reduce_scatter(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Step s: rank r adds its chunk (r-s-1) mod n into rank r+1; rank r ends with chunk r."""
    return [PlanStep(tuple(Transfer(r, (r + 1) % n, (r - s - 1) % n, (r - s - 1) % n, c[(r - s - 1) % n], True)
                       for r in range(n)), f"reduce-scatter {s + 1}/{n - 1}") for s in range(n - 1)]


def ring_all_gather(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Step s: rank r passes chunk (r-s) mod n to rank r+1 (it starts with chunk r)."""
    return [PlanStep(tuple(Transfer(r, (r + 1) % n, (r - s) % n, (r - s) % n, c[(r - s) % n])
                       for r in range(n)), f"all-gather {s + 1}/{n - 1}") for s in range(n - 1)]


def ring_all_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Reduce-scatter then all-gather around the ring: 2(n-1) steps."""
    return ring_reduce_scatter(n, c) + ring_all_gather(n, c)


def direct_reduce_scatter(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """One step: every rank adds its chunk j into rank j."""
    ts = tuple(Transfer(r, j, j, j, c[j], True) for r in range(n) for j in range(n) if j != r)
    return [PlanStep(ts, "reduce-scatter direct")] if ts else []


def direct_all_gather(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """One step: every rank sends its chunk r to every other rank."""
    ts = tuple(Transfer(r, j, r, r, c[r]) for r in range(n) for j in range(n) if j != r)
    return [PlanStep(ts, "all-gather direct")] if ts else []


def direct_all_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Chunks to their owners (reduce), then owners to everyone: 2 steps."""
    return direct_reduce_scatter(n, c) + direct_all_gather(n, c)


def direct_broadcast(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    ts = tuple(Transfer(root, j, 0, 0, c[0]) for j in range(n) if j != root)
    return [PlanStep(ts, "broadcast direct")] if ts else []


def direct_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    ts = tuple(Transfer(r, root, 0, 0, c[0], True) for r in range(n) if r != root)
    return [PlanStep(ts, "reduce direct")] if ts else []


def direct_all_to_all(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Pairwise exchange, n-1 steps: at step k rank r sends its part for rank r+k."""
    return [PlanStep(tuple(Transfer(r, (r + k) % n, r * n + (r + k) % n, r * n + (r + k) % n, c[r * n + (r + k) % n])
                       for r in range(n)), f"pairwise {k}/{n - 1}") for k in range(1, n)]


def ring_all_to_all(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Store and forward around the ring: at step s rank r forwards to r+1 the parts of source
    i = r-s+1 still on their way (destinations i+s .. i+n-1); each rank sends (n-1)/2 S."""
    steps = []
    for s in range(1, n):
        ts = []
        for r in range(n):
            i = (r - s + 1) % n
            ts += [Transfer(r, (r + 1) % n, i * n + (i + t) % n, i * n + (i + t) % n, c[i * n + (i + t) % n])
                   for t in range(s, n)]
        steps.append(PlanStep(tuple(ts), f"all-to-all ring {s}/{n - 1}"))
    return steps


def ring_barrier(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """A 0-byte ring all-gather: after n-1 steps every rank has heard from every other."""
    return [PlanStep(tuple(Transfer(r, (r + 1) % n, 0, 0, 0) for r in range(n)), f"barrier {s + 1}/{n - 1}")
            for s in range(n - 1)]


def direct_barrier(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    ts = tuple(Transfer(r, j, 0, 0, 0) for r in range(n) for j in range(n) if j != r)
    return [PlanStep(ts, "barrier direct")] if ts else []


# ---- registry and make_plan -------------------------------------------------------------------
def _registry() -> dict[str, dict[str, tuple[Callable[[int], int], Builder]]]:
    from . import trees

    n_ = lambda n: n  # noqa: E731  (slots per rank as a function of n)
    one = lambda n: 1  # noqa: E731
    return {
        "all_reduce": {"ring": (n_, ring_all_reduce), "tree": (one, trees.tree_all_reduce),
                       "halving_doubling": (trees.pow2_floor, trees.halving_doubling_all_reduce),
                       "direct": (n_, direct_all_reduce)},
        "reduce_scatter": {"ring": (n_, ring_reduce_scatter), "direct": (n_, direct_reduce_scatter)},
        "all_gather": {"ring": (n_, ring_all_gather), "direct": (n_, direct_all_gather)},
        "broadcast": {"ring": (n_, trees.chain_broadcast), "tree": (one, trees.tree_broadcast),
                      "direct": (one, direct_broadcast)},
        "reduce": {"ring": (n_, trees.chain_reduce), "tree": (one, trees.tree_reduce),
                   "direct": (one, direct_reduce)},
        "all_to_all": {"direct": (lambda n: n * n, direct_all_to_all), "ring": (lambda n: n * n, ring_all_to_all)},
        "barrier": {"ring": (one, ring_barrier), "dissemination": (one, trees.dissemination_barrier),
                    "direct": (one, direct_barrier)},
    }


DEFAULT_ALGO = {"all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring", "broadcast": "tree",
                "reduce": "tree", "all_to_all": "direct", "barrier": "dissemination"}


def algorithms(kind: str | None = None) -> dict[str, tuple[str, ...]] | tuple[str, ...]:
    """Valid algorithm names, per kind (or for one kind)."""
    reg = {k: tuple(v) for k, v in _registry().items()}
    return reg if kind is None else reg[_check_kind(kind)]


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ParasimError(f"unknown collective {kind!r}; valid kinds: {', '.join(KINDS)}")
    return kind


def input_to_plan_nbytes(kind: str, n: int, input_nbytes: int) -> int:
    """S as nccl-tests counts it from one member's input size: all_gather's S is n parts."""
    return int(input_nbytes) * n if kind == "all_gather" else int(input_nbytes)


def chunk_nbytes(kind: str, n: int, n_chunks: int, nbytes: int, sizes: Sequence[int] | None = None,
                 itemsize: int = 1) -> list[int]:
    """nbytes of every slot: np.array_split of S / itemsize elements (or the explicit `sizes`)."""
    if kind == "barrier":
        return [0] * n_chunks
    if sizes is not None:
        if kind == "all_to_all" or len(sizes) != n_chunks:
            raise ParasimError(f"{kind} with {n_chunks} chunks per rank cannot take {len(sizes)} explicit "
                               "sizes; give the total size instead")
        return [int(s) * itemsize for s in sizes]
    if nbytes < 0 or itemsize < 1 or nbytes % itemsize:
        raise ParasimError(f"size {nbytes} B is not a whole number of {itemsize}-byte elements")
    parts = n if kind == "all_to_all" else n_chunks
    elems = [len(p) for p in np.array_split(np.empty(nbytes // itemsize, dtype=np.bool_), parts)]
    if kind == "all_to_all":
        return [elems[j] * itemsize for _ in range(n) for j in range(n)]
    return [e * itemsize for e in elems]




def max_transfers(kind: str, algo: str, n: int) -> int:
    """An upper bound on the transfers of a plan, known before building it: trees move n - 1 per
    direction, dissemination n per round, all_to_all by ring n^2 (n-1) / 2, every other plan at
    most 2 n (n - 1) (ring / direct all_reduce; chains and halving-doubling move fewer)."""
    if algo == "tree":
        return 2 * n
    if algo == "dissemination":
        return n * max(1, (n - 1).bit_length())
    if kind == "all_to_all" and algo == "ring":
        return n * n * (n - 1) // 2
    return 2 * n * (n - 1)


def make_plan(kind: str, algo: str | None, n: int, nbytes: int = 0, *, sizes: Sequence[int] | None = None,
              itemsize: int = 1, root: int = 0) -> Plan:
    """The plan of collective `kind` by `algo` over a group of n ranks.

    nbytes: S, the whole array (nccl-tests convention: all_gather's S is the gathered result,
    all_to_all's S one rank's send buffer). sizes: explicit element counts of the n parts
    (uneven all_gather / reduce_scatter). itemsize: bytes per element, so chunks are cut at
    element boundaries. root: group-local root of broadcast / reduce. algo None -> DEFAULT_ALGO."""
    reg = _registry()
    _check_kind(kind)
    algo = algo or DEFAULT_ALGO[kind]
    if algo not in reg[kind]:
        raise ParasimError(f"unknown algorithm {algo!r} for {kind}; valid: {', '.join(reg[kind])}")
    if int(n) != n or n < 1:
        raise ParasimError(f"a collective group needs at least 1 rank, got n = {n}")
    n = int(n)
    if not 0 <= root < n:
        raise ParasimError(f"root {root} is not a rank of a group of {n}")
    if sizes is not None:
        if any(int(s) < 0 for s in sizes):
            raise ParasimError(f"part sizes must be >= 0 elements, got {list(sizes)}")
        nbytes = sum(int(s) for s in sizes) * itemsize
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ParasimError(f"a collective moves >= 0 bytes, got {nbytes}")
    bound = max_transfers(kind, algo, n)
    if bound > MAX_TRANSFERS:
        raise ParasimError(f"{kind}/{algo} over {n} ranks is a plan of up to {bound:,} chunk transfers, more than "
                           f"the {MAX_TRANSFERS:,} a plan may hold; price large groups with collective_time_s")
    n_chunks_of, build = reg[kind][algo]
    n_chunks = n_chunks_of(n)
    c = chunk_nbytes(kind, n, n_chunks, nbytes, sizes, itemsize)
    steps = tuple(build(n, c, root)) if n > 1 else ()
    return Plan(kind, algo, n, n_chunks, 0 if kind == "barrier" else nbytes, steps)
