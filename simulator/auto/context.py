"""The auto-parallel context and `init`, MindSpore style, with the state made explicit.

MindSpore keeps one global context (`mindspore.set_auto_parallel_context`). parasim returns a
frozen `AutoParallelContext` and every function underneath takes it as an argument; the
MindSpore-like functions below only keep the latest one in a small holder object, so code
written against MindSpore's API reads the same:

    init("local")                                            # a runtime handle (or "ray")
    ctx = set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)

Modes (MindSpore docs "parallel_mode"): stand_alone (one device), data_parallel (every operator
cuts dim 0 of its first input), semi_auto_parallel (user strategies, data parallel for the rest),
auto_parallel (strategies searched: sharding_propagation from the user-sharded operators;
dynamic_programming and recursive_programming minimise the cost model of `cost_model`, an
auto.strategy_search.OpCostModel, see auto/strategy_search/).

enable_alltoall (MindSpore default False): a cut that moves between tensor dims is AllGather +
local Split; True makes it one AllToAll (as XLA/GSPMD does). See redistribution.py.

Pipeline (MindSpore docs "pipeline_parallel"; auto/pipeline/): pipeline_stages=S splits the
device_num ranks into S contiguous blocks of D/S; `micro_size` micro-batches (>= S) run through
them under `pipeline_scheduler` ("gpipe" or "1f1b").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ParasimError
from ..runtime import make_runtime

PARALLEL_MODES = ("stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel")
SEARCH_MODES = ("sharding_propagation", "dynamic_programming", "recursive_programming")
PIPELINE_SCHEDULERS = ("gpipe", "1f1b")


@dataclass(frozen=True)
class AutoParallelContext:
    parallel_mode: str = "stand_alone"
    device_num: int = 1  # devices of one pipeline stage times pipeline_stages
    gradients_mean: bool = False  # divide the mirrored gradient by its group size
    search_mode: str = "sharding_propagation"
    pipeline_stages: int = 1
    micro_size: int = 1  # micro-batches per step (MindSpore PipelineCell's micro_size), >= stages
    pipeline_scheduler: str = "gpipe"  # or "1f1b" (MindSpore pipeline_config's pipeline_scheduler)
    learning_rate: float = 0.1  # the SGD step compiled after the backward pass
    cost_model: object = None  # strategy_search's OpCostModel (hardware, alpha/beta/gamma, memory limit)
    enable_alltoall: bool = False  # MindSpore's default: reshard with AllGather + Split, not AllToAll

    def __post_init__(self):
        if self.parallel_mode not in PARALLEL_MODES:
            raise ParasimError(f"parallel_mode {self.parallel_mode!r} is not one of "
                               f"{', '.join(PARALLEL_MODES)}")
        if self.search_mode not in SEARCH_MODES:
            raise ParasimError(f"search_mode {self.search_mode!r} is not one of "
                               f"{', '.join(SEARCH_MODES)}")
        for name in ("device_num", "pipeline_stages", "micro_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParasimError(f"{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.enable_alltoall, bool):
            raise ParasimError(f"enable_alltoall must be True or False, got {self.enable_alltoall!r}")
        if self.device_num % self.pipeline_stages:
            raise ParasimError(f"device_num {self.device_num} is not a multiple of "
                               f"pipeline_stages {self.pipeline_stages}")
        if self.pipeline_scheduler not in PIPELINE_SCHEDULERS:
            raise ParasimError(f"pipeline_scheduler {self.pipeline_scheduler!r} is not one of "
                               f"{', '.join(PIPELINE_SCHEDULERS)}")
        if self.pipeline_stages > 1 and self.parallel_mode == "stand_alone":
            raise ParasimError(f"pipeline_stages={self.pipeline_stages} needs a parallel_mode other "
                               f"than stand_alone (one device has no stages)")
        if self.pipeline_stages > 1 and self.micro_size < self.pipeline_stages:
            raise ParasimError(f"micro_size {self.micro_size} < pipeline_stages "
                               f"{self.pipeline_stages}: a pipeline needs at least one micro-batch "
                               f"per stage (MindSpore: micro_size >= stages)")

    @property
    def stage_devices(self) -> int:
        """Devices per pipeline stage: the D that strategies must divide."""
        return 1 if self.parallel_mode == "stand_alone" else self.device_num // self.pipeline_stages

    def __repr__(self) -> str:
        pipe = (f", pipeline_stages={self.pipeline_stages}, micro_size={self.micro_size}, "
                f"{self.pipeline_scheduler}" if self.pipeline_stages > 1 else "")
        return (f"AutoParallelContext({self.parallel_mode}, device_num={self.device_num}, "
                f"gradients_mean={self.gradients_mean}, search_mode={self.search_mode}{pipe})")


class _Holder:
    """The "current" context of the MindSpore-like API (the only mutable state, in one object)."""

    def __init__(self):
        self.ctx = AutoParallelContext()


_CURRENT = _Holder()


def set_auto_parallel_context(**kwargs) -> AutoParallelContext:
    """Update the current context (unknown keywords are refused) and return it."""
    known = set(AutoParallelContext.__dataclass_fields__)
    bad = sorted(set(kwargs) - known)
    if bad:
        raise ParasimError(f"unknown auto-parallel option(s) {bad}; known: {sorted(known)}")
    _CURRENT.ctx = replace(_CURRENT.ctx, **kwargs)
    return _CURRENT.ctx


def get_auto_parallel_context() -> AutoParallelContext:
    return _CURRENT.ctx


def reset_auto_parallel_context() -> AutoParallelContext:
    _CURRENT.ctx = AutoParallelContext()
    return _CURRENT.ctx


def init(runtime: str = "ray", address: str | None = None, device_num: int | None = None):
    """Like mindspore.communication.init: start the devices and return the runtime handle.
    Default: one Ray actor per device on an embedded local Ray (or the cluster at `address`);
    "local": in-process devices that behave identically. device_num defaults to the context's."""

    n = get_auto_parallel_context().device_num if device_num is None else int(device_num)
    return make_runtime(runtime, n, address=address)
