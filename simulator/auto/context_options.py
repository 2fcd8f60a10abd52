"""The structured auto-parallel options: their MindSpore names, defaults and checks.

MindSpore (`mindspore.set_auto_parallel_context`, `mindspore.set_algo_parameters`, docs
"optimizer_parallel", "dataset_slice", "strategy_select"):

- parallel_optimizer_config (a dict; with enable_parallel_optimizer=True):
  `optimizer_weight_shard_size` (-1: the whole data-parallel group of a parameter, else the
  size of the sub-group its slices are split over), `parallel_optimizer_threshold` (KB; a
  parameter slice smaller than this stays whole, default 64), `gradient_accumulation_shard`
  (with gradient accumulation: accumulate the gradient sharded, one ReduceScatter per
  micro-step, instead of whole with one ReduceScatter per step; default False) and
  `optimizer_level` ("level1" default: parameters and optimizer states split; "level2": also
  the gradients; "level3": also the parameters are re-gathered before the backward pass, so
  the forward gather is freed). Memory effect of the levels = ZeRO stages 1, 2, 3
  (optimizer_shard.py; simulator/model_states.py).
- dataset_strategy: how each rank loads the network inputs: "data_parallel" (dim 0 cut over
  all devices), "full_batch" (every rank loads all of it; also `full_batch=True`), or one shard
  tuple per input, in the order the network declares its inputs. parasim also takes a dict
  input name -> tuple, and None (parasim's default: each input is loaded directly in the
  layout its first operator needs, so no redistribution is planned for it).
- set_algo_parameters: `fully_use_devices` (the searches only take strategies whose cuts
  multiply to D; OpCostModel(fully_use_devices=False) turns it off too) and
  `elementwise_op_strategy_follow` (an elementwise operator without a user strategy takes the
  layout its consumer needs; propagate.follow_elementwise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import ParasimError

OPTIMIZER_LEVELS = ("level1", "level2", "level3")


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_bool(name: str, v) -> None:
    if not isinstance(v, bool):
        raise ParasimError(f"{name} must be True or False, got {v!r}")


@dataclass(frozen=True)
class ParallelOptimizerConfig:
    gradient_accumulation_shard: bool = False
    parallel_optimizer_threshold: int = 64  # KB
    optimizer_weight_shard_size: int = -1
    optimizer_level: str = "level1"

    def __post_init__(self):
        check_bool("parallel_optimizer_config gradient_accumulation_shard",
                   self.gradient_accumulation_shard)
        t = self.parallel_optimizer_threshold
        if not is_int(t) or t < 0:
            raise ParasimError(f"parallel_optimizer_config parallel_optimizer_threshold must be an "
                               f"integer >= 0 (KB), got {t!r}")
        s = self.optimizer_weight_shard_size
        if not is_int(s) or (s < 1 and s != -1):
            raise ParasimError(f"parallel_optimizer_config optimizer_weight_shard_size must be -1 or "
                               f"an integer >= 1, got {s!r}")
        if self.optimizer_level not in OPTIMIZER_LEVELS:
            raise ParasimError(f"parallel_optimizer_config optimizer_level {self.optimizer_level!r} "
                               f"is not one of {', '.join(OPTIMIZER_LEVELS)}")

    @property
    def level(self) -> int:
        return OPTIMIZER_LEVELS.index(self.optimizer_level) + 1

    @classmethod
    def of(cls, value) -> "ParallelOptimizerConfig":
        if isinstance(value, cls):
            return value
        return cls(**_keys("parallel_optimizer_config", value, cls))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AlgoParameters:
    """The strategy-search switches of `set_algo_parameters` that parasim models."""

    fully_use_devices: bool = True
    elementwise_op_strategy_follow: bool = False

    def __post_init__(self):
        for f in fields(self):
            check_bool(f.name, getattr(self, f.name))

    def to_dict(self) -> dict:
        return asdict(self)


def _keys(option: str, value, cls) -> dict:
    if not isinstance(value, dict):
        raise ParasimError(f"{option} must be a dict, got {value!r}")
    known = [f.name for f in fields(cls)]
    bad = sorted(set(value) - set(known))
    if bad:
        raise ParasimError(f"{option}: unknown key(s) {bad}; known: {known}")
    return dict(value)


def algo_parameters_of(current: AlgoParameters, **kwargs) -> AlgoParameters:
    """`current` updated with MindSpore's set_algo_parameters keywords (unknown ones refused)."""
    known = [f.name for f in fields(AlgoParameters)]
    bad = sorted(set(kwargs) - set(known))
    if bad:
        raise ParasimError(f"set_algo_parameters: unknown or unmodelled option(s) {bad}; "
                           f"parasim models {known}")
    return AlgoParameters(**{**current.to_dict(), **kwargs})


def dataset_strategy_of(value, full_batch: bool):
    """The normalised dataset_strategy (module docstring), full_batch=True folded in."""
    check_bool("full_batch", full_batch)
    if full_batch:
        if value not in (None, "full_batch"):
            raise ParasimError(f"full_batch=True contradicts dataset_strategy {value!r}")
        return "full_batch"
    if value is None or value in ("data_parallel", "full_batch"):
        return value
    if isinstance(value, tuple) and value and all(isinstance(v, tuple) and len(v) == 2
                                                  and isinstance(v[0], str) for v in value):
        value = dict(value)  # the normalised named form
    if isinstance(value, dict):
        return tuple(sorted((str(k), _strategy_tuple(k, v)) for k, v in value.items()))
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (tuple, list)) for v in value):
        return tuple(_strategy_tuple(i, v) for i, v in enumerate(value))
    raise ParasimError(f"dataset_strategy must be 'data_parallel', 'full_batch', or one shard tuple "
                       f"per network input, got {value!r}")


def _strategy_tuple(where, v) -> tuple[int, ...]:
    if not isinstance(v, (tuple, list)) or not all(is_int(x) and x >= 1 for x in v):
        raise ParasimError(f"dataset_strategy: the strategy of input {where!r} must be a tuple of "
                           f"integers >= 1, got {v!r}")
    return tuple(v)
