"""The runtime interface and the ONE driver loop both runtimes share.

The driver interprets `program.walk()` (the validated, deadlock-free global order of events):
- consecutive local instructions, Sends and Recvs of a device are batched into one device call
  (a batch is submitted when another device needs one of its Sends, when the device joins a
  collective, or at the end);
- each Collective is lowered to its plan (`make_plan`) and run step by step: for step s, one call
  per participating member that applies the chunks it received in step s-1 and returns the
  chunks it sends in step s. Chunk handles go straight from one call to the next.
A runtime only says how a call is made (`_call`) and how the results are awaited once at the end
(`_wait`): LocalRuntime calls Device methods directly; RayRuntime submits them to actors and
passes the returned ObjectRefs as top-level arguments (Ray resolves them actor to actor).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping

from ..collectives.algorithms import input_to_plan_nbytes, make_plan
from ..collectives.plan import Plan
from ..errors import ProgramError
from ..ops import get_kernel
from ..program import Collective, Compute, Event, Program, Send
from .device import CollectiveCall

DEVICE_METHODS = ("run_batch", "collective_step", "load", "clear", "fetch", "report", "reset_counters",
                  "inject_failure", "register_kernels")


@dataclass(frozen=True)
class RunResult:
    """What a real run measured. memory[rank][instruction index] = {category: bytes} after it."""

    wall_time_s: float
    memory: tuple[dict[int, dict[str, int]], ...]
    bytes_sent: tuple[int, ...]
    messages_sent: tuple[int, ...]
    calls: int  # device calls the driver made

    def to_dict(self) -> dict:
        """Plain data: wall time, bytes and messages per rank, driver calls, and the memory samples
        as [rank][{index, bytes by category}] (JSON keys are strings; dataclasses.asdict also works)."""
        return {"wall_time_s": self.wall_time_s, "bytes_sent": list(self.bytes_sent),
                "messages_sent": list(self.messages_sent), "calls": self.calls,
                "memory": [[{"index": i, **b} for i, b in sorted(m.items())] for m in self.memory]}

    def memory_by_instruction(self) -> dict[tuple[int, int], dict[str, int]]:
        """{(rank, index): bytes by category}: the form `cost.clock.simulate(memory=...)` takes."""
        return {(r, i): b for r, samples in enumerate(self.memory) for i, b in samples.items()}

    def peak_bytes(self) -> list[int]:
        return [max((sum(b.values()) for b in s.values()), default=0) for s in self.memory]

    def __repr__(self) -> str:
        return (f"RunResult({len(self.memory)} devices, wall {self.wall_time_s:.4g} s, "
                f"{sum(self.bytes_sent)} B sent, {self.calls} calls)")


class _Lowered:
    """A plan with, per step and member, the positions of the transfers it sends and receives."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.sends = [[[k for k, t in enumerate(st.transfers) if t.src == g] for g in range(plan.n)]
                      for st in plan.steps]
        self.recvs = [[[k for k, t in enumerate(st.transfers) if t.dst == g] for g in range(plan.n)]
                      for st in plan.steps]


class Runtime(ABC):
    """n_devices emulated devices. load -> run(program) -> fetch; close when done."""

    name = "abstract"
    forward_by_handle = True  # a chunk a member only passes on is handed on by its handle (see _collective)

    def __init__(self, n_devices: int):
        if int(n_devices) != n_devices or n_devices < 1:
            raise ProgramError(f"a runtime needs at least 1 device, got {n_devices}")
        self.n_devices = int(n_devices)
        self._plans: dict[tuple, _Lowered] = {}
        self._keys = 0
        self._kernels_on: list[set[str]] = [set() for _ in range(self.n_devices)]  # rank -> kernels it has

    # ---- how a call is made: the only part the runtimes implement ------------------------------
    @abstractmethod
    def _call(self, rank: int, method: str, args: tuple, n_out: int) -> tuple[list, Any]:
        """Start device `rank`'s `method(*args)`; return (handles of its n_out results, a handle
        that completes when the call has run)."""

    @abstractmethod
    def _wait(self, handles: list) -> list:
        """The values of the handles (raises the first failure)."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the public interface ----------------------------------------------------------------
    def load(self, arrays: Mapping[int, Mapping[str, Any]]) -> None:
        """arrays[rank] = {name: array}: place tensors on devices (added to what they hold)."""
        acks = []
        for rank, tensors in dict(arrays).items():
            self._check_rank(rank)
            acks.append(self._call(rank, "load", (dict(tensors),), 0)[1])
        self._wait(acks)

    def fetch(self, rank: int, names) -> dict:
        self._check_rank(rank)
        outs, ack = self._call(rank, "fetch", (list(names),), 1)
        return self._wait(outs + [ack])[0]

    def clear(self) -> None:
        """Drop every tensor on every device."""
        self._wait([self._call(r, "clear", (), 0)[1] for r in range(self.n_devices)])

    def inject_failure(self, rank: int, index: int, reason: str = "injected failure") -> None:
        self._check_rank(rank)
        self._wait([self._call(rank, "inject_failure", (index, reason), 0)[1]])

    def run(self, program: Program) -> RunResult:
        if program.n_devices != self.n_devices:
            raise ProgramError(f"program for {program.n_devices} devices given to a runtime of {self.n_devices}")
        events = program.walk()  # a program that cannot finish is refused here, before any call
        start = time.perf_counter()
        try:
            self._ship_kernels(program)
            return self._drive(program, events, start)
        except BaseException:
            # a failed run leaves partial counters: restart them (the report of a run resets them)
            try:
                self._wait([self._call(r, "reset_counters", (), 0)[1] for r in range(self.n_devices)])
            except Exception:
                pass
            raise

    def _ship_kernels(self, program: Program) -> None:
        """Give each device the kernels of its Compute instructions it does not have yet (an
        unknown kernel is refused here, in the driver, before any device runs)."""
        acks = []
        for rank, code in enumerate(program.code):
            new: dict = {}
            for index, ins in enumerate(code):
                if isinstance(ins, Compute) and ins.op not in self._kernels_on[rank] and ins.op not in new:
                    try:
                        new[ins.op] = get_kernel(ins.op)
                    except ProgramError as e:
                        raise ProgramError(f"{program.describe(rank, index)}: {e}") from None
            if new:
                acks.append(self._call(rank, "register_kernels", (new,), 0)[1])
                self._kernels_on[rank] |= set(new)
        self._wait(acks)

    def _drive(self, program: Program, events, start: float) -> RunResult:
        calls = 0
        acks: list = []
        batch: list[list] = [[] for _ in range(self.n_devices)]  # rank -> [(index, instr)]
        inbox: list[list] = [[] for _ in range(self.n_devices)]  # rank -> handles for its Recvs
        sent: dict[tuple[int, int], Any] = {}  # (rank, Send index) -> handle of the value

        def call(rank, method, args, n_out):
            nonlocal calls
            calls += 1
            outs, ack = self._call(rank, method, args, n_out)
            acks.append(ack)
            return outs

        def flush(rank: int) -> None:
            if batch[rank]:
                items = tuple(batch[rank])
                send_at = [i for i, ins in items if isinstance(ins, Send)]
                outs = call(rank, "run_batch", (items, *inbox[rank]), len(send_at))
                sent.update({(rank, i): h for i, h in zip(send_at, outs)})
                batch[rank], inbox[rank] = [], []

        for ev in events:
            if ev.kind in ("local", "send"):
                r, i = ev.at[0]
                batch[r].append((i, program.code[r][i]))
            elif ev.kind == "recv":
                (dst, j), src_at = ev.at
                if src_at not in sent:
                    flush(src_at[0])
                batch[dst].append((j, program.code[dst][j]))
                inbox[dst].append(sent.pop(src_at))
            else:
                for r, _ in ev.at:
                    flush(r)
                self._collective(program, ev, call)
        for r in range(self.n_devices):
            flush(r)
        reports = [call(r, "report", (), 1)[0] for r in range(self.n_devices)]
        values = self._wait(acks + reports)[-self.n_devices:]
        return RunResult(time.perf_counter() - start, tuple(v["memory"] for v in values),
                         tuple(v["bytes_sent"] for v in values), tuple(v["messages_sent"] for v in values), calls)

    # ---- collectives ---------------------------------------------------------------------------
    def lower(self, ins: Collective) -> tuple[Plan, int]:
        """The plan a collective instruction runs, and its group-local root."""
        n = len(ins.group)
        root = ins.group[0] if ins.root is None else ins.root
        if root not in ins.group:
            raise ProgramError(f"{ins!r} has root {root}, which is not in its group {list(ins.group)}")
        groot = ins.group.index(root)
        key = (ins.kind, ins.algo, n, ins.nbytes, groot)
        if key not in self._plans:
            nbytes = input_to_plan_nbytes(ins.kind, n, ins.nbytes)
            self._plans[key] = _Lowered(make_plan(ins.kind, ins.algo, n, nbytes, root=groot))
        return self._plans[key].plan, groot

    def _start_collective(self, program: Program, ev: Event) -> tuple[_Lowered, int, int]:
        """A collective event's lowered plan, group-local root and a new key naming it on its devices."""
        first = program.code[ev.at[0][0]][ev.at[0][1]]
        plan, groot = self.lower(first)
        self._keys += 1
        return self._plans[(first.kind, first.algo, plan.n, first.nbytes, groot)], groot, self._keys

    def _collective(self, program: Program, ev: Event, call) -> None:
        """Run one collective step by step. A chunk a member only passes on (it arrived by a plain
        copy and has not been reduced into since) is forwarded by its handle: the member is not
        asked to return it again (it still counts the bytes), so Ray ships each such chunk once."""
        members = ev.at  # ((rank, index), ...) in group order
        low, groot, key = self._start_collective(program, ev)
        plan = low.plan
        n_steps = len(plan.steps)
        chunks: dict[int, Any] = {}  # position in the previous step -> handle
        fresh: dict[tuple[int, int], Any] = {}  # (member, slot) -> handle of the copy it holds
        for s in range(n_steps + 1):
            prev = plan.steps[s - 1].transfers if s else ()
            cur = plan.steps[s].transfers if s < n_steps else ()
            produced: dict[int, Any] = {}
            for g, (r, i) in enumerate(members):
                recv_at = low.recvs[s - 1][g] if s else []
                send_at = low.sends[s][g] if s < n_steps else []
                fwd_at = [k for k in send_at if self.forward_by_handle and (g, cur[k].src_chunk) in fresh]
                ret_at = [k for k in send_at if k not in fwd_at]
                produced.update((k, fresh[(g, cur[k].src_chunk)]) for k in fwd_at)
                if not (recv_at or send_at or s == 0 or s == n_steps):
                    continue
                spec = CollectiveCall(key, i, program.code[r][i], plan.n, g, groot, plan.n_chunks,
                                      tuple(prev[k] for k in recv_at), tuple(cur[k] for k in ret_at),
                                      s == 0, s == n_steps, tuple(cur[k] for k in fwd_at))
                outs = call(r, "collective_step", (spec, *(chunks[k] for k in recv_at)), len(ret_at))
                produced.update(zip(ret_at, outs))
            for k, t in enumerate(cur):  # the slots this step writes, once every source was read
                if t.reduce:
                    fresh.pop((t.dst, t.dst_chunk), None)
                else:
                    fresh[(t.dst, t.dst_chunk)] = produced[k]
            chunks = produced

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.n_devices:
            raise ProgramError(f"device {rank} does not exist in a runtime of {self.n_devices} devices")

