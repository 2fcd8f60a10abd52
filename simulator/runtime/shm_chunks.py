"""Collective chunks between device actors on one machine: reused shared-memory buffers.

Why not Ray's object store for these: every `ray.put` (or large return value) lands in freshly
allocated object-store pages, and the store's shared memory is not backed by huge pages, so each
8 MB chunk costs its writer ~2,000 page faults plus a create/seal round trip with the raylet:
~4-9 ms per 8 MB chunk on the 2-core reference machine against 0.7 ms for the copy itself
(measured: bench/bench_foundation.py, README "What the numbers say"). A ring all_reduce of 64 MB
on 8 devices moves 64 such chunks. So a sending actor copies each chunk into a buffer of its own
pool, a shared-memory segment it keeps for the life of the actor (its pages are touched once), and
returns a small `ShmChunk` token in its place; the token travels through Ray as before (the
receiver's next call takes it as an argument, so the write happened before the read). The
receiver maps the segment once, reads the chunk in place (no copy when it reduces the chunk into
its own slot; one copy when it keeps the chunk), then marks the buffer free again.

Buffer layout: a 64-byte header whose byte 0 is the busy flag (1: written, not yet read; 0: free)
and the chunk's bytes after it. One reader per buffer (a chunk sent to two devices is two
buffers), so a single flag suffices: the writer sets it, the reader clears it after use, the writer
reuses only buffers whose flag is clear (otherwise it creates another). The pool is bounded
(`max_bytes`): past it, `put` returns None and the caller sends the array through Ray as before.
Segments are created with multiprocessing.shared_memory, whose resource tracker unlinks them if
the actor process dies; `close` unlinks them otherwise. No Ray import here.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from ..errors import ParasimError

HEADER = 64
MIN_CHUNK_BYTES = 100 * 1024  # below this Ray inlines the value in the call: no object store to avoid
ROUND = 1 << 20  # buffers are whole MB, so slightly different chunk sizes share them


@dataclass(frozen=True)
class ShmChunk:
    """A chunk in a peer's shared-memory buffer: what Ray carries in place of the array."""

    name: str
    dtype: str
    shape: tuple


class ChunkPool:
    """The sender side: a pool of reusable segments owned by one actor."""

    def __init__(self, max_bytes: int = 2 << 30):
        self.max_bytes = int(max_bytes)
        self.buffers: list[shared_memory.SharedMemory] = []

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def put(self, chunk: np.ndarray) -> ShmChunk | None:
        """Copy `chunk` into a free buffer (a new one if none fits); None if the pool is full."""
        chunk = np.ascontiguousarray(chunk)
        need = HEADER + chunk.nbytes
        free = [b for b in self.buffers if b.size >= need and b.buf[0] == 0]
        if free:
            buf = min(free, key=lambda b: b.size)
        else:
            size = -(-need // ROUND) * ROUND
            if self.nbytes + size > self.max_bytes:
                return None
            buf = shared_memory.SharedMemory(create=True, size=size)
            self.buffers.append(buf)
        np.ndarray(chunk.shape, chunk.dtype, buffer=buf.buf, offset=HEADER)[...] = chunk
        buf.buf[0] = 1
        return ShmChunk(buf.name, chunk.dtype.str, chunk.shape)

    def close(self) -> None:
        for b in self.buffers:
            b.close()
            b.unlink()
        self.buffers = []


class ChunkReader:
    """The receiver side: the peers' segments it has mapped (each mapped once, kept)."""

    def __init__(self):
        self.segments: dict[str, shared_memory.SharedMemory] = {}

    def view(self, token: ShmChunk) -> np.ndarray:
        """The chunk in place (read-only): valid until `release(token)`."""
        seg = self.segments.get(token.name)
        if seg is None:
            try:
                seg = shared_memory.SharedMemory(name=token.name)
            except FileNotFoundError:
                raise ParasimError(f"collective chunk buffer {token.name} is gone (its device's actor "
                                   f"ended before the chunk was read)") from None
            # the writer owns the segment: this process must not unlink it when it exits
            resource_tracker.unregister(seg._name, "shared_memory")
            self.segments[token.name] = seg
        out = np.ndarray(token.shape, np.dtype(token.dtype), buffer=seg.buf, offset=HEADER)
        out.flags.writeable = False
        return out

    def release(self, token: ShmChunk) -> None:
        """The chunk has been used: its writer may reuse the buffer."""
        self.segments[token.name].buf[0] = 0

    def close(self) -> None:
        for seg in self.segments.values():
            try:
                seg.close()
            except BufferError:  # a view is still alive somewhere: the mapping goes with the process
                pass
        self.segments = {}
