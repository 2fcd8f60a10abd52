"""The device actors' mailboxes (simulator.runtime.chunk_mail), without Ray: two in one process."""

import subprocess
import sys
import time

import numpy as np
import pytest

from simulator.errors import DeviceFailure
from simulator.runtime import chunk_mail
from simulator.runtime.chunk_mail import Aborted, Mailbox
from simulator.runtime.shm_chunks import ShmChunk

pytestmark = pytest.mark.skipif(not chunk_mail.available(), reason="abstract Unix sockets are Linux-only")


@pytest.fixture
def pair():
    import os

    a, b = Mailbox(0), Mailbox(1)
    a.set_peers({1: (b.address, os.getpid())})
    b.set_peers({0: (a.address, os.getpid())})
    yield a, b
    a.close()
    b.close()


def test_arrays_of_any_size_and_tokens_arrive_equal_and_in_any_order(pair):
    a, b = pair
    big = np.random.default_rng(0).standard_normal((3, 15_001)).astype(np.float32)  # 3 datagrams
    token = ShmChunk("psm_x", "<f8", (5,))
    import socket

    stray = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stray.sendto(b"not a chunk", b.address)  # anything else arriving is ignored
    stray.close()
    a.send(1, 7, 2, 0, big, None)
    a.send(1, 7, 1, 3, np.arange(4, dtype=np.int16), None)  # an earlier step, sent later
    a.send(1, 7, 3, 1, token, None)
    a.send(1, 7, 4, 0, np.empty((0, 2)), None)
    assert np.array_equal(b.take(7, 1, 3, 0, time.monotonic() + 5), np.arange(4, dtype=np.int16))
    got = b.take(7, 2, 0, 0, time.monotonic() + 5)
    assert got.dtype == big.dtype and np.array_equal(got, big)
    assert b.take(7, 3, 1, 0, None) == token
    assert b.take(7, 4, 0, 0, None).shape == (0, 2)


def test_a_full_queue_does_not_deadlock_two_members_sending_to_each_other(pair):
    """Each sends 14 datagrams before reading, more than the 10 a socket queues by default: a
    blocked sender reads its own queue meanwhile, so both finish."""
    import threading

    a, b = pair
    chunk = np.arange(100_000.0)
    got = {}

    def member(me, peer, rank, factor):
        me.send(rank, 1, 0, 0, factor * chunk, time.monotonic() + 20)
        got[me.rank] = me.take(1, 0, 0, rank, time.monotonic() + 20)

    threads = [threading.Thread(target=member, args=(a, b, 1, 1.0)), threading.Thread(target=member, args=(b, a, 0, 2.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert np.array_equal(got[0], 2 * chunk) and np.array_equal(got[1], chunk)


def test_abort_dead_peer_and_bounded_wait(pair):
    a, b = pair
    a.abort(3, [0, 1], "device 0 failed")
    with pytest.raises(Aborted):
        b.take(3, 0, 0, 0, None)
    t0 = time.monotonic()
    with pytest.raises(DeviceFailure, match="no chunk from device 0 within the bounded wait"):
        b.take(4, 0, 0, 0, time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 2
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    b.set_peers({0: (a.address, int(dead.stdout))})  # a process that has exited
    with pytest.raises(DeviceFailure, match="device 0's actor died"):
        b.take(5, 0, 0, 0, None)
    assert b.forget(5) == [] and not b.aborts
