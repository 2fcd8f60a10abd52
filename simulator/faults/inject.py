"""Fault injection on the real runtimes: what goes wrong, where, and when.

A `Fault` names a device, a training step and (optionally) an instruction index of that device's
instruction list. Kinds:

    kill   the device dies. At an instruction: it stops there (the failure names the instruction),
           then the driver really kills it (LocalRuntime: the device refuses every call;
           RayRuntime: `ray.kill` of its actor). Without an instruction: it is killed before the
           step starts, and the step's first call to it detects the death (RayActorError on Ray).
    fail   the device raises at the instruction and stays failed (a crash that leaves the
           process up); recovery restarts it like a killed one.
    slow   a straggler: the device sleeps `delay_s` before the instruction (default: its first
           Compute). Wall time shows it; the simulated trace shows that instruction lengthened.
    drop   the message of a Send (default: the device's first Send) is lost; its receiver
           reports a receive timeout naming both ends.

CLI form (`parasim train --fail ...`): `[KIND:]DEVICE@STEP[#INSTRUCTION]`, comma separated, e.g.
`1@2` (kill device 1 before step 2), `kill:3@1#40`, `slow:0@0`, `drop:2@1`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..program import Compute, Program, Send
from ..runtime.faulty import FAULT_KINDS

DEFAULT_SLOW_S = 0.05
_SPEC = re.compile(r"^(?:(?P<kind>[a-z]+):)?(?P<dev>\d+)@(?P<step>\d+)(?:#(?P<ins>\d+))?$")


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` on `device` during `step` at instruction index `instruction` (None: the
    kind's default place). delay_s: how long a slow device sleeps."""

    device: int
    step: int
    kind: str = "kill"
    instruction: int | None = None
    delay_s: float = DEFAULT_SLOW_S

    def __post_init__(self):
        if self.kind not in FAULT_KINDS:
            raise ParasimError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")
        for name in ("device", "step"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 0:
                raise ParasimError(f"fault {name} must be an integer >= 0, got {v!r}")
        if self.instruction is not None and (not isinstance(self.instruction, (int, np.integer))
                                             or self.instruction < 0):
            raise ParasimError(f"fault instruction must be an index >= 0, got {self.instruction!r}")
        if not self.delay_s >= 0:
            raise ParasimError(f"a slow device's delay must be >= 0 s, got {self.delay_s}")

    def check(self, program: Program, steps: int) -> "Fault":
        """Refuse a fault that can never fire: no such device, step or instruction."""
        if self.device >= program.n_devices:
            raise ParasimError(f"fault {self!r}: device {self.device} does not exist "
                               f"(the program runs on {program.n_devices} devices)")
        if self.step >= steps:
            raise ParasimError(f"fault {self!r}: step {self.step} is never run (training runs {steps} steps)")
        n = len(program.code[self.device])
        if self.instruction is not None and self.instruction >= n:
            raise ParasimError(f"fault {self!r}: device {self.device} has {n} instructions "
                               f"(indices 0..{n - 1}), not #{self.instruction}")
        self.where(program)
        return self

    def where(self, program: Program) -> int | None:
        """The instruction index the fault fires at (None: a kill before the step)."""
        code = program.code[self.device]
        if self.instruction is not None:
            if self.kind == "drop" and not isinstance(code[self.instruction], Send):
                raise ParasimError(f"fault {self!r}: only a Send can be dropped; device {self.device} "
                                   f"instruction #{self.instruction} is {code[self.instruction]!r}")
            return self.instruction
        if self.kind == "kill":
            return None
        want = {"drop": Send, "slow": Compute}.get(self.kind)
        for i, ins in enumerate(code):
            if want is None or isinstance(ins, want):
                return i
        raise ParasimError(f"fault {self!r}: device {self.device} has no "
                           f"{'Send' if self.kind == 'drop' else 'instruction'} to {self.kind}")

    @property
    def is_failure(self) -> bool:
        """Does this fault stop training until recovery (a slow device does not)?"""
        return self.kind != "slow"

    def __repr__(self) -> str:
        at = f"#{self.instruction}" if self.instruction is not None else ""
        extra = f", {self.delay_s:g} s" if self.kind == "slow" else ""
        return f"{self.kind}:{self.device}@{self.step}{at}{extra}"


def parse_faults(text: str | None, kind: str = "kill") -> tuple[Fault, ...]:
    """'1@2,slow:0@1#5' -> (Fault(1, 2), Fault(0, 1, 'slow', 5)). Empty or None: no faults."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        m = _SPEC.match(part)
        if not m:
            raise ParasimError(f"bad fault {part!r}: expected [KIND:]DEVICE@STEP[#INSTRUCTION], "
                               f"e.g. 1@2 or slow:0@1#5 (kinds: {', '.join(FAULT_KINDS)})")
        ins = m.group("ins")
        out.append(Fault(int(m.group("dev")), int(m.group("step")), m.group("kind") or kind,
                         None if ins is None else int(ins)))
    return tuple(out)


def random_faults(seed: int, n_faults: int, program: Program, steps: int,
                  kinds: tuple[str, ...] = ("kill",)) -> tuple[Fault, ...]:
    """n_faults faults at random (device, step, instruction), reproducible from `seed`.
    At most one per step, so every fault fires (a step that fails is retried without it)."""
    if isinstance(seed, bool) or int(seed) != seed or not 0 <= seed < 2**32:
        raise ParasimError(f"the fault seed must be an integer in [0, 2^32), got {seed}")
    if n_faults > steps:
        raise ParasimError(f"{n_faults} random faults need at least as many steps, got {steps}")
    rng = np.random.default_rng(seed)
    out = []
    for step in sorted(rng.choice(steps, size=n_faults, replace=False)):
        kind = str(kinds[int(rng.integers(len(kinds)))])
        dev = int(rng.integers(program.n_devices))
        code = program.code[dev]
        choices = [i for i, ins in enumerate(code) if kind != "drop" or isinstance(ins, Send)]
        if not choices:
            kind, choices = "kill", list(range(len(code)))
        out.append(Fault(dev, int(step), kind, int(choices[int(rng.integers(len(choices)))])))
    return tuple(out)


def arm(runtime, fault: Fault, program: Program) -> str:
    """Set `fault` up on `runtime` for the step about to run; returns a one-line description.
    The runtime's devices must be FaultyDevices for slow and drop (see runtime/faulty.py)."""
    index = fault.where(program)
    if index is None:  # kill before the step: a real kill, detected by the step's first call
        runtime.kill(fault.device, reason=f"killed before step {fault.step}")
        return f"killed device {fault.device} before step {fault.step}"
    reason = {"kill": "killed", "fail": "crashed", "slow": "slowed", "drop": "message dropped"}[fault.kind]
    reason = f"{reason} by injection at step {fault.step}"
    runtime._wait([runtime._call(fault.device, "inject_failure",
                                 (index, reason, fault.kind, fault.delay_s), 0)[1]])
    return f"{fault.kind} on {program.describe(fault.device, index)} at step {fault.step}"
