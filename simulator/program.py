"""The program IR: one instruction list per device, and the walk that orders and validates it.

Every strategy compiles to a `Program`. The real runtimes execute it and the cost model's clock
prices it; both consume the same `Program.walk()`: a global order of events that respects every
dependency (a Recv after its Send, a collective once all its members have reached it, a tensor
used only after the non-blocking collective that writes it has finished). A program that cannot
finish is refused by the walk with the devices and instructions named, so nothing ever hangs.

Semantics (deliberately simple, as in a textbook):
- Compute runs a named kernel from `simulator.ops` on named tensors of its device.
- Send is buffered (it never waits); the value is the tensor as it is at the Send.
- Recv waits for the matching Send; Sends and Recvs match by (src, dst, tag) in FIFO order.
- A Collective matches the k-th collective each member issues on the same group; a blocking one
  waits until every member has issued it; a non-blocking one lets its device go on until an
  instruction touches its input or output tensor.
"""

from __future__ import annotations

import gc
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, Union

from .collectives.reference import KINDS as COLLECTIVE_KINDS
from .errors import ProgramError

PHASES = ("forward", "backward", "wgrad", "optimizer", "comm", "other")


@dataclass(frozen=True)
class Compute:
    """outputs = kernel `op`(inputs, **attrs). `flops` and `nbytes` (memory traffic) feed the clock;
    `phase` (forward/backward/wgrad/optimizer/other) colours the timeline."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: float = 0.0
    nbytes: int = 0
    attrs: dict[str, Any] = field(default_factory=dict, compare=False)
    phase: str = "forward"
    microbatch: int | None = None
    label: str = ""

    def touches(self) -> tuple[str, ...]:
        return self.inputs + self.outputs

    def __repr__(self) -> str:
        name = self.label or self.op
        mb = f" mb{self.microbatch}" if self.microbatch is not None else ""
        return f"Compute({name}{mb}: {', '.join(self.inputs)} -> {', '.join(self.outputs)})"


class _PointToPoint:
    """What Send and Recv share: they touch one tensor and print their peer."""

    def touches(self) -> tuple[str, ...]:
        return (self.tensor,)

    def __repr__(self) -> str:
        peer = f"to {self.dst}" if isinstance(self, Send) else f"from {self.src}"
        return f"{type(self).__name__}({self.tensor} {peer}{', tag ' + self.tag if self.tag else ''})"


@dataclass(frozen=True, repr=False)
class Send(_PointToPoint):
    tensor: str
    dst: int
    tag: str = ""
    nbytes: int = 0
    microbatch: int | None = None


@dataclass(frozen=True, repr=False)
class Recv(_PointToPoint):
    tensor: str
    src: int
    tag: str = ""
    nbytes: int = 0
    microbatch: int | None = None


@dataclass(frozen=True)
class Collective:
    """`out` = collective `kind` of `tensor` over the ranks of `group` (in group order).

    all_gather concatenates the members' tensors along `axis`; reduce_scatter reduces then keeps
    this member's part of `axis` (np.array_split convention); all_to_all splits along `axis` and
    concatenates what it receives along `axis` in member order; broadcast/reduce use `root`
    (a global rank). `nbytes` is the size of this member's input. `counts` (reduce_scatter of a
    flat tensor only): the element count each member keeps, in group order, instead of the
    np.array_split parts (MPI_Reduce_scatter's recvcounts; a coalesced reduce-scatter of several
    tensors, each split over the group on its own, `parallel/zero.py`)."""

    kind: str
    tensor: str
    out: str
    group: tuple[int, ...]
    algo: str | None = None  # None: the default algorithm of the kind
    op: str = "sum"
    root: int | None = None
    axis: int = 0
    nbytes: int = 0
    blocking: bool = True
    tag: str = ""
    microbatch: int | None = None
    phase: str = "comm"
    counts: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.kind not in COLLECTIVE_KINDS:
            raise ProgramError(f"unknown collective {self.kind!r}; known: {', '.join(COLLECTIVE_KINDS)}")
        if len(self.group) > 1 and len(set(self.group)) != len(self.group):
            raise ProgramError(f"collective group {self.group} names a rank twice")
        if self.counts is not None and (self.kind != "reduce_scatter" or self.axis is not None
                                        or len(self.counts) != len(self.group) or min(self.counts) < 0):
            raise ProgramError(f"counts {list(self.counts)} need a flat reduce_scatter (axis None) and one count "
                               f">= 0 per member of {list(self.group)}; got {self.kind} axis {self.axis}")

    def touches(self) -> tuple[str, ...]:
        return (self.tensor, self.out)

    @property
    def label(self) -> str:
        """Its trace event's name: kind and tensor, and the tag of a collective that stands for a
        real group (scale programs: "dp", "cp", ...), which its tensor does not name."""
        return f"{self.kind} {self.tensor} [{self.tag}]" if self.tag else f"{self.kind} {self.tensor}"

    def signature(self) -> tuple:
        return (self.kind, self.algo, self.op, self.root, self.axis, self.tag, self.counts)

    def __repr__(self) -> str:
        return f"Collective({self.kind}/{self.algo or 'default'} {self.tensor} -> {self.out} over {list(self.group)})"


@dataclass(frozen=True)
class Free:
    tensors: tuple[str, ...]

    def touches(self) -> tuple[str, ...]:
        return self.tensors

    def __repr__(self) -> str:
        return f"Free({', '.join(self.tensors)})"


Instr = Union[Compute, Send, Recv, Collective, Free]


class Event(NamedTuple):
    """One step of the walk. kind: local | send | recv | collective.
    `at` = ((rank, index),) for local and send; ((dst, recv_index), (src, send_index)) for recv;
    one (rank, index) per member in group order for a collective. (A NamedTuple: walks of
    million-instruction programs build one per instruction.)"""

    kind: str
    at: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Program:
    n_devices: int
    code: tuple[tuple[Instr, ...], ...]
    name: str = ""

    def __post_init__(self):
        if len(self.code) != self.n_devices:
            raise ProgramError(f"program has {len(self.code)} instruction lists for {self.n_devices} devices")

    def describe(self, rank: int, index: int) -> str:
        return f"device {rank} instruction #{index} {self.code[rank][index]!r}"

    def __len__(self) -> int:
        return sum(len(c) for c in self.code)

    @cached_property
    def events(self) -> tuple[Event, ...]:
        with no_gc():
            return tuple(_walk(self))

    def walk(self) -> tuple[Event, ...]:
        """The validated global order of events (raises ProgramError if the program cannot finish)."""
        return self.events

    def validate(self) -> "Program":
        self.walk()
        return self


@contextmanager
def no_gc():
    """Pause the cyclic garbage collector: a walk allocates one small tuple per instruction and
    holds them all, which makes CPython's generational collector rescan the growing heap over and
    over (half the time of a million-instruction walk). Nothing here creates cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _walk(prog: Program) -> list[Event]:
    return _Walk(prog).run()


_new_event = tuple.__new__     # Event(kind, at) without the NamedTuple's Python-level __new__


class _Walk:
    """Runs each device until it blocks (on a Recv whose Send is not posted, on a collective not all
    members have reached, on a tensor an open non-blocking collective touches), then the devices
    it unblocked; the events come out in that order."""

    def __init__(self, prog: Program):
        n = self.n = prog.n_devices
        self.prog, self.code = prog, prog.code
        self.pcs = [0] * n
        self.events: list[Event] = []
        self.mailbox: dict[tuple, deque] = defaultdict(deque)  # (src, dst, tag) -> Send positions
        self.waiting_recv: dict[tuple, int] = {}
        self.posted: dict[tuple, dict[int, int]] = defaultdict(dict)  # (group, seq) -> {rank: index}
        self.seq: dict[tuple, int] = defaultdict(int)  # (rank, group) -> collectives issued so far
        self.pending: list[dict[str, tuple]] = [dict() for _ in range(n)]  # rank -> tensor -> open collective
        self.waiters: dict[tuple, set[int]] = defaultdict(set)  # open collective -> ranks waiting on it
        self.queue = deque(range(n))

    def run(self) -> list[Event]:
        queue, advance = self.queue, self.advance
        while queue:
            advance(queue.popleft())
        self.check_finished()
        return self.events

    def advance(self, r: int) -> None:
        """Run device r from its program counter until it blocks or ends."""
        rcode, pend, n = self.code[r], self.pending[r], self.n
        add, mailbox, waiting_recv = self.events.append, self.mailbox, self.waiting_recv
        pc, end = self.pcs[r], len(rcode)
        while pc < end:
            ins = rcode[pc]
            kind = type(ins)
            if pend and self.blocked(r, ins):
                break
            if kind is Compute or kind is Free:
                add(_new_event(Event, ("local", ((r, pc),))))
            elif kind is Send:
                dst = ins.dst
                if not 0 <= dst < n:     # to itself: a scale program's symmetric neighbour (`cost.scale_cp`)
                    raise ProgramError(f"{self.prog.describe(r, pc)} sends to invalid device {dst}")
                key = (r, dst, ins.tag)
                add(_new_event(Event, ("send", ((r, pc),))))
                mailbox[key].append((r, pc))
                if key in waiting_recv:
                    self.queue.append(waiting_recv.pop(key))
            elif kind is Recv:
                key = (ins.src, r, ins.tag)
                box = mailbox.get(key)
                if not box:
                    waiting_recv[key] = r
                    break
                add(_new_event(Event, ("recv", ((r, pc), box.popleft()))))
            elif kind is Collective:
                if not self.collective(r, pc, ins):
                    pc += 1     # r waits for the others past its collective
                    break
            else:
                raise ProgramError(f"device {r} instruction #{pc} is not an instruction: {ins!r}")
            pc += 1
        self.pcs[r] = pc

    def blocked(self, r: int, ins) -> bool:
        """Does `ins` touch a tensor of an open non-blocking collective? Then r waits for it."""
        pend = self.pending[r]
        for t in ins.touches():
            if t in pend:
                self.waiters[pend[t]].add(r)
                return True
        return False

    def collective(self, r: int, pc: int, ins: Collective) -> bool:
        """Post r's collective at pc; False if r must wait (pc is then past it: r resumes after it)."""
        group = ins.group
        if len(group) == 1:     # nobody to meet: it completes at once
            if group[0] != r:
                raise ProgramError(f"{self.prog.describe(r, pc)} is issued by a device outside its group")
            self.events.append(_new_event(Event, ("collective", ((r, pc),))))
            return True
        if r not in group:
            raise ProgramError(f"{self.prog.describe(r, pc)} is issued by a device outside its group")
        ckey = (group, self.seq[(r, group)])
        self.seq[(r, group)] += 1
        members = self.posted[ckey]
        if members:
            r0, i0 = next(iter(members.items()))
            if self.code[r0][i0].signature() != ins.signature():
                raise ProgramError(f"mismatched collectives: {self.prog.describe(r0, i0)} meets "
                                   f"{self.prog.describe(r, pc)}")
        members[r] = pc
        if len(members) == len(group):
            self.pcs[r] = pc + 1
            self.complete(ckey)
            return True
        if ins.blocking:
            self.waiters[ckey].add(r)
            return False
        self.pending[r][ins.tensor] = ckey
        self.pending[r][ins.out] = ckey
        return True

    def complete(self, ckey: tuple) -> None:
        members = self.posted.pop(ckey)
        group = ckey[0]
        self.events.append(_new_event(Event, ("collective", tuple((r, members[r]) for r in group))))
        for r in group:
            pend = self.pending[r]
            if pend:
                for t in [t for t, k in pend.items() if k == ckey]:
                    del pend[t]
        self.queue.extend(self.waiters.pop(ckey, ()))

    def check_finished(self) -> None:
        """A device left before its end, or a Send nobody receives: name them."""
        prog, code, pcs = self.prog, self.code, self.pcs
        # a collective that some members never issue leaves the others waiting on it
        in_collective: dict[int, list[str]] = defaultdict(list)
        for (group, _), members in self.posted.items():
            missing = [m for m in group if m not in members]
            for r, i in members.items():
                in_collective[r].append(f"{prog.describe(r, i)} waits for device(s) {missing}, which never reach it")
        stuck = sorted({r for r in range(self.n) if pcs[r] < len(code[r]) or self.pending[r]} | set(in_collective))
        if stuck:
            waits = "; ".join("; ".join(in_collective[r]) if r in in_collective else
                              prog.describe(r, min(pcs[r], len(code[r]) - 1)) + " waits" for r in stuck)
            raise ProgramError(f"deadlock: {len(stuck)} device(s) can never finish: {waits}")
        unreceived = [pos for q in self.mailbox.values() for pos in q]
        if unreceived:
            r, i = unreceived[0]
            raise ProgramError(f"{prog.describe(r, i)} is never received ({len(unreceived)} unmatched send(s))")


class ProgramBuilder:
    """Collects per-device instruction lists; `send` adds the Send and its Recv together."""

    def __init__(self, n_devices: int, name: str = ""):
        self.n_devices, self.name = n_devices, name
        self.code: list[list[Instr]] = [[] for _ in range(n_devices)]

    def add(self, rank: int, ins: Instr) -> None:
        self.code[rank].append(ins)

    def compute(self, rank: int, op: str, inputs, outputs, **kw) -> None:
        self.add(rank, Compute(op, tuple(inputs), tuple(outputs), **kw))

    def send(self, src: int, dst: int, tensor: str, dst_tensor: str | None = None, tag: str = "",
             nbytes: int = 0, microbatch: int | None = None) -> None:
        self.add(src, Send(tensor, dst, tag, nbytes, microbatch))
        self.add(dst, Recv(dst_tensor or tensor, src, tag, nbytes, microbatch))

    def collective(self, kind: str, group, tensor: str, out: str | None = None, **kw) -> None:
        group = tuple(group)
        for r in group:
            self.add(r, Collective(kind, tensor, out or tensor, group, **kw))

    def free(self, rank: int, *tensors: str) -> None:
        self.add(rank, Free(tuple(tensors)))

    def build(self) -> Program:
        return Program(self.n_devices, tuple(tuple(c) for c in self.code), self.name)
