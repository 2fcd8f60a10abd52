"""What a run of an auto-parallel network returns, and the checks before it starts.

`AutoRunResult` is returned by run.train (one stage) and pipeline/run.train_pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..errors import ParasimError
from ..program import Program
from ..runtime import make_runtime
from .graph import Network
from .plan import ParallelPlan


@dataclass(frozen=True)
class AutoRunResult:
    losses: tuple[float, ...]
    output: np.ndarray  # the network's last output after the last step's forward
    grads: dict = field(repr=False)  # parameter -> gradient of the last step
    params: dict = field(repr=False)  # parameter -> value after the last step
    program: Program = field(repr=False)
    plan: ParallelPlan = field(repr=False)  # a pipeline.PipelinePlan with pipeline_stages > 1
    runs: tuple = field(repr=False, default=())  # the runtime's RunResult per step

    def to_dict(self) -> dict:
        """Plain data: losses, the last output and the parameters after the last step (as lists),
        and each step's run (RunResult.to_dict); the program and plan are left out
        (dataclasses.asdict keeps everything)."""
        return {"losses": list(self.losses), "output": np.asarray(self.output).tolist(),
                "params": {k: np.asarray(v).tolist() for k, v in self.params.items()},
                "runs": [r.to_dict() for r in self.runs]}


def check_feeds(net: Network, feeds: Mapping[str, np.ndarray]) -> dict:
    out = {}
    for t in net.inputs:
        if t.name not in feeds:
            raise ParasimError(f"no value fed for input {t.name!r} of shape {t.shape}")
        arr = np.asarray(feeds[t.name])
        if arr.shape != t.shape:
            raise ParasimError(f"input {t.name!r} expects shape {t.shape}, got {arr.shape}")
        out[t.name] = arr
    return out


def runtime_for(runtime, device_num: int):
    """The given runtime, checked against the context's device count, or in-process devices."""
    runtime = runtime or make_runtime("local", device_num)
    if runtime.n_devices != device_num:
        raise ParasimError(f"the runtime has {runtime.n_devices} devices but the context needs "
                           f"{device_num} (device_num)")
    return runtime
