"""Fault-tolerant training: detect a failed device, restart it, restore state, replay.

    result = train_resilient(cfg, faults=parse_faults("1@2"), checkpoint_every=2)

The step loop is `simulator.training`'s (load the batch, run the Program, read the loss, price the
step on the clock); this module supplies its hook (`Recovery`: checkpoints, injected faults, and
restart and restore after a failure):

1. Detection: the runtime raises DeviceFailure naming the device and the instruction (an
   injected fault; a dead Ray actor -> RayActorError; a bounded wait that ran out).
2. Restart: every device that is dead (its actor died, or it has failed) is replaced by a fresh
   one (LocalRuntime: a new Device; RayRuntime: a new actor).
3. Restore, cheapest first:
   a. from replicas: a failure before any device updated its weights (each device's
      `opt/step` still equals the step) leaves every rank's state on itself or on a surviving
      data-parallel peer (same pipeline stage and tensor rank, ZeRO off): copy it over and retry
      only the failed step (no completed step is lost);
   b. otherwise from the last checkpoint on disk (periodic, per shard, atomic: checkpoint.py):
      every device reloads its shards and the steps since then are replayed.
4. Replay: the same batches in the same order, so the final weights equal a fault-free run
   exactly (bit for bit) and the single-device reference within 1e-9.

On the timeline, events of a failed attempt (up to the failure on the simulated clock) get phase
"lost", a "failure" event marks the failed instruction, a "recovery" event the restore, and every
event of a replayed step carries attempt > 0 (Chrome export: args.replayed).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace

from ..cost.clock import DeviceModel
from ..errors import DeviceFailure, ParasimError
from ..parallel.config import TrainConfig
from ..parallel.strategies import compile_strategy
from ..program import Compute, Free
from ..trace import Trace, TraceEvent
from ..training import StepHook, TrainResult, clock_of, train_with
from .checkpoint import Checkpoint, check_checkpoint_dir, latest_checkpoint, restore, save_checkpoint
from .inject import Fault, arm
from .shards import state_shapes


@dataclass
class ResilientResult:
    """A TrainResult plus what went wrong and how it was repaired."""

    train: TrainResult
    faults_injected: int
    faults_recovered: int
    replayed_steps: int
    reports: list[str] = field(default_factory=list)  # one line per detected failure
    recoveries: list[dict] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)  # steps saved

    def to_dict(self) -> dict:
        return {**self.train.to_dict(), "faults_injected": self.faults_injected,
                "faults_recovered": self.faults_recovered, "replayed_steps": self.replayed_steps,
                "failures": self.reports, "recoveries": self.recoveries, "checkpoints": self.checkpoints}


class _Straggler:
    """A device model whose given Compute instructions last `delay_s` longer (a slowed device)."""

    def __init__(self, base, slowed: dict[int, float]):
        self.base, self.slowed = base, slowed  # id(instruction) -> extra seconds

    def compute_time_s(self, ins) -> float:
        return self.base.compute_time_s(ins) + self.slowed.get(id(ins), 0.0)

    def __getattr__(self, name):
        return getattr(self.base, name)


def peers(compiled, rank: int) -> list[int]:
    """Ranks holding the same state as `rank` (data-parallel replicas; none under ZeRO)."""
    mesh = compiled.mesh
    if mesh is None or compiled.config.zero_stage or "dp" not in mesh.axis_names:
        return []
    mine = compiled.initial[rank]
    layouts = compiled.notes.get("layouts") or {}  # blocks that differ along dp (experts under ep)
    shapes = state_shapes(compiled.config) if layouts else {}
    same_block = lambda r, n: n not in layouts or (  # noqa: E731
        layouts[n].block_slices(r, shapes[n]) == layouts[n].block_slices(rank, shapes[n]))
    out = []
    for g in mesh.groups("dp"):
        if rank in g:
            for r in g:
                other = compiled.initial[r]
                if r != rank and other.keys() == mine.keys() and all(
                        other[n].shape == mine[n].shape and same_block(r, n) for n in mine):
                    out.append(r)
    return out


def lost_events(trace: Trace, program, failure: DeviceFailure, attempt: int) -> list[TraceEvent]:
    """The simulated events of a failed attempt up to the failure, as phase 'lost', plus a
    'failure' event on the failed device at the instruction that failed."""
    rank, index = failure.rank, _index_of(failure.instruction)
    t_fail = trace.makespan_s
    if 0 <= rank < trace.n_devices and index is not None:
        own = sorted((e for e in trace.events if e.device == rank and e.kind != "recv"), key=lambda e: e.start_s)
        k = sum(1 for ins in program.code[rank][:index] if not isinstance(ins, Free))
        t_fail = own[k].start_s if k < len(own) else trace.makespan_s
    out = [replace(e, name=f"lost: {e.name}", phase="lost", duration_s=min(e.duration_s, t_fail - e.start_s),
                   attempt=attempt, flow=None)
           for e in trace.events if e.start_s < t_fail]
    mark = max(trace.makespan_s * 0.02, 1e-9)
    out.append(TraceEvent(max(rank, 0), "compute", f"FAILED: {failure}", t_fail, mark, "failure", "failure",
                          step=trace.events[0].step if trace.events else 0, attempt=attempt))
    return out


def _index_of(instruction: str) -> int | None:
    if "#" not in instruction:
        return None
    digits = instruction.split("#", 1)[1].split()[0]
    return int(digits) if digits.isdigit() else None


class Recovery(StepHook):
    """The hook fault tolerance puts around `simulator.training`'s step loop: checkpoints, injected
    faults, and after a failure: restart, restore, mark the timeline, replay."""

    def __init__(self, compiled, faults, root, checkpoint_every: int, replicas: bool, max_failures: int,
                 resume_from=None, before_step=None, keep_last: int | None = None, final_checkpoint: bool = False):
        self.compiled, self.faults, self.root = compiled, faults, root
        self.every, self.replicas, self.max_failures = checkpoint_every, replicas, max_failures
        self.resume_from, self.user_before_step, self.keep_last = resume_from, before_step, keep_last
        self.final_checkpoint = final_checkpoint
        self.reports, self.recoveries, self.saved = [], [], []
        self.fired: set[int] = set()
        self.injected = self.recovered = self.replayed = 0

    def _save(self, runtime, step: int) -> None:
        save_checkpoint(runtime, self.compiled, step, self.root, keep_last=self.keep_last)
        self.saved.append(step)

    def start(self, runtime) -> int:
        step = restore(runtime, self.compiled, self.resume_from) if self.resume_from is not None else 0
        if self.root is not None:
            self._save(runtime, step)
        return step

    def start_states(self) -> list | None:
        """The resumed checkpoint's optimizer state (what one device continues from)."""
        return None if self.resume_from is None else self.resume_from.optimizer_states()

    def before_step(self, step: int, attempt: int, runtime, device_model):
        """Fire the faults of this step (once each); a straggler slows its instruction on the clock."""
        program = self.compiled.program
        if self.user_before_step is not None and not attempt and self.user_before_step(step, runtime):
            self.injected += 1
        slowed = {}
        for k, f in enumerate(self.faults):
            if f.step == step and k not in self.fired:
                self.fired.add(k)
                self.injected += 1
                arm(runtime, f, program)
                if f.kind == "slow":
                    ins = program.code[f.device][f.where(program)]
                    if isinstance(ins, Compute):
                        slowed[id(ins)] = f.delay_s
        return _Straggler(device_model, slowed) if slowed else device_model

    def before_run(self, step: int, runtime) -> None:
        if self.root is not None and self.every and step % self.every == 0 and step not in self.saved:
            self._save(runtime, step)   # inside the attempt: a death here is a failure too

    def on_failure(self, step: int, failure: DeviceFailure, priced: Trace, log, runtime) -> int:
        if len(self.reports) >= self.max_failures:
            raise failure
        self.reports.append(f"step {step}: {failure}")
        program, n = self.compiled.program, len(log.sent)
        log.trace.append(Trace(n, lost_events(priced, program, failure, log.attempts[step]), name="lost"))
        t1 = time.perf_counter()
        try:
            back, how, restarted = _recover(runtime, self.compiled, step, self.root, self.replicas)
        except ParasimError as why:
            raise ParasimError(f"{failure}; {why}") from failure
        self.recovered += 1
        self.replayed += step - back + 1
        for s in range(back, step + 1):
            log.attempts[s] += 1
        self.recoveries.append({"step": step, "device": failure.rank, "restarted": restarted, "from": how,
                                "resume_step": back, "wall_time_s": time.perf_counter() - t1})
        mark = max(priced.makespan_s * 0.05, 1e-9)
        log.trace.append(Trace(n, [TraceEvent(
            r, "compute", (f"recovery: restart device(s) {restarted}, restore from {how} (step {back})" if restarted
                     else f"recovery: retry step {step} (no device lost its state)"), 0.0, mark,
            "recovery", "recovery", step=step, attempt=log.attempts[step]) for r in range(n)]))
        return back

    def finish(self, step: int, runtime) -> None:
        if self.final_checkpoint and step not in self.saved:  # the trained state too, as Megatron saves at the end
            self._save(runtime, step)


def train_resilient(cfg: TrainConfig, runtime=None, faults: tuple[Fault, ...] = (), checkpoint_every: int = 0,
                    checkpoint_dir=None, replicas: bool = True, device_model: DeviceModel | None = None,
                    max_failures: int = 20, check: bool = True, resume_from=None,
                    before_step=None, keep_last: int | None = None, hardware=None) -> ResilientResult:
    """Train like `simulator.training.train`, surviving the injected (and any real) device failures.
    resume_from: a checkpoint (any strategy and device count, same model) to continue from.
    before_step(step, runtime) -> bool: called once before each step's first attempt; True means
    it injected a fault of its own (e.g. removed a cluster node), counted in faults_injected.
    keep_last: keep only the N most recent checkpoints in checkpoint_dir (None: all)."""
    from ..runtime.faulty import FaultyDevice
    from ..runtime.local import LocalRuntime

    cfg = cfg.resolved()
    _check_options(checkpoint_every, keep_last, checkpoint_dir)
    compiled = compile_strategy(cfg)
    faults = tuple(f.check(compiled.program, cfg.steps) for f in faults)
    if len(faults) > max_failures:
        raise ParasimError(f"{len(faults)} faults are more than the {max_failures} failures a run recovers from; "
                           "inject fewer")
    device_model = clock_of(cfg, device_model, hardware)
    if resume_from is not None:  # refused before any work when it does not continue this run
        resume_from = Checkpoint.open(resume_from)
        resume_from.check_continues(cfg)
    own = runtime is None
    runtime = runtime or LocalRuntime(cfg.devices, device_class=FaultyDevice)
    tmp = tempfile.TemporaryDirectory(prefix="parasim-ckpt-") if checkpoint_every and not checkpoint_dir else None
    hook = Recovery(compiled, faults, checkpoint_dir or (tmp.name if tmp else None), checkpoint_every, replicas,
                    max_failures, resume_from, before_step, keep_last, final_checkpoint=checkpoint_dir is not None)
    try:
        result = train_with(cfg, compiled, runtime, device_model, hook, check=check)
    finally:
        if own:
            runtime.close()
        if tmp is not None:
            tmp.cleanup()
    return ResilientResult(result, hook.injected, hook.recovered, hook.replayed, hook.reports, hook.recoveries,
                           hook.saved)


def _check_options(checkpoint_every: int, keep_last, checkpoint_dir) -> None:
    if checkpoint_every < 0:
        raise ParasimError(f"checkpoint interval must be >= 0 steps, got {checkpoint_every}")
    if keep_last is not None and (isinstance(keep_last, bool) or int(keep_last) != keep_last or keep_last < 1):
        raise ParasimError(f"keep_last must be a whole number of checkpoints >= 1, got {keep_last!r}")
    if checkpoint_dir is not None:
        check_checkpoint_dir(checkpoint_dir)  # before any work: a read-only or file path is one line now


def _recover(runtime, compiled, step: int, root, replicas: bool) -> tuple[int, str, list[int]]:
    """Restart dead devices and restore a consistent state; returns (step to resume from,
    'replicas' | 'checkpoint', restarted ranks)."""
    n = runtime.n_devices
    dead = [r for r in range(n) if not runtime.alive(r)]
    if dead:
        runtime.restart(*dead)   # together: one restart's wait, not one per device
    if replicas:
        snapshot = _from_replicas(runtime, compiled, step, set(dead))
        if snapshot is not None:
            runtime.clear()
            runtime.load(snapshot)
            return step, "replicas", dead
    if root is None or latest_checkpoint(root) is None:
        raise ParasimError(f"cannot recover at step {step}: no checkpoint (use checkpoint_every) and "
                           f"no surviving replica holds the lost state of device(s) {dead}")
    return restore(runtime, compiled, Checkpoint.open(root)), "checkpoint", dead


def _from_replicas(runtime, compiled, step: int, dead: set[int]):
    """rank -> its state at the start of `step`, read from itself or a data-parallel peer, or None."""
    steps = {}
    for r in range(runtime.n_devices):
        if r in dead:
            continue
        try:
            steps[r] = int(runtime.fetch(r, ["opt/step"])["opt/step"])
        except (DeviceFailure, ParasimError):
            dead.add(r)
    snapshot = {}
    for r in range(runtime.n_devices):
        source = next((c for c in [r] + peers(compiled, r) if c not in dead and steps.get(c) == step), None)
        if source is None:
            return None
        snapshot[r] = runtime.fetch(source, list(compiled.initial[source]))
    return snapshot
