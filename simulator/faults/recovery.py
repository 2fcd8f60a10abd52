"""Fault-tolerant training: detect a failed device, restart it, restore state, replay.

    result = train_resilient(cfg, faults=parse_faults("1@2"), checkpoint_every=2)

The step loop is `simulator.training`'s (load the batch, run the Program, read the loss, price the
step on the clock) with failure handling around each step:

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

from ..cost.clock import DeviceModel, simulate
from ..errors import DeviceFailure, ParasimError
from ..models import get_batch
from ..parallel.config import TrainConfig
from ..parallel.strategies import compile_strategy
from ..program import Compute, Free
from ..trace import Trace, TraceEvent
from ..training import TrainResult, clock_of, gather_params, max_rel_diff, reference_train
from .checkpoint import Checkpoint, check_checkpoint_dir, latest_checkpoint, restore, save_checkpoint
from .inject import Fault, arm


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
    if mesh is None or compiled.config.zero or "dp" not in mesh.axis_names:
        return []
    mine = compiled.initial[rank]
    out = []
    for g in mesh.groups("dp"):
        if rank in g:
            for r in g:
                other = compiled.initial[r]
                if r != rank and other.keys() == mine.keys() and all(
                        other[n].shape == mine[n].shape for n in mine):
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


def train_resilient(cfg: TrainConfig, runtime=None, faults: tuple[Fault, ...] = (), checkpoint_every: int = 0,  # noqa: C901 -- TODO(issue 12): split
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
    if checkpoint_every < 0:
        raise ParasimError(f"checkpoint interval must be >= 0 steps, got {checkpoint_every}")
    if keep_last is not None and (isinstance(keep_last, bool) or int(keep_last) != keep_last or keep_last < 1):
        raise ParasimError(f"keep_last must be a whole number of checkpoints >= 1, got {keep_last!r}")
    if checkpoint_dir is not None:
        check_checkpoint_dir(checkpoint_dir)  # before any work: a read-only or file path is one line now
    compiled = compile_strategy(cfg)
    program = compiled.program
    faults = tuple(f.check(program, cfg.steps) for f in faults)
    if len(faults) > max_failures:
        raise ParasimError(f"{len(faults)} faults are more than the {max_failures} failures a run recovers from; "
                           "inject fewer")
    base_model = clock_of(cfg, device_model, hardware)
    own = runtime is None
    runtime = runtime or LocalRuntime(cfg.devices, device_class=FaultyDevice)
    tmp = tempfile.TemporaryDirectory(prefix="parasim-ckpt-") if checkpoint_every and not checkpoint_dir else None
    root = checkpoint_dir or (tmp.name if tmp else None)
    trace, losses = Trace(cfg.devices, name=program.name), []
    reports, recoveries, saved = [], [], []
    fired: set[int] = set()
    attempts = [0] * cfg.steps
    sent, messages, wall = [0] * cfg.devices, 0, 0.0
    injected = recovered = replayed = 0
    try:
        runtime.clear()
        runtime.load(compiled.initial)
        step = restore(runtime, compiled, Checkpoint.open(resume_from)) if resume_from is not None else 0
        first = step  # losses[k] is the loss of step first + k
        if root is not None:
            save_checkpoint(runtime, compiled, step, root, keep_last=keep_last)
            saved.append(step)
        while step < cfg.steps:
            slowed = {}
            if before_step is not None and not attempts[step] and before_step(step, runtime):
                injected += 1
            for k, f in enumerate(faults):
                if f.step == step and k not in fired:
                    fired.add(k)
                    injected += 1
                    arm(runtime, f, program)
                    if f.kind == "slow":
                        ins = program.code[f.device][f.where(program)]
                        if isinstance(ins, Compute):
                            slowed[id(ins)] = f.delay_s
            model = _Straggler(base_model, slowed) if slowed else base_model
            x, y = get_batch(cfg.model, cfg.batch_size, step, cfg.seed)
            t0 = time.perf_counter()
            try:
                if root is not None and checkpoint_every and step % checkpoint_every == 0 and step not in saved:
                    save_checkpoint(runtime, compiled, step, root, keep_last=keep_last)  # inside the try: a death here is a failure too
                    saved.append(step)
                runtime.load(compiled.feed(x, y))
                result = runtime.run(program)
                loss = sum(float(v) for r, names in compiled.loss_tensors.items()
                           for v in runtime.fetch(r, names).values()) / compiled.count
            except DeviceFailure as e:
                wall += time.perf_counter() - t0
                if len(reports) >= max_failures:
                    raise
                reports.append(f"step {step}: {e}")
                priced = simulate(program, model, step=step)
                trace.append(Trace(cfg.devices, lost_events(priced, program, e, attempts[step]), name="lost"))
                t1 = time.perf_counter()
                try:
                    back, how, restarted = _recover(runtime, compiled, step, root, replicas)
                except ParasimError as why:
                    raise ParasimError(f"{e}; {why}") from e
                recovered += 1
                replayed += step - back + 1
                for s in range(back, step + 1):
                    attempts[s] += 1
                recoveries.append({"step": step, "device": e.rank, "restarted": restarted, "from": how,
                                   "resume_step": back, "wall_time_s": time.perf_counter() - t1})
                mark = max(priced.makespan_s * 0.05, 1e-9)
                trace.append(Trace(cfg.devices, [TraceEvent(
                    r, "compute", (f"recovery: restart device(s) {restarted}, restore from {how} (step {back})" if restarted
                     else f"recovery: retry step {step} (no device lost its state)"), 0.0, mark,
                    "recovery", "recovery", step=step, attempt=attempts[step]) for r in range(cfg.devices)]))
                del losses[back - first:]
                step = back
                continue
            wall += time.perf_counter() - t0
            losses.append(loss)
            step_trace = simulate(program, model, step=step, memory=result.memory_by_instruction())
            if attempts[step]:
                step_trace.events = [replace(e, attempt=attempts[step]) for e in step_trace.events]
            step_trace.wall_time_s = result.wall_time_s
            trace.append(step_trace)
            sent = [a + b for a, b in zip(sent, result.bytes_sent)]
            messages += sum(result.messages_sent)
            step += 1
        if checkpoint_dir is not None and step not in saved:  # the trained state too, as Megatron saves at the end
            save_checkpoint(runtime, compiled, step, root, keep_last=keep_last)
            saved.append(step)
        params = gather_params(compiled, runtime)
    finally:
        if own:
            runtime.close()
        if tmp is not None:
            tmp.cleanup()
    ref_params, ref_losses = reference_train(cfg) if check else (params, losses)
    result = TrainResult(cfg, losses, ref_losses, max_rel_diff(params, ref_params), trace, compiled, sent,
                         messages, wall, params)
    return ResilientResult(result, injected, recovered, replayed, reports, recoveries, saved)


def _recover(runtime, compiled, step: int, root, replicas: bool) -> tuple[int, str, list[int]]:
    """Restart dead devices and restore a consistent state; returns (step to resume from,
    'replicas' | 'checkpoint', restarted ranks)."""
    n = runtime.n_devices
    dead = [r for r in range(n) if not runtime.alive(r)]
    for r in dead:
        runtime.restart(r)
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
