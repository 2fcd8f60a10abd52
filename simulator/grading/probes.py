"""Parasim's own functions a check runs on what a submission built, in a probe sandbox.

A check must not run a student-built object (a `Program`) in the grader, and must not trust the
student's own process to run it either (the submission could replace parasim's runtime there).
So the check hands the object, as the data it came back as, to a fresh sandbox that holds no
submission (`Sandbox(None)`, under the same limits and confinement), which rebuilds it and runs
one of these functions on it; what comes back is plain data.
"""

from __future__ import annotations


def run_program(program, inputs: dict, fetch: str) -> dict:
    """Run `program` on the local runtime with `inputs` ({rank: {tensor: array}}); the tensor
    `fetch` of every rank, and the bytes each rank sent."""
    from ..program import Program
    from ..runtime import make_runtime

    if not isinstance(program, Program):
        raise TypeError(f"a Program was expected, got {type(program).__name__}")
    n = program.n_devices
    with make_runtime("local", n) as rt:
        rt.load({int(r): dict(v) for r, v in inputs.items()})
        result = rt.run(program)
        outputs = [rt.fetch(r, [fetch])[fetch] for r in range(n)]
    return {"outputs": outputs, "bytes_sent": [int(b) for b in result.bytes_sent]}


def method(obj, name: str, *args):
    """`obj.name(*args)` for a parasim object a submission returned (a Trace's
    `bytes_by_collective`, say): its public methods only."""
    if not isinstance(name, str) or name.startswith("_") or not type(obj).__module__.startswith("simulator"):
        raise TypeError(f"no public parasim method {name!r} of a {type(obj).__name__}")
    return getattr(obj, name)(*args)


def train_config(config) -> dict:
    """Run `train(config)` for a TrainConfig a submission returned (its own run's numbers are never
    read: this reruns its configuration with parasim's code, no code of the submission's): the
    weights' distance from one device and the bytes of each collective (Trace.bytes_by_collective)."""
    from ..training import TrainConfig, train

    if not isinstance(config, TrainConfig):
        raise TypeError(f"a TrainConfig was expected, got {type(config).__name__}")
    r = train(config)
    return {"max_rel_weight_diff_vs_single": float(r.max_rel_weight_diff_vs_single),
            "bytes_by_collective": {str(k): int(v) for k, v in r.trace.bytes_by_collective().items()},
            "losses": [float(x) for x in r.losses]}


def resume(config, checkpoint: str) -> dict:
    """Run `train_resilient(config, resume_from=checkpoint)` for the grader's own TrainConfig and a
    checkpoint folder a submission wrote (read here, in the probe sandbox; Checkpoint.open checks
    every shard): the losses of the resumed steps and the weights' distance from one device."""
    from ..faults import train_resilient
    from ..training import TrainConfig

    if not isinstance(config, TrainConfig) or not isinstance(checkpoint, str):
        raise TypeError("a TrainConfig and a checkpoint folder were expected")
    r = train_resilient(config, resume_from=checkpoint)
    return {"losses": [float(x) for x in r.train.losses],
            "max_rel_weight_diff_vs_single": float(r.train.max_rel_weight_diff_vs_single)}


def timeline(built):
    """The timeline (`viz.timeline`) of what a submission built: a Program priced by parasim's
    clock (`simulate`, its default device model), or a TrainConfig trained by `train`; the
    figure travels back as its data (the bars a plot item compares)."""
    from .. import viz
    from ..cost.clock import simulate
    from ..program import Program
    from ..training import TrainConfig, train

    if isinstance(built, Program):
        return viz.timeline(simulate(built))
    if isinstance(built, TrainConfig):
        return viz.timeline(train(built).trace)
    raise TypeError(f"a Program or a TrainConfig was expected, got {type(built).__name__}")


PROBES = {"run_program": run_program, "method": method, "train": train_config, "resume": resume,
          "timeline": timeline}
