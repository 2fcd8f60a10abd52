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
its own slot; one copy when it keeps the chunk), then marks the buffer free again. A reduction's
result can also be written straight into a buffer of the reducing actor's pool (`claim`): when
that slot is sent on, its token goes without any copy.

Buffer layout: a 64-byte header, byte i set while device i has still to read the chunk or
keeps it as one of its slots, then the chunk's bytes. The writer sets the byte of the receiver;
a receiver that passes the chunk on unchanged (a ring all-gather) sets the next receiver's byte
before it hands on the same token, and clears its own when done; each byte has one writer at a
time. The writer reuses a buffer only when its whole header is clear (otherwise it creates
another), so a chunk is never overwritten while a device uses it; devices of rank >= 64 get
arrays instead. The pool is bounded (`max_bytes`): past it, `put` returns None and the caller
sends the array through Ray as before; so does a machine whose /dev/shm lacks room for the new
buffer plus `SHM_RESERVE` (a container's 64 MB /dev/shm: a write into a full tmpfs would kill the
actor with SIGBUS, where Ray's store falls back to disk). Segments are created with multiprocessing.shared_memory, whose resource tracker unlinks them if
the actor process dies; `close` unlinks them otherwise. A pool given a `prefix` names its segments
PREFIX0, PREFIX1, ...: whoever made the actor can then remove what an actor killed with its
resource tracker left (`unlink_prefix`). No Ray import here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from ..errors import ParasimError

HEADER = 64  # also the number of ranks a buffer can track
CLEAR = bytes(HEADER)
MIN_CHUNK_BYTES = 100 * 1024  # below this Ray inlines the value in the call: no object store to avoid
ROUND = 1 << 20  # buffers are whole MB, so slightly different chunk sizes share them
SHM_RESERVE = 1 << 30  # /dev/shm left free for Ray's object store and the other actors' pools


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    """Free bytes of the shared-memory file system (None where there is no /dev/shm to ask)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class ShmChunk:
    """A chunk in a peer's shared-memory buffer: what Ray carries in place of the array."""

    name: str
    dtype: str
    shape: tuple


class ChunkPool:
    """The sender side: a pool of reusable segments owned by one actor."""

    def __init__(self, max_bytes: int = 2 << 30, prefix: str | None = None):
        self.max_bytes, self.prefix, self.made = int(max_bytes), prefix, 0
        self.buffers: list[shared_memory.SharedMemory] = []
        self.by_name: dict[str, shared_memory.SharedMemory] = {}

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def put(self, chunk: np.ndarray, reader: int) -> ShmChunk | None:
        """Copy `chunk` into a free buffer (a new one if none fits) for device `reader`; None if
        the pool is full or the reader's rank is beyond the header."""
        chunk = np.ascontiguousarray(chunk)
        got = self.claim(chunk.shape, chunk.dtype, reader)
        if got is None:
            return None
        got[0][...] = chunk
        return got[1]

    def claim(self, shape: tuple, dtype, holder: int) -> tuple[np.ndarray, ShmChunk] | None:
        """A free buffer (a new one if none fits) marked as used by device `holder`: a writable
        array of `shape` and `dtype` in it, and its token; None as for `put`."""
        if not 0 <= holder < HEADER:
            return None
        dtype = np.dtype(dtype)
        need = HEADER + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        free = [b for b in self.buffers if b.size >= need and bytes(b.buf[:HEADER]) == CLEAR]
        if free:
            buf = min(free, key=lambda b: b.size)
        else:
            size = -(-need // ROUND) * ROUND
            room = shm_free_bytes()
            if self.nbytes + size > self.max_bytes or (room is not None and room < size + SHM_RESERVE):
                return None
            name = None if self.prefix is None else f"{self.prefix}{self.made}"
            self.made += 1
            buf = shared_memory.SharedMemory(name=name, create=True, size=size)
            self.buffers.append(buf)
            self.by_name[buf.name] = buf
        buf.buf[holder] = 1
        return np.ndarray(shape, dtype, buffer=buf.buf, offset=HEADER), ShmChunk(buf.name, dtype.str, tuple(shape))

    def mark(self, token: ShmChunk, rank: int, used: bool = True) -> None:
        """Device `rank` uses (or, used=False, no longer uses) the buffer of one of this pool's tokens."""
        self.by_name[token.name].buf[rank] = int(used)

    def close(self) -> None:
        for b in self.buffers:
            try:
                b.close()
            except BufferError:  # an array still views it: the mapping goes with the process
                pass
            b.unlink()
        self.buffers, self.by_name = [], {}


def unlink_prefix(prefix: str, path: str = "/dev/shm") -> list[str]:
    """Remove the shared-memory segments whose names start with `prefix` (a dead actor's pool);
    returns their names. Nothing where there is no /dev/shm."""
    if not prefix or "/" in prefix:
        raise ParasimError(f"a shared-memory prefix is a plain name, got {prefix!r}")
    try:
        names = [n for n in os.listdir(path) if n.startswith(prefix)]
    except OSError:
        return []
    for n in names:
        try:
            os.unlink(os.path.join(path, n))
        except OSError:
            pass
    return names


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

    def release(self, token: ShmChunk, rank: int) -> None:
        """Device `rank` is done with the chunk (its writer may reuse the buffer once all are)."""
        self.segments[token.name].buf[rank] = 0

    def hand_on(self, token: ShmChunk, rank: int) -> bool:
        """Mark device `rank` as a further reader of a chunk this device still holds; False if the
        rank is beyond the header (send the array instead)."""
        if not 0 <= rank < HEADER:
            return False
        self.segments[token.name].buf[rank] = 1
        return True

    def close(self) -> None:
        for seg in self.segments.values():
            try:
                seg.close()
            except BufferError:  # a view is still alive somewhere: the mapping goes with the process
                pass
        self.segments = {}
