"""FaultyDevice: a Device whose injected faults come in kinds (the fault-tolerance hooks).

`Device.inject_failure(index, reason)` makes a device stop at an instruction. The fault-tolerance
layer (simulator/faults/) needs three more behaviours, added here without touching Device:

    fail   the device raises DeviceFailure at the instruction and stays failed (a crash)
    kill   the same, marked so the driver then really kills the device (ray.kill of its actor)
    slow   the device sleeps `delay_s` before the instruction (a straggler: visible in wall time)
    drop   a Send's message is lost: the receiver's Recv raises DeviceFailure, as a receive
           that times out would (the sender carries on; nobody is dead)

`report()` also says whether the device has failed and which optimizer step it holds, so a
driver can tell live, consistent devices from dead or half-updated ones after a failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceFailure
from ..program import Compute, Free, Recv, Send
from .device import Device

FAULT_KINDS = ("fail", "kill", "slow", "drop")


@dataclass(frozen=True)
class Dropped:
    """What a receiver gets in place of a dropped message."""

    src: int
    index: int  # the Send's instruction index on src


class FaultyDevice(Device):
    def __init__(self, rank: int):
        super().__init__(rank)
        self.kinds: dict[int, tuple[str, float]] = {}  # instruction index -> (kind, delay_s)
        self.open_ins: dict[int, object] = {}  # collective key -> its instruction, until its last step
        self.slowed_s = 0.0

    def inject_failure(self, index: int, reason: str = "injected failure", kind: str = "fail",
                       delay_s: float = 0.0) -> list:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        self.kinds[int(index)] = (kind, float(delay_s))
        if kind in ("fail", "kill"):
            return super().inject_failure(index, reason)
        return []

    def clear(self) -> list:
        """Also forget faults not yet reached: a fault fires once, in the attempt it was armed for."""
        self.faults.clear()
        self.kinds.clear()
        self.open_ins.clear()
        self.aborted = None
        return super().clear()

    def _check_fault(self, index: int, ins) -> None:
        kind, delay = self.kinds.pop(index, ("", 0.0)) if self.failed is None else ("", 0.0)
        if kind == "slow":
            time.sleep(delay)
            self.slowed_s += delay
        super()._check_fault(index, ins)

    def reset_counters(self) -> list:
        self.aborted = None  # a new step: nothing failed yet
        return super().reset_counters()

    def _check_aborted(self, where: str) -> None:
        if self.aborted is not None:
            raise DeviceFailure(self.rank, where, f"aborted: this device failed earlier in the step ({self.aborted})")

    def collective_step(self, call, *chunks) -> list:
        self._check_aborted(f"instruction #{call.index} {call.ins!r}")
        if call.first:
            self.open_ins[call.key] = call.ins
        out = super().collective_step(call, *chunks)
        if call.last:
            self.open_ins.pop(call.key, None)
        return out

    def _precheck(self, items: tuple) -> None:
        """Run a batch all or nothing: refuse it before any instruction if one would read a tensor
        the device lacks or one an unfinished collective still owns (a peer failed mid-step, e.g.
        on Ray the calls depending on a dead actor never ran). So a survivor never half-updates."""
        held = set(self.tensors)
        for ins in self.open_ins.values():
            held -= {ins.tensor, ins.out}
        for index, ins in items:
            if isinstance(ins, Compute):
                missing = [x for x in ins.inputs if x not in held]
                if missing:
                    self.aborted = f"input {missing[0]} missing"
                    raise DeviceFailure(self.rank, f"instruction #{index} {ins!r}",
                                        f"aborted before the batch: input {missing[0]} was never produced "
                                        f"(a peer failed earlier in the step)")
                held |= set(ins.outputs)
            elif isinstance(ins, Recv):
                held.add(ins.tensor)
            elif isinstance(ins, Free):
                held -= set(ins.tensors)

    def run_batch(self, items: tuple, *received) -> list:
        """As Device.run_batch, with dropped Sends replaced by `Dropped` and Recvs checking for it."""
        if self.failed is None and items:
            self._check_aborted(f"instruction #{items[0][0]} {items[0][1]!r}")
            self._precheck(items)
        for k, (index, ins) in enumerate(items):
            if isinstance(ins, Recv):
                n_before = sum(isinstance(x, Recv) for _, x in items[:k])
                value = received[n_before] if n_before < len(received) else None
                if isinstance(value, Dropped):
                    super().run_batch(items[:k], *received[:n_before])  # what ran before the receive
                    self.aborted = f"receive #{index} timed out"
                    raise DeviceFailure(self.rank, f"instruction #{index} {ins!r}",
                                        f"receive timed out: the message of device {value.src} "
                                        f"(its instruction #{value.index}) was dropped")
        dropped = {i for i, ins in items if isinstance(ins, Send) and self.kinds.get(i, ("",))[0] == "drop"}
        sent = super().run_batch(items, *received)
        send_at = [i for i, ins in items if isinstance(ins, Send)]
        return [Dropped(self.rank, i) if i in dropped else v for i, v in zip(send_at, sent)]

    def report(self) -> list:
        out = super().report()[0]
        step = self.tensors.get("opt/step")
        out.update(failed=None if self.failed is None else str(self.failed),
                   opt_step=None if step is None else int(np.asarray(step)), slowed_s=self.slowed_s)
        return [out]
