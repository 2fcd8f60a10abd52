"""Collective chunks handed actor to actor: each device actor's mailbox, a Unix datagram socket.

Why: driven step by step, a ring all_reduce of 8 devices costs 128 Ray calls and 15 dependent
hops through the driver (each hop: the producing actor answers the driver, the driver resolves the
argument and pushes the next call), ~115 ms on the 2-core reference machine for a ring of 4-byte
chunks, more than half of the Ray ring's excess over the in-process runtime (README, "Where the
Ray ring's time goes"). When every member of a collective runs on one Ray node, the driver instead
makes ONE call per member for the whole collective (ray_actor.py) and the members hand each
other the chunks through these mailboxes: a large chunk as its `ShmChunk` token (shm_chunks.py: the
bytes stay in the sender's shared-memory buffer), a small one (or one the pool refused) as its
bytes, in datagrams of at most PIECE bytes. A datagram costs tens of microseconds, where a Ray call
costs a millisecond.

Wire format (no pickle): 4-byte header length, a JSON header {"c": collective key, "s": step,
"k": transfer index, "f": sender rank, ...}, then for an array piece its bytes. Kinds: a token
("shm": segment name, "dt": dtype, "sh": shape), an array piece ("dt", "sh", "p": piece, "n":
pieces) or an abort ("abort": reason; the sender failed, the collective will not finish).

A waiting receiver checks every POLL_S that the peers it waits on still live (their process ids:
a killed actor never sends; a zombie counts as dead), and gives up at its deadline. A sender whose
receiver's queue is full (Linux keeps 10 datagrams per socket by default) waits for room on a
socket connected to it while reading its own queue, so two members sending to each other cannot
deadlock; it too stops at an abort of the collective (a receiver that failed never reads again),
at the receiver's death and at its deadline. The driver may abort every collective up to a key
(`abort_upto`: "f": -1, "upto": 1), e.g. after another device failed: the members still waiting
stop at once instead of at their deadlines. The socket has an
abstract Linux address (it vanishes with the process); `available()` is False elsewhere, and the
runtime then drives collectives step by step through Ray. No Ray import here.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import struct
import sys
import time

import numpy as np

from ..errors import DeviceFailure, ParasimError
from .shm_chunks import ShmChunk

PIECE = 60_000  # bytes of array data per datagram (well under the 212,992-byte socket buffer)
POLL_S = 0.2    # how often a waiting receiver checks that its peers live
_LEN = struct.Struct("!I")


def available() -> bool:
    """Abstract Unix sockets exist on Linux only."""
    return sys.platform.startswith("linux") and hasattr(socket, "AF_UNIX")


def _alive(pid: int) -> bool:
    """False once the process has exited, also while it is an unreaped zombie (os.kill(pid, 0)
    still succeeds on one: a container whose init does not reap would hide every death)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal test is all there is
    return state not in (b"Z", b"X")


class Aborted(Exception):
    """A peer said the collective will not finish."""


class Mailbox:
    """One device's mailbox. `peers[rank] = (address, pid)` of the devices it may exchange with."""

    def __init__(self, rank: int):
        self.rank = rank
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.address = f"\0parasim-{os.getpid()}-{secrets.token_hex(8)}"
        self.sock.bind(self.address)
        self.sock.setblocking(False)
        self.peers: dict[int, tuple[str, int]] = {}
        self.out: dict[int, socket.socket] = {}   # rank -> a socket connected to its mailbox
        self.box: dict[tuple, object] = {}      # (key, step, k) -> ShmChunk or array
        self.partial: dict[tuple, list] = {}    # (key, step, k) -> [bytearray, pieces still missing]
        self.aborts: dict[int, tuple[int, str]] = {}  # key -> (sender, reason)
        self.upto: tuple[int, int, str] = (0, -1, "")  # the driver aborted every key <= upto[0]

    def set_peers(self, peers: dict[int, tuple[str, int]]) -> None:
        """peers[rank] = (address, process id) of the mailboxes this one may send to."""
        for s in self.out.values():
            s.close()
        self.peers, self.out = dict(peers), {}

    # ---- sending ------------------------------------------------------------------------------
    def send(self, dst: int, key: int, step: int, k: int, value, deadline: float | None) -> None:
        """Hand `value` (a ShmChunk token or an array) to device `dst` as transfer k of step."""
        head = {"c": key, "s": step, "k": k, "f": self.rank}
        if isinstance(value, ShmChunk):
            self._post(dst, {**head, "shm": value.name, "dt": value.dtype, "sh": list(value.shape)}, b"", deadline)
            return
        arr = np.ascontiguousarray(value)
        if arr.dtype.hasobject:
            raise ParasimError(f"a collective chunk of dtype {arr.dtype} cannot be sent between devices")
        data = memoryview(arr).cast("B") if arr.nbytes else memoryview(b"")
        n = max(1, -(-len(data) // PIECE))
        for p in range(n):
            self._post(dst, {**head, "dt": arr.dtype.str, "sh": list(arr.shape), "p": p, "n": n},
                       data[p * PIECE:(p + 1) * PIECE], deadline)

    def abort(self, key: int, ranks, reason: str) -> None:
        """Tell devices `ranks` that this device will not finish collective `key`: one try each,
        never a wait (a member that is not reading, its queue full, learns it from the driver's
        `abort_upto`, which the driver repeats until it lands, or from its own deadline). Nothing
        is sent for a key the driver aborted already: every member has that word."""
        if key <= self.upto[0]:
            return
        header = json.dumps({"c": key, "f": self.rank, "abort": reason[:2000]}, separators=(",", ":")).encode()
        msg = _LEN.pack(len(header)) + header
        for r in ranks:
            if r != self.rank and r in self.peers:
                try:
                    self._connected(r).send(msg)
                except OSError:  # BlockingIOError (its queue is full) included
                    pass

    def aborted(self, key: int) -> tuple[int, str] | None:
        """(sender, reason) when collective `key` was aborted (by a member or the driver), else None."""
        if key in self.aborts:
            return self.aborts[key]
        return self.upto[1:] if key <= self.upto[0] else None

    def _post(self, dst: int, head: dict, payload, deadline: float | None) -> None:
        header = json.dumps(head, separators=(",", ":")).encode()
        msg = b"".join((_LEN.pack(len(header)), header, payload))
        pid = self.peers[dst][1]
        while True:
            if "abort" not in head and self.aborted(head["c"]):
                raise Aborted(*self.aborted(head["c"]))
            try:
                out = self._connected(dst)
                out.send(msg)
                return
            except BlockingIOError:  # its queue is full: wait for room, reading ours meanwhile
                readable, _, _ = select.select([self.sock], [out], [], POLL_S)
                if readable:
                    self._drain(0.0)
            except (ConnectionRefusedError, FileNotFoundError):
                raise DeviceFailure(self.rank, "", f"device {dst}'s actor is gone (its mailbox is closed)") from None
            if not _alive(pid):
                raise DeviceFailure(self.rank, "", f"device {dst}'s actor died")
            if deadline is not None and time.monotonic() > deadline:
                raise DeviceFailure(self.rank, "", f"device {dst} took no chunk within the bounded wait")

    def _connected(self, dst: int) -> socket.socket:
        """A socket connected to dst's mailbox: connected, it can wait for room in dst's queue.
        Datagrams in flight count against the SENDER's buffer (212,992 bytes by default): it asks
        for more (the kernel caps it at net.core.wmem_max)."""
        out = self.out.get(dst)
        if out is None:
            out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            try:
                out.connect(self.peers[dst][0])
            except OSError:
                out.close()
                raise
            out.setblocking(False)
            self.out[dst] = out
        return out

    # ---- receiving ----------------------------------------------------------------------------
    def take(self, key: int, step: int, k: int, src: int, deadline: float | None):
        """Transfer k of step of collective `key`, from device `src` (waits; raises Aborted, or
        DeviceFailure when `src` died or the deadline passed)."""
        tag = (key, step, k)
        last_check = time.monotonic()
        while tag not in self.box:
            if self.aborted(key):
                raise Aborted(*self.aborted(key))
            now = time.monotonic()
            if now - last_check >= POLL_S:
                last_check = now
                if src in self.peers and not _alive(self.peers[src][1]):
                    raise DeviceFailure(self.rank, "", f"aborted: device {src}'s actor died during the collective")
            if deadline is not None and now > deadline:
                raise DeviceFailure(self.rank, "", f"aborted: no chunk from device {src} within the bounded wait")
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - now))
            self._drain(wait)
        return self.box.pop(tag)

    def _drain(self, wait: float) -> None:
        """Read every datagram queued (waiting up to `wait` s for the first)."""
        if wait > 0:
            select.select([self.sock], [], [], wait)
        while True:
            try:
                msg = self.sock.recv(PIECE + 4096)
            except BlockingIOError:
                return
            try:
                self._file(msg)
            except (ValueError, KeyError, TypeError, IndexError, struct.error):
                pass  # not a parasim datagram (the address is reachable from this machine): ignored

    def _file(self, msg: bytes) -> None:
        (n,) = _LEN.unpack_from(msg)
        head = json.loads(msg[4:4 + n])
        key = head["c"]
        if "abort" in head:
            if head.get("upto"):
                self.upto = max(self.upto, (int(key), -1, str(head["abort"])))
            else:
                self.aborts.setdefault(key, (head["f"], head["abort"]))
            return
        tag = (key, head["s"], head["k"])
        if "shm" in head:
            self.box[tag] = ShmChunk(head["shm"], head["dt"], tuple(head["sh"]))
            return
        dtype, shape = np.dtype(head["dt"]), tuple(head["sh"])
        if head["n"] == 1:
            self.box[tag] = np.frombuffer(bytearray(msg[4 + n:]), dtype).reshape(shape)
            return
        buf = self.partial.setdefault(tag, [bytearray(dtype.itemsize * int(np.prod(shape))), head["n"]])
        piece = msg[4 + n:]
        buf[0][head["p"] * PIECE:head["p"] * PIECE + len(piece)] = piece
        buf[1] -= 1
        if buf[1] == 0:
            del self.partial[tag]
            self.box[tag] = np.frombuffer(buf[0], dtype).reshape(shape)

    def forget(self, before_key: int) -> list:
        """Drop what collectives older than `before_key` left behind (an aborted one's late
        chunks); returns the tokens dropped (the caller releases their buffers)."""
        tokens = [v for t, v in self.box.items() if t[0] < before_key and isinstance(v, ShmChunk)]
        self.box = {t: v for t, v in self.box.items() if t[0] >= before_key}
        self.partial = {t: v for t, v in self.partial.items() if t[0] >= before_key}
        self.aborts = {c: v for c, v in self.aborts.items() if c >= before_key}
        return tokens

    def close(self) -> None:
        self.set_peers({})
        self.sock.close()


def abort_upto(addresses, key: int, reason: str) -> list:
    """Tell the mailboxes at `addresses` that every collective up to `key` is aborted (the driver's
    word, e.g. after a device failed). Returns the addresses not reached now (a full queue: call
    again); a mailbox that is gone or on another machine is skipped."""
    head = json.dumps({"c": int(key), "f": -1, "abort": reason[:2000], "upto": 1}, separators=(",", ":")).encode()
    msg = _LEN.pack(len(head)) + head
    again = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        for address in addresses:
            try:
                s.sendto(msg, address)
            except BlockingIOError:
                again.append(address)
            except OSError:
                pass
    return again
