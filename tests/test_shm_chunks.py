"""The shared-memory chunk pool of the Ray runtime (simulator.runtime.shm_chunks), without Ray."""

from multiprocessing import shared_memory

import numpy as np

from simulator.runtime import shm_chunks
from simulator.runtime.shm_chunks import ChunkPool


def test_a_full_dev_shm_sends_the_chunk_through_ray_instead(monkeypatch):
    pool = ChunkPool()
    chunk = np.arange(1 << 18, dtype=np.float64)  # 2 MB
    monkeypatch.setattr(shm_chunks, "shm_free_bytes", lambda path="/dev/shm": 64 << 20)  # a container's 64 MB
    try:
        assert pool.put(chunk, reader=1) is None and pool.nbytes == 0
    finally:
        pool.close()


def _read(token, rank=None):
    """The chunk behind a token, read as a receiver would (same process: no ChunkReader, whose
    resource-tracker bookkeeping is for the other processes); optionally release it for `rank`."""
    seg = shared_memory.SharedMemory(name=token.name)
    try:
        out = np.ndarray(token.shape, np.dtype(token.dtype), buffer=seg.buf, offset=shm_chunks.HEADER).copy()
        if rank is not None:
            seg.buf[rank] = 0
        return out
    finally:
        seg.close()


def test_a_chunk_put_is_read_back_equal_and_its_buffer_reused_once_released():
    pool = ChunkPool()
    chunk = np.random.default_rng(0).standard_normal(1 << 15)
    try:
        token = pool.put(chunk, reader=2)
        if token is None:  # this machine's /dev/shm is too small: the chunk goes through Ray instead
            assert shm_chunks.shm_free_bytes() < shm_chunks.ROUND + shm_chunks.SHM_RESERVE
            return
        assert np.array_equal(_read(token), chunk)
        assert pool.put(chunk, reader=2).name != token.name  # still unread: a second buffer
        assert np.array_equal(_read(token, rank=2), chunk)     # read and released
        assert pool.put(2 * chunk, reader=3).name == token.name  # reused, no new segment
        assert np.array_equal(_read(token), 2 * chunk)
    finally:
        pool.close()
