"""Run real training steps of a strategy on emulated devices and check them against one device.

    result = train(TrainConfig(GPTConfig(...), strategy="pp", devices=4, microbatches=8))

Each step loads the batch rows onto the devices that need them, executes the compiled Program on
the runtime (really: numpy on each device, chunks really exchanged), reads the loss back, and
prices the same Program on the simulated clock (by default the fixed `cpu` hardware preset, the same
on every machine; `hardware="local"` prices on this machine as `parasim calibrate` measured it); the
traces of all steps are concatenated with the measured wall time kept beside them. At the end the trained weights are compared with a plain
numpy single-device run of the same steps (`reference_train`): parallelism must not change the
math (float64; only a lower-precision gradient wire format introduces a measured error).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .cost.clock import DeviceModel, simulate
from .cost.device_model import run_device_model
from .errors import DeviceFailure, ParasimError
from .models import get_batch
from .one_device import TOLERANCE, StepCheck, max_rel_diff, reference_train
from .parallel.config import TrainConfig
from .parallel.replicated import Compiled
from .parallel.strategies import compile_strategy
from .program import Compute
from .runtime import make_runtime
from .trace import Trace


def _first_non_finite(values: list[float]) -> int | None:
    return next((i for i, x in enumerate(values) if not math.isfinite(x)), None)


@dataclass
class TrainResult:
    config: TrainConfig
    losses: list[float]
    reference_losses: list[float]
    max_rel_weight_diff_vs_single: float
    trace: Trace
    compiled: Compiled
    bytes_sent_per_device: list[int]
    messages: int
    wall_time_s: float
    params: list[dict] = field(repr=False, default_factory=list)
    # the largest difference of one step's weights from one step of one device taken from the run's
    # previous weights (simulator/one_device.py): what the check bounds; NaN: not compared
    max_step_rel_diff_vs_single: float = math.nan
    worst_step: int | None = None

    @property
    def wire_dtype(self) -> str | None:
        """The lower-precision dtype gradients travel in, if the program really casts them (a
        --grad-dtype float16 run without data-parallel replicas never does), else None."""
        for code in self.compiled.program.code:
            for ins in code:
                if isinstance(ins, Compute) and ins.op in ("cast", "flatten") \
                        and ins.attrs.get("dtype", "float64") != "float64":
                    return ins.attrs["dtype"]
        return None

    @property
    def tolerance(self) -> float | None:
        """The largest relative difference of one step's weights from one step of one device (from
        the run's previous weights) that still counts as equal: one_device.TOLERANCE = 1e-9 in
        float64, at any number of steps (one_device.py gives the reasoning). Gradients
        rounded to a lower-precision wire format (float32/float16) change the math by design: no
        one-device run rounds the same partial sums, so the error is measured and reported, and
        no equality is claimed (None)."""
        return TOLERANCE if self.wire_dtype is None else None

    @property
    def diverged_as_one_device(self) -> bool:
        """The loss became NaN or inf at the same step as one device's (a learning rate too large, not
        a wrong parallel run): a failed run, but not a mismatch."""
        bad = _first_non_finite(self.losses)
        return bad is not None and len(self.reference_losses) == len(self.losses) \
            and _first_non_finite(self.reference_losses) == bad

    def check_failure(self) -> str | None:
        """None when the run matches one device (or, with a lower-precision wire, has nothing to
        compare exactly), else one line saying how it does not. A NaN or infinite loss or weight
        always fails (it never compares as 'no difference')."""
        bad = _first_non_finite(self.losses)
        if bad is not None:
            at = f"the loss became {self.losses[bad]} at step {self.config.steps - len(self.losses) + bad}"
            if self.diverged_as_one_device:
                return (f"{at}, as one device's does at the same step: training diverges with these settings "
                        "(check --lr and the data), on one device as in parallel")
            return f"{at}: the run diverged (check --lr and the data), where one device's loss stays finite"
        diff, step = self.max_step_rel_diff_vs_single, self.worst_step
        if math.isnan(diff):  # not compared step by step: the final weights are what there is
            diff, step = self.max_rel_weight_diff_vs_single, None
        if not math.isfinite(diff) or not math.isfinite(self.max_rel_weight_diff_vs_single):
            return "the trained weights (or the one-device reference's) contain NaN or inf: no match with one device"
        if self.tolerance is None:
            return None
        grew = max(self.losses) / self.losses[0] if self.losses and self.losses[0] > 0 else 1.0
        final = self.max_rel_weight_diff_vs_single
        if grew > 100 and final > self.tolerance:  # each step may be right, the end is not one device's
            return (f"the trained weights differ from one device by {final:.3g} (relative), more than the "
                    f"{self.tolerance:g} float64 allows; the loss grew {grew:.3g}-fold (from {self.losses[0]:.4g}): "
                    "a diverging run amplifies rounding differences (check --lr)")
        if diff > self.tolerance:
            at = "" if step is None else f" at step {step} (one step from the run's own previous weights)"
            return (f"the trained weights differ from one device by {diff:.3g} (relative){at}, more than the "
                    f"{self.tolerance:g} float64 allows: the parallel run is wrong")
        return None

    def verdict(self) -> tuple[bool | None, str]:
        """(matches one device: True / False / None when only measured, one line)."""
        failure = self.check_failure()
        if failure:
            return False, failure
        if self.tolerance is None:
            return None, (f"measured only: {self.wire_dtype} gradients on the wire round by design "
                          f"(relative weight difference {self.max_rel_weight_diff_vs_single:.3g}); "
                          "no one-device run to equal")
        return True, "ok"

    def to_dict(self) -> dict:
        """The fields the CLI prints with --json (NaN and inf as null: the output stays pure JSON)."""
        stats = self.trace.device_stats()
        matches, check = self.verdict()
        return {"matches_single_device": matches, "check": check, "diverged_as_one_device": self.diverged_as_one_device,
            "tolerance": self.tolerance,
            "model": self.config.model.to_dict(), "strategy": self.config.strategy, "devices": self.config.devices,
            "dp": self.config.dp, "pp": self.config.pp, "tp": self.config.tp, "microbatches": self.config.m,
            "schedule": self.compiled.notes.get("schedule"),
            "cp": self.config.cp, "cp_comm_type": self.config.cp_comm_type if self.config.cp > 1 else None,
            "ep": self.config.ep, "zero_stage": self.config.zero_stage, "moe": self.compiled.notes.get("moe"),
            "losses": [_finite(x) for x in self.losses],
            "reference_losses": [_finite(x) for x in self.reference_losses],
            "max_rel_weight_diff_vs_single": _finite(self.max_rel_weight_diff_vs_single),
            "max_step_rel_diff_vs_single": _finite(self.max_step_rel_diff_vs_single),
            "bytes_by_collective": self.trace.bytes_by_collective(),
            "bytes_sent_per_device": self.bytes_sent_per_device, "messages": self.messages,
            "bubble_fraction": self.trace.bubble_fraction(),
            "peak_memory_bytes_per_device": self.trace.peak_memory_bytes(),
            "idle_fraction_per_device": [s["idle_fraction"] for s in stats],
            "step_breakdown": self.trace.step_breakdown(),
            "simulated_time_s": self.trace.makespan_s, "steps": self.trace.steps,
            "step_time_s": self.trace.step_time_s, "wall_time_s": self.wall_time_s,
        }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def gather_params(compiled: Compiled, runtime) -> list[dict]:
    """Read the trained parameters back from the devices that hold them."""
    if compiled.gather is not None:
        return compiled.gather(runtime)
    n_layers = 1 + max(li for li, _ in compiled.param_home)
    out: list[dict] = [dict() for _ in range(n_layers)]
    by_rank: dict[int, list] = {}
    for (li, n), (rank, tensor) in compiled.param_home.items():
        by_rank.setdefault(rank, []).append((li, n, tensor))
    for rank, items in by_rank.items():
        values = runtime.fetch(rank, [t for _, _, t in items])
        for li, n, t in items:
            out[li][n] = values[t]
    return out


def clock_of(cfg: TrainConfig, device_model: DeviceModel | None, hardware) -> DeviceModel:
    """The device model a run is priced on: the one given, else `run_device_model` on `hardware`
    (None: the fixed default preset, the same on every machine)."""
    if device_model is not None and hardware is not None:
        raise ParasimError(f"give device_model or hardware, not both (hardware={hardware!r})")
    return device_model or run_device_model(cfg.devices, hardware)


def price_training(cfg: TrainConfig, device_model: DeviceModel | None = None, hardware=None):
    """Compile `cfg` and price its `cfg.steps` steps on the simulated clock, executing nothing:
    the trace train() would give for the same settings (same events and times; no memory samples,
    which only a run measures). Returns (trace, compiled)."""
    cfg = cfg.resolved()
    compiled = compile_strategy(cfg)
    device_model = clock_of(cfg, device_model, hardware)
    trace = Trace(cfg.devices, name=compiled.program.name)
    for step in range(cfg.steps):
        trace.append(simulate(compiled.program, device_model, step=step))
    return trace, compiled


class StepHook:
    """What may happen around the one step loop (`run_steps`); this default adds nothing and lets a
    DeviceFailure propagate. Fault recovery (`simulator.faults.recovery`) supplies a hook that
    saves checkpoints, injects faults, and restarts and restores after a failure."""

    def start(self, runtime) -> int:
        """Before the first step (the initial state is loaded); returns the step to start at."""
        return 0

    def start_states(self) -> list | None:
        """The optimizer state at the start step as one device holds it ([{name: {m, v}}] per
        layer), when the run resumed one (a checkpoint's); None: the one-device run's own."""
        return None

    def before_step(self, step: int, attempt: int, runtime, device_model: DeviceModel) -> DeviceModel:
        """Before each attempt of `step` (attempt 0: the first); returns the device model that prices it."""
        return device_model

    def before_run(self, step: int, runtime) -> None:
        """Inside the attempt, before the batch is loaded (a DeviceFailure here fails the attempt)."""

    def on_failure(self, step: int, failure: DeviceFailure, priced: Trace, log: StepLog, runtime) -> int:
        """A device failed during `step` (`priced`: the attempt on the clock); returns the step to
        resume from (the log's later losses are dropped), or raises."""
        raise failure

    def finish(self, step: int, runtime) -> None:
        """After the last step, before the parameters are read back."""


@dataclass
class StepLog:
    """What the step loop measured: the priced trace, the losses, the traffic and the wall time."""

    trace: Trace
    losses: list[float]
    sent: list[int]
    attempts: list[int]          # per step: how many times it was replayed (0: first attempt kept)
    messages: int = 0
    wall: float = 0.0


def run_steps(cfg: TrainConfig, compiled: Compiled, runtime, device_model: DeviceModel,
              hook: StepHook | None = None, progress: Callable[[int, int], None] | None = None,
              check: StepCheck | None = None) -> StepLog:
    """The step loop: load each step's batch, run the Program on the runtime, read the loss back and
    price the step on the clock (with the memory the run measured); `hook` acts around it; `check`
    compares every step with one step of one device (its weights are read back after each step)."""
    hook = hook or StepHook()
    program = compiled.program
    runtime.clear()
    runtime.load(compiled.initial)
    log = StepLog(Trace(cfg.devices, name=program.name), [], [0] * cfg.devices, [0] * cfg.steps)
    step = first = hook.start(runtime)   # log.losses[k] is the loss of step first + k
    if check is not None:
        check.start(step, gather_params(compiled, runtime), hook.start_states())
    while step < cfg.steps:
        model = hook.before_step(step, log.attempts[step], runtime, device_model)
        x, y = get_batch(cfg.model, cfg.global_batch, step, cfg.seed)
        t0 = time.perf_counter()
        try:
            hook.before_run(step, runtime)
            runtime.load(compiled.feed(x, y))
            t0 = time.perf_counter()
            result = runtime.run(program)
            t1 = time.perf_counter()
            total = sum(float(v) for r, names in compiled.loss_tensors.items()
                        for v in runtime.fetch(r, names).values())
            if check is not None and step == check.at:
                check.after(step, gather_params(compiled, runtime))
        except DeviceFailure as failure:
            log.wall += time.perf_counter() - t0   # a failed attempt: its time up to the failure
            back = hook.on_failure(step, failure, simulate(program, model, step=step), log, runtime)
            del log.losses[back - first:]
            step = back
            continue
        log.wall += t1 - t0   # the wall time of the runtime executing the step
        log.losses.append(total / compiled.count)
        step_trace = simulate(program, model, step=step, memory=result.memory_by_instruction())
        if log.attempts[step]:
            step_trace.events = [replace(e, attempt=log.attempts[step]) for e in step_trace.events]
        step_trace.wall_time_s = result.wall_time_s
        log.trace.append(step_trace)
        log.sent = [a + b for a, b in zip(log.sent, result.bytes_sent)]
        log.messages += sum(result.messages_sent)
        step += 1
        if progress:
            progress(step, cfg.steps)
    hook.finish(step, runtime)
    return log


def train_with(cfg: TrainConfig, compiled: Compiled, runtime, device_model: DeviceModel, hook: StepHook | None = None,
               progress: Callable[[int, int], None] | None = None, check: bool = True) -> TrainResult:
    """Run the steps on `runtime` (closed by the caller), read the weights back and compare them with
    one device (`check`; else with themselves)."""
    steps = StepCheck(cfg) if check else None
    log = run_steps(cfg, compiled, runtime, device_model, hook, progress, steps)
    params = gather_params(compiled, runtime)
    ref_params, ref_losses = reference_train(cfg) if check else (params, log.losses)
    return TrainResult(cfg, log.losses, ref_losses, max_rel_diff(params, ref_params), log.trace, compiled, log.sent,
                       log.messages, log.wall, params, steps.worst if steps else math.nan, steps.where if steps else None)


def train(cfg: TrainConfig, runtime=None, device_model: DeviceModel | None = None,
          progress: Callable[[int, int], None] | None = None, check: bool = True, hardware=None) -> TrainResult:
    """Compile, run `cfg.steps` real steps, trace them, and compare with one device. `runtime` is a
    runtime object (closed by the caller), or a runtime's name, "local" (the default) or "ray",
    made here for `cfg.devices` and closed at the end. The steps are priced on `device_model`,
    else on the `hardware` preset (default: the fixed `cpu` preset; "local": this machine's
    calibration)."""
    cfg = cfg.resolved()
    compiled = compile_strategy(cfg)
    device_model = clock_of(cfg, device_model, hardware)
    own = runtime is None or isinstance(runtime, str)
    runtime = make_runtime(runtime or "local", cfg.devices) if own else runtime
    try:
        return train_with(cfg, compiled, runtime, device_model, progress=progress, check=check)
    finally:
        if own:
            runtime.close()
