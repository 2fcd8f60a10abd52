"""The body of a Ray device actor: a Device, one entry point, and how collective chunks travel.

`invoke(method, *args)` runs one device call (simulator/runtime/base.py) and returns its n results
plus an acknowledgement. A collective step's chunks for a device on the same Ray node leave as
`ShmChunk` tokens of this actor's shared-memory pool (simulator/runtime/shm_chunks.py says why:
no object-store allocation per chunk); chunks for other nodes stay numpy arrays, which Ray moves
through its object store. A received token is read in place (a read-only view of the peer's buffer),
handed on as it is when the device passes the chunk on unchanged, and released once the device no
longer uses it. The device sees
numpy arrays either way, so its results are those of the in-process runtime bit for bit.
"""

from __future__ import annotations

from ..errors import DeviceFailure, ParasimError
from .base import DEVICE_METHODS
from .device import Device
from .shm_chunks import MIN_CHUNK_BYTES, ChunkPool, ChunkReader, ShmChunk


class RemoteFailure(Exception):
    """DeviceFailure in a form pickle can rebuild (its args are its constructor's)."""

    def __init__(self, rank: int, instruction: str, reason: str):
        super().__init__(rank, instruction, reason)


class DeviceActor:
    """One device in an actor. `set_neighbours(ranks)` names the ranks on this actor's Ray node
    (their chunks may go through shared memory); none until the driver says so."""

    def __init__(self, rank: int, device_class: type = Device):
        self.device = device_class(rank)
        self.same_node: frozenset[int] = frozenset()
        self.pool, self.reader = ChunkPool(), ChunkReader()
        self.held: dict[int, dict] = {}  # open collective -> {id(view): (view, token)} its slots use

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def set_neighbours(self, ranks) -> bool:
        self.same_node = frozenset(int(r) for r in ranks)
        return True

    def shared_buffers(self) -> list[str]:
        """The names of this actor's shared-memory segments (/dev/shm/NAME on Linux)."""
        return [b.name for b in self.pool.buffers]

    def close(self) -> bool:
        """Unlink this actor's shared-memory buffers (the driver calls it before killing the actor)."""
        self.reader.close()
        self.pool.close()
        return True

    def invoke(self, method: str, *args):
        if method not in DEVICE_METHODS:
            raise ParasimError(f"device method {method!r} is not callable; valid: {', '.join(DEVICE_METHODS)}")
        try:
            if method == "collective_step":
                outs = self._collective_step(*args)
            else:
                if method == "clear":  # a restart of the run: nobody reads what this pool still holds
                    self.pool.close()
                    for _, token in (x for ts in self.held.values() for x in ts.values()):
                        self.reader.release(token, self.device.rank)
                    self.held = {}
                outs = getattr(self.device, method)(*args)
        except DeviceFailure as e:
            raise RemoteFailure(e.rank, e.instruction, e.reason) from None
        return (*outs, True) if outs else True

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
        try:
            outs = self.device.collective_step(call, *arrays)
            return [self._send(call.ins.group[t.dst], out, held) for t, out in zip(call.sends, outs)]
        except BaseException:
            ends = True  # the collective ends here: let go of every buffer
            raise
        finally:
            del arrays
            rank = self.device.rank
            for token in used:
                self.reader.release(token, rank)
            if ends:
                for _, token in self.held.pop(call.key, {}).values():
                    self.reader.release(token, rank)

    def _send(self, dst: int, chunk, held: dict):
        """For a large chunk to a device on this node: the token of the peer's buffer it came in
        (handed on) or of a buffer of this actor's pool; else the array itself."""
        if dst not in self.same_node or getattr(chunk, "nbytes", 0) < MIN_CHUNK_BYTES:
            return chunk
        view, token = held.get(id(chunk), (None, None))
        if view is chunk and self.reader.hand_on(token, dst):
            return token
        token = self.pool.put(chunk, dst)
        return chunk if token is None else token
