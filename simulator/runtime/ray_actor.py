"""The body of a Ray device actor: a Device, one entry point, and how collective chunks travel.

`invoke(method, *args)` runs one device call (simulator/runtime/base.py) and returns its n results
plus an acknowledgement; `invoke("collective_run", steps, timeout_s)` runs a device's every step
of one collective in one call, the chunks coming and going through the members' mailboxes
(chunk_mail.py) instead of through the driver. A collective step's chunks for a device on the same Ray node leave as
`ShmChunk` tokens of this actor's shared-memory pool (simulator/runtime/shm_chunks.py says why:
no object-store allocation per chunk); chunks for other nodes stay numpy arrays, which Ray moves
through its object store. A received token is read in place (a read-only view of the peer's buffer),
handed on as it is when the device passes the chunk on unchanged, and released once the device no
longer uses it. The device sees
numpy arrays either way, so its results are those of the in-process runtime bit for bit.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import DeviceFailure, ParasimError
from .base import DEVICE_METHODS
from .chunk_mail import Aborted, Mailbox, available
from .device import Device
from .shm_chunks import HEADER, MIN_CHUNK_BYTES, ChunkPool, ChunkReader, ShmChunk


class RemoteFailure(Exception):
    """DeviceFailure in a form pickle can rebuild (its args are its constructor's)."""

    def __init__(self, rank: int, instruction: str, reason: str):
        super().__init__(rank, instruction, reason)


class DeviceActor:
    """One device in an actor. `set_neighbours(peers)` names the ranks on this actor's Ray node
    (their chunks may go through shared memory) with their mailboxes (address, process id); none
    until the driver says so. shm_prefix: how this actor's shared-memory segments are named (the
    driver removes what a killed actor left)."""

    def __init__(self, rank: int, device_class: type = Device, shm_prefix: str | None = None):
        self.device = device_class(rank)
        self.same_node: frozenset[int] = frozenset()
        self.pool, self.reader = ChunkPool(prefix=shm_prefix), ChunkReader()
        self.held: dict[int, dict] = {}  # open collective -> {id(view): (view, token)} its slots use
        self.mail = Mailbox(rank) if available() else None
        self.own: dict[int, dict] = {}  # open collective -> {id(view): (view, token)} of this pool's buffers its reductions fill
        self.key: int | None = None     # the collective whose step runs now
        self.device.reduce_into = self._reduce_buffer

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def whereabouts(self) -> tuple:
        """(Ray node id, process id, mailbox address or None)."""
        return self.node_id(), os.getpid(), None if self.mail is None else self.mail.address

    def set_neighbours(self, peers: dict) -> bool:
        """peers: {rank: (mailbox address or None, process id)} of the devices on this Ray node."""
        self.same_node = frozenset(int(r) for r in peers)
        if self.mail is not None:
            self.mail.set_peers({int(r): (a, pid) for r, (a, pid) in peers.items() if a is not None})
        return True

    def shared_buffers(self) -> list[str]:
        """The names of this actor's shared-memory segments (/dev/shm/NAME on Linux)."""
        return [b.name for b in self.pool.buffers]

    def close(self) -> bool:
        """Unlink this actor's shared-memory buffers (the driver calls it before killing the actor)."""
        self.reader.close()
        self.pool.close()
        if self.mail is not None:
            self.mail.close()
        return True

    def invoke(self, method: str, *args):
        if method not in DEVICE_METHODS and method != "collective_run":
            raise ParasimError(f"device method {method!r} is not callable; valid: {', '.join(DEVICE_METHODS)}")
        try:
            if method == "collective_step":
                outs = self._collective_step(*args)
            elif method == "collective_run":
                outs = self._collective_run(*args)
            else:
                outs = getattr(self.device, method)(*args)
                if method == "clear":  # a restart of the run: nobody reads what this pool still holds
                    self.own = {}
                    self.pool.close()
                    for _, token in (x for ts in self.held.values() for x in ts.values()):
                        self.reader.release(token, self.device.rank)
                    self.held = {}
                    self._forget(float("inf"))
        except DeviceFailure as e:
            raise RemoteFailure(e.rank, e.instruction, e.reason) from None
        return (*outs, True) if outs else True

    def _forget(self, before_key: float) -> None:
        """Let go of the chunks older collectives (aborted ones) left in the mailbox."""
        if self.mail is not None:
            for token in self.mail.forget(before_key):
                self.reader.view(token)
                self.reader.release(token, self.device.rank)

    def _collective_run(self, steps, timeout_s: float | None) -> list:
        """Every step of this device's side of one collective: steps = ((s, call, recv_at,
        send_at), ...), recv_at the positions in plan step s-1 of the transfers `call.recvs`,
        send_at those in step s of `call.sends`. Each received chunk is taken from this mailbox
        (waiting for it), each sent one posted to its receiver's. A failure here tells the other
        members (they abort instead of waiting); a peer's abort raises "aborted: ...". Every
        wait is bounded by timeout_s (the runtime always gives one; None: while the peer's process
        lives), and stops at the driver's abort of the collective."""
        mail, rank = self.mail, self.device.rank
        key, group = steps[0][1].key, steps[0][1].ins.group
        self._forget(key)
        where = f"instruction #{steps[0][1].index} {steps[0][1].ins!r}"

        def deadline():
            return None if timeout_s is None else time.monotonic() + timeout_s

        try:
            for s, call, recv_at, send_at in steps:
                chunks = []
                try:
                    for k, t in zip(recv_at, call.recvs):
                        chunks.append(mail.take(key, s - 1, k, group[t.src], deadline()))
                except BaseException:
                    for c in chunks:
                        if isinstance(c, ShmChunk):
                            self.reader.view(c)
                            self.reader.release(c, rank)
                    raise
                outs = self._collective_step(call, *chunks)
                for k, t, out in zip(send_at, call.sends, outs):
                    mail.send(group[t.dst], key, s, k, out, deadline())
        except Aborted as e:
            src, reason = e.args
            who = "the driver stopped the collective" if src < 0 else f"device {src} failed during the collective"
            raise DeviceFailure(rank, where, f"aborted: {who} ({reason})") from None
        except DeviceFailure as e:
            mail.abort(key, group, str(e))
            raise DeviceFailure(e.rank, e.instruction or where, e.reason) from None
        except BaseException as e:
            mail.abort(key, group, f"{type(e).__name__}: {e}")
            raise
        return []

    def _collective_step(self, call, *chunks) -> list:
        """Tokens become views of the peers' buffers. A view reduced into a slot is released after
        the step; a view the device keeps as a slot is released when the collective ends (its last
        step joins the slots into a new array), and handed on as the same token if the device
        sends it unchanged: a kept chunk is never copied here."""
        held = self.held.setdefault(call.key, {})  # id(view) -> (view, token)
        used, arrays = [], []
        for t, c in zip(call.recvs, chunks):
            if isinstance(c, ShmChunk):
                view = self.reader.view(c)
                if t.reduce:
                    used.append(c)
                else:
                    held[id(view)] = (view, c)
                c = view
            arrays.append(c)
        ends = call.last
        self.key = call.key
        try:
            outs = self.device.collective_step(call, *arrays)
            return [self._send(call.ins.group[t.dst], out, held, self.own.get(call.key, {}))
                    for t, out in zip(call.sends, outs)]
        except BaseException:
            ends = True  # the collective ends here: let go of every buffer
            raise
        finally:
            self.key = None
            del arrays
            rank = self.device.rank
            for token in used:
                self.reader.release(token, rank)
            if ends:
                for _, token in self.held.pop(call.key, {}).values():
                    self.reader.release(token, rank)
                self._let_go(call)

    def _reduce_buffer(self, a, b):
        """Where a reduction of a large chunk writes its result: a buffer of this actor's pool, so
        the chunk leaves without a copy when it is sent on (None: a new array, as in-process)."""
        if self.key is None or not self.same_node or np.shape(a) != np.shape(b):
            return None
        dtype = np.result_type(a, b)
        if dtype.hasobject or np.size(a) * dtype.itemsize < MIN_CHUNK_BYTES:
            return None
        got = self.pool.claim(np.shape(a), dtype, self.device.rank)
        if got is None:
            return None
        self.own.setdefault(self.key, {})[id(got[0])] = got
        return got[0]

    def _let_go(self, call) -> None:
        """The collective ended: this device no longer uses its pool's buffers its reductions filled
        (a result tensor still viewing one becomes a copy first, so the buffer can be reused)."""
        own = self.own.pop(call.key, {})
        out = self.device.tensors.get(call.ins.out)
        for view, token in own.values():
            if isinstance(out, np.ndarray) and np.may_share_memory(out, view):
                self.device.tensors[call.ins.out] = out = np.array(out, copy=True)
            self.pool.mark(token, self.device.rank, used=False)

    def _send(self, dst: int, chunk, held: dict, own: dict):
        """For a large chunk to a device on this node: the token of the peer's buffer it came in
        (handed on), of the buffer of this pool a reduction wrote it into, or of a buffer of this
        pool it is copied into; else the array itself."""
        if dst not in self.same_node or getattr(chunk, "nbytes", 0) < MIN_CHUNK_BYTES:
            return chunk
        view, token = held.get(id(chunk), (None, None))
        if view is chunk and self.reader.hand_on(token, dst):
            return token
        view, token = own.get(id(chunk), (None, None))
        if view is chunk and 0 <= dst < HEADER:
            self.pool.mark(token, dst)
            return token
        token = self.pool.put(chunk, dst)
        return chunk if token is None else token
