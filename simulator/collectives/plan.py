"""A collective algorithm as plain data: a list of steps, each a set of chunk transfers.

The runtime executes a plan (every transfer really moves a chunk between devices); the cost
model prices the same plan (alpha-beta per step, the slowest transfer of a step bounds it).
Ranks in a plan are group-local (0..n-1); the caller maps them to global ranks.

Buffer model: each rank's working buffer is a list of `n_chunks` slots. `Transfer(src, dst,
src_chunk, dst_chunk, nbytes, reduce)` sends slot `src_chunk` of `src` to slot `dst_chunk` of
`dst`; `reduce=True` combines it into the destination slot with the reduction op, otherwise it
overwrites the slot. Transfers of one step happen concurrently: every source slot is read
before any destination slot of the same step is written.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    src_chunk: int
    dst_chunk: int
    nbytes: int
    reduce: bool = False

    def __repr__(self) -> str:
        arrow = "+=" if self.reduce else "<-"
        return f"{self.dst}[{self.dst_chunk}] {arrow} {self.src}[{self.src_chunk}] ({self.nbytes} B)"


@dataclass(frozen=True)
class PlanStep:
    transfers: tuple[Transfer, ...]
    label: str = ""

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    def links(self) -> dict[tuple[int, int], int]:
        """Bytes per (src, dst) pair: the transfers one rank sends another in a step form one
        message (halving-doubling moves several chunks per pair); price a step by these."""
        out: dict[tuple[int, int], int] = {}
        for t in self.transfers:
            out[(t.src, t.dst)] = out.get((t.src, t.dst), 0) + t.nbytes
        return out

    def sends_of(self, rank: int) -> tuple[Transfer, ...]:
        return tuple(t for t in self.transfers if t.src == rank)

    def recvs_of(self, rank: int) -> tuple[Transfer, ...]:
        """The transfers into `rank`, in plan order (the order reductions are applied)."""
        return tuple(t for t in self.transfers if t.dst == rank)


@dataclass(frozen=True)
class Plan:
    """kind: all_reduce | reduce_scatter | all_gather | broadcast | reduce | all_to_all | barrier.
    algo: ring | tree | halving_doubling | direct. n: group size. nbytes: size S of the whole
    array as nccl-tests counts it (for all_gather/reduce_scatter/all_to_all the per-rank part x n)."""

    kind: str
    algo: str
    n: int
    n_chunks: int
    nbytes: int
    steps: tuple[PlanStep, ...]

    def bytes_sent_per_rank(self) -> list[int]:
        sent = [0] * self.n
        for step in self.steps:
            for t in step.transfers:
                sent[t.src] += t.nbytes
        return sent

    @property
    def total_bytes(self) -> int:
        return sum(step.nbytes for step in self.steps)

    @property
    def messages(self) -> int:
        return sum(len(step.transfers) for step in self.steps)

    def __repr__(self) -> str:
        return (f"Plan({self.kind}/{self.algo}, n={self.n}, S={self.nbytes} B, {len(self.steps)} steps, "
                f"{self.n_chunks} slots)")
