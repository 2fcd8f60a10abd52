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

hybrid_parallel: in MindSpore the user writes the communication by hand; parasim's auto/ has no
hand-written collective operators, so it plans as semi_auto_parallel (the user's strategies,
data parallel for the rest) -- the numbers a run produces are the same.

More options with MindSpore's names (their checks and meaning: context_options.py):
enable_parallel_optimizer + parallel_optimizer_config (optimizer_shard.py),
grad_accumulation_step (the batch is cut into that many micro-batches whose gradients are
summed before one update: the pipeline machinery with one stage), dataset_strategy / full_batch,
strategy_ckpt_save_file / strategy_ckpt_load_file (strategy_ckpt.py), global_rank (the rank
whose slices explain() shows, 0 <= global_rank < device_num).

Pipeline (MindSpore docs "pipeline_parallel"; auto/pipeline/): pipeline_stages=S splits the
device_num ranks into S contiguous blocks of D/S; `micro_size` micro-batches (>= S) run through
them under `pipeline_scheduler` ("gpipe" or "1f1b").
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import ParasimError
from ..runtime import make_runtime
from .context_options import (
    AlgoParameters,
    ParallelOptimizerConfig,
    algo_parameters_of,
    check_bool,
    dataset_strategy_of,
    is_int,
)

PARALLEL_MODES = ("stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel",
                  "hybrid_parallel")
SEARCH_MODES = ("sharding_propagation", "dynamic_programming", "recursive_programming")
PIPELINE_SCHEDULERS = ("gpipe", "1f1b")
SHOWN_IF_SET = ("enable_alltoall", "enable_parallel_optimizer", "grad_accumulation_step",
                "dataset_strategy", "global_rank")  # in repr() when not the default


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
    enable_parallel_optimizer: bool = False
    parallel_optimizer_config: ParallelOptimizerConfig = ParallelOptimizerConfig()
    grad_accumulation_step: int = 1
    dataset_strategy: object = None  # None, "data_parallel", "full_batch" or shard tuples
    full_batch: bool = False
    strategy_ckpt_save_file: str = ""
    strategy_ckpt_load_file: str = ""
    global_rank: int = 0
    algo_parameters: AlgoParameters = AlgoParameters()

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
        self._check_options()
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

    def _check_options(self) -> None:
        """The options of context_options.py, normalised in place."""
        for name in ("gradients_mean", "enable_alltoall", "enable_parallel_optimizer"):
            check_bool(name, getattr(self, name))
        object.__setattr__(self, "parallel_optimizer_config",
                           ParallelOptimizerConfig.of(self.parallel_optimizer_config))
        object.__setattr__(self, "dataset_strategy",
                           dataset_strategy_of(self.dataset_strategy, self.full_batch))
        object.__setattr__(self, "full_batch", self.dataset_strategy == "full_batch")
        if not isinstance(self.algo_parameters, AlgoParameters):
            raise ParasimError(f"algo_parameters must be set with set_algo_parameters, got "
                               f"{self.algo_parameters!r}")
        g = self.grad_accumulation_step
        if not is_int(g) or g < 1:
            raise ParasimError(f"grad_accumulation_step must be an integer >= 1, got {g!r}")
        if g > 1 and self.pipeline_stages > 1:
            raise ParasimError(f"grad_accumulation_step={g} with pipeline_stages="
                               f"{self.pipeline_stages}: a pipeline accumulates over micro_size "
                               f"(MindSpore: grad_accumulation_step is for non-pipeline runs)")
        for name in ("strategy_ckpt_save_file", "strategy_ckpt_load_file"):
            if not isinstance(getattr(self, name), str):
                raise ParasimError(f"{name} must be a file path (a string), got {getattr(self, name)!r}")
        r = self.global_rank
        if not is_int(r) or not 0 <= r < self.device_num:
            raise ParasimError(f"global_rank {r!r} is not a rank of device_num {self.device_num} "
                               f"(0 <= global_rank < {self.device_num})")

    @property
    def plans_like(self) -> str:
        """The mode the planner follows (hybrid_parallel plans as semi_auto_parallel)."""
        return "semi_auto_parallel" if self.parallel_mode == "hybrid_parallel" else self.parallel_mode

    @property
    def stage_devices(self) -> int:
        """Devices per pipeline stage: the D that strategies must divide."""
        return 1 if self.parallel_mode == "stand_alone" else self.device_num // self.pipeline_stages

    def __repr__(self) -> str:
        pipe = (f", pipeline_stages={self.pipeline_stages}, micro_size={self.micro_size}, "
                f"{self.pipeline_scheduler}" if self.pipeline_stages > 1 else "")
        extra = "".join(f", {f.name}={getattr(self, f.name)!r}" for f in fields(self)
                        if f.name in SHOWN_IF_SET and getattr(self, f.name) != f.default)
        return (f"AutoParallelContext({self.parallel_mode}, device_num={self.device_num}, "
                f"gradients_mean={self.gradients_mean}, search_mode={self.search_mode}{pipe}{extra})")


class _Holder:
    """The "current" context of the MindSpore-like API (the only mutable state, in one object)."""

    def __init__(self):
        self.ctx = AutoParallelContext()


_CURRENT = _Holder()


def set_auto_parallel_context(**kwargs) -> AutoParallelContext:
    """Update the current context (unknown keywords are refused) and return it."""
    known = set(AutoParallelContext.__dataclass_fields__) - {"algo_parameters"}
    bad = sorted(set(kwargs) - known)
    if bad:
        raise ParasimError(f"unknown auto-parallel option(s) {bad}; known: {sorted(known)}")
    _CURRENT.ctx = replace(_CURRENT.ctx, **kwargs)
    return _CURRENT.ctx


def get_auto_parallel_context(attr_key: str | None = None):
    """The current context, or (MindSpore style) the value of one option: a dict for
    parallel_optimizer_config."""
    if attr_key is None:
        return _CURRENT.ctx
    if attr_key not in {f.name for f in fields(AutoParallelContext)}:
        raise ParasimError(f"get_auto_parallel_context: unknown option {attr_key!r}")
    v = getattr(_CURRENT.ctx, attr_key)
    return v.to_dict() if hasattr(v, "to_dict") else v


def set_algo_parameters(**kwargs) -> AutoParallelContext:
    """MindSpore's set_algo_parameters on the current context (context_options.py)."""
    ctx = _CURRENT.ctx
    _CURRENT.ctx = replace(ctx, algo_parameters=algo_parameters_of(ctx.algo_parameters, **kwargs))
    return _CURRENT.ctx


def get_algo_parameters(attr_key: str):
    """The value of one algo parameter (MindSpore's get_algo_parameters)."""
    algo = _CURRENT.ctx.algo_parameters.to_dict()
    if attr_key not in algo:
        raise ParasimError(f"get_algo_parameters: unknown option {attr_key!r}; known: {sorted(algo)}")
    return algo[attr_key]


def reset_algo_parameters() -> AutoParallelContext:
    _CURRENT.ctx = replace(_CURRENT.ctx, algo_parameters=AlgoParameters())
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
