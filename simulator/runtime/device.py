"""One emulated device: named numpy tensors, the instructions it executes, what it holds and sends.

No Ray here: the local runtime calls these methods directly and the Ray runtime wraps the same
class in an actor. Every method is one "call" of the driver (simulator/runtime/base.py):
- `run_batch(items, *received)`: consecutive Compute / Free / Send / Recv of this device; Recvs
  take the received values in order, Sends return their tensor's value (the value at the Send).
- `collective_step(call, *chunks)`: this device's side of one step of a collective's plan:
  apply the chunks received in the previous step (copy or reduce), return the chunks it sends in
  this step (simulator/collectives/execute.py holds the shared step functions).
Memory is accounted per category from the tensor name prefix (param/, grad/, opt/, act/, else
other) and sampled after every instruction: {instruction index: {category: bytes}}.
Failure injection: `inject_failure(index, reason)` makes the device raise DeviceFailure when it
reaches that instruction (the hook the fault-tolerance module builds on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..collectives.execute import apply_incoming, join_output, outgoing, split_input
from ..collectives.plan import Transfer
from ..errors import DeviceFailure, ParasimError, ProgramError
from ..ops import register_kernels, run_kernel
from ..program import Collective, Compute, Free, Recv, Send
from ..units import nbytes_of
from .holdings import CATEGORIES, Holdings, category_of


@dataclass(frozen=True)
class CollectiveCall:
    """What the driver tells one member for one step: its instruction, its place in the group,
    the plan's slots, the transfers it receives (from the previous step) and sends (this step)."""

    key: int
    index: int  # instruction index on this device
    ins: Collective
    n: int
    grank: int
    groot: int
    n_chunks: int
    recvs: tuple[Transfer, ...]
    sends: tuple[Transfer, ...]
    first: bool
    last: bool
    forwards: tuple[Transfer, ...] = ()  # sends the driver forwards by handle: only count them


class Device:
    def __init__(self, rank: int):
        self.rank = rank
        self.tensors: Holdings = Holdings()   # with its bytes per category kept up to date
        self.faults: dict[int, str] = {}  # instruction index -> reason (failure injection)
        self._open: dict[int, list] = {}  # collective key -> slots
        self.failed: DeviceFailure | None = None  # a failed device refuses every later call
        self.reduce_into = None  # (a, b) -> a fresh array for a reduction's result, or None (a new one)
        self.reset_counters()

    # ---- bookkeeping --------------------------------------------------------------------------
    def reset_counters(self) -> list:
        self.memory: dict[int, dict[str, int]] = {}
        self.bytes_sent = 0
        self.messages_sent = 0
        return []

    def load(self, arrays: dict[str, Any]) -> list:
        for name, value in arrays.items():
            self.tensors[name] = np.asarray(value)
        return []

    def clear(self) -> list:
        """Drop every tensor (and revive a failed device, as a restart would)."""
        self.tensors.clear()
        self._open.clear()
        self.failed = None
        return []

    def fetch(self, names) -> list:
        missing = [n for n in names if n not in self.tensors]
        if missing:
            raise ParasimError(f"device {self.rank} holds no tensor {missing[0]!r}; "
                               f"it holds: {', '.join(sorted(self.tensors)) or 'nothing'}")
        return [{n: np.array(self.tensors[n], copy=True) for n in names}]

    def report(self) -> list:
        """What this run measured; the counters restart for the next run."""
        out = {"memory": self.memory, "bytes_sent": self.bytes_sent, "messages_sent": self.messages_sent}
        self.reset_counters()
        return [out]

    def register_kernels(self, kernels: dict) -> list:
        """Kernels by name from the driver (a device in another process has not imported them)."""
        register_kernels(kernels)
        return []

    def inject_failure(self, index: int, reason: str = "injected failure") -> list:
        self.faults[int(index)] = reason
        return []

    def bytes_by_category(self) -> dict[str, int]:
        """The definition of what the device holds: every tensor's bytes, by the category of its name."""
        out = dict.fromkeys(CATEGORIES, 0)
        for name, t in self.tensors.items():
            out[category_of(name)] += nbytes_of(t)
        return out

    def _sample(self, index: int) -> None:
        """After every instruction: the bytes per category, as `bytes_by_category` counts them, kept
        up to date by the holdings (`simulator.runtime.holdings`)."""
        self.memory[index] = dict(self.tensors.totals)

    def _get(self, index: int, ins, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise ProgramError(f"device {self.rank} instruction #{index} {ins!r} reads tensor {name!r}, "
                               f"which the device does not hold (it holds: {', '.join(sorted(self.tensors)) or 'nothing'})")
        return self.tensors[name]

    def _check_fault(self, index: int, ins) -> None:
        if self.failed is not None:
            raise self.failed
        if index in self.faults:
            self.failed = DeviceFailure(self.rank, f"instruction #{index} {ins!r}", self.faults.pop(index))
            raise self.failed

    # ---- local instructions, sends and receives -----------------------------------------------
    def run_batch(self, items: tuple, *received) -> list:
        """items: ((index, instruction), ...). Returns the values of the Sends, in order."""
        sent, inbox = [], list(received)
        if self.failed is not None:
            raise self.failed
        for index, ins in items:
            self._check_fault(index, ins)
            if isinstance(ins, Compute):
                args = [self._get(index, ins, x) for x in ins.inputs]
                try:
                    outs = run_kernel(ins.op, args, ins.attrs)
                except ParasimError as e:  # e.g. an unknown kernel: say where
                    raise ProgramError(f"device {self.rank} instruction #{index} {ins!r}: {e}") from e
                except Exception as e:  # a kernel's numpy error, named by device and instruction
                    raise ProgramError(f"device {self.rank} instruction #{index} {ins!r} failed: "
                                       f"{type(e).__name__}: {e}") from e
                if len(outs) != len(ins.outputs):
                    raise ProgramError(f"device {self.rank} instruction #{index} {ins!r}: kernel returned "
                                       f"{len(outs)} outputs for {len(ins.outputs)} names")
                for name, value in zip(ins.outputs, outs):
                    self.tensors[name] = value if isinstance(value, (tuple, list, dict)) else np.asarray(value)
            elif isinstance(ins, Free):
                for name in ins.tensors:
                    self._get(index, ins, name)
                    del self.tensors[name]
            elif isinstance(ins, Send):
                value = self._get(index, ins, ins.tensor)
                self.bytes_sent += nbytes_of(value)
                self.messages_sent += 1
                sent.append(value)
            elif isinstance(ins, Recv):
                if not inbox:
                    raise ProgramError(f"device {self.rank} instruction #{index} {ins!r} got no value")
                self.tensors[ins.tensor] = inbox.pop(0)
            else:
                raise ProgramError(f"device {self.rank} instruction #{index} is not a local instruction: {ins!r}")
            self._sample(index)
        return sent

    # ---- collectives ---------------------------------------------------------------------------
    def collective_step(self, call: CollectiveCall, *chunks) -> list:
        ins = call.ins
        self._check_fault(call.index, ins)
        if call.first:
            needs_input = ins.kind != "barrier" and not (ins.kind == "broadcast" and call.grank != call.groot)
            x = self._get(call.index, ins, ins.tensor) if needs_input else None
            axis = 0 if ins.kind == "broadcast" else ins.axis
            self._open[call.key] = split_input(ins.kind, call.n_chunks, call.n, call.grank, x, call.groot, axis,
                                                 ins.counts)
        slots = self._open[call.key]
        apply_incoming(slots, call.recvs, chunks, ins.op, self.reduce_into)
        out = outgoing(slots, call.sends)
        self.bytes_sent += sum(int(c.nbytes) for c in out)
        self.bytes_sent += sum(int(slots[t.src_chunk].nbytes) for t in call.forwards)
        self.messages_sent += len(out) + len(call.forwards)
        if call.last:
            del self._open[call.key]
            like = self.tensors.get(ins.tensor)
            result = join_output(ins.kind, call.n, call.grank, slots, ins.op, call.groot, ins.axis, like)
            if result is not None:
                self.tensors[ins.out] = result
            self._sample(call.index)
        return out
