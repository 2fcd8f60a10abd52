"""One value for a parallel configuration, shared by the runtime (`TrainConfig`) and the cost model
(`ParallelConfig`): the degrees, the pipeline schedule, ZeRO, recomputation and sequence parallelism.

    Parallelism(dp=2, tp=2, pp=2, microbatches=4).mesh   # Mesh(pp=2, dp=2, ep=1, cp=1, tp=2)

Each rule about these fields is checked here, once, when the value is made, with one line naming the
rule and the numbers. Ranks and groups come from `simulator.mesh.DeviceMesh` in Megatron-LM's order
tp-cp-ep-dp-pp (tensor fastest; the expert axis is carved out of the data-parallel ranks, as in
Megatron-Core, so `dp` counts every data-parallel rank and ep divides it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from numbers import Integral

from ..errors import ParasimError
from ..mesh import MEGATRON_ORDER, DeviceMesh, row_major_strides
from .schedule_registry import SCHEDULES, schedule_spec

RECOMPUTE = ("none", "selective", "full")   # Megatron-LM --recompute-granularity (none: keep activations)
ZERO_STAGES = (0, 1, 2, 3)
DEGREES = ("dp", "tp", "pp", "cp", "ep")


def is_int(v) -> bool:
    """An integer and not a bool (devices=True is a mistake, not one device)."""
    return isinstance(v, Integral) and not isinstance(v, bool)


def check_positive(**values) -> None:
    """Each value must be an integer >= 1."""
    for name, v in values.items():
        if not (is_int(v) and v >= 1):
            raise ParasimError(f"{name} must be a positive integer, got {v!r}")


def check_schedule(schedule: str, known: tuple[str, ...] = SCHEDULES) -> None:
    if schedule not in known:
        raise ParasimError(f"unknown schedule {schedule!r}; known: {', '.join(known)}")


def check_zero(stage) -> None:
    if not (is_int(stage) and stage in ZERO_STAGES):
        raise ParasimError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")


@dataclass(frozen=True)
class Parallelism:
    dp: int = 1                      # data-parallel ranks (including the expert-parallel ones)
    tp: int = 1                      # tensor-parallel size
    pp: int = 1                      # pipeline stages
    cp: int = 1                      # context-parallel size (each sequence split cp ways)
    ep: int = 1                      # expert-parallel size (divides dp)
    microbatches: int = 1            # micro-batches per pipeline per step
    virtual_stages: int = 1          # model chunks per device (interleaved schedule)
    schedule: str = "1f1b"           # one of schedule_registry.SCHEDULES
    zero: int = 0                    # ZeRO stage over the data-parallel group
    recompute: str = "none"          # one of RECOMPUTE
    sequence_parallel: bool = False  # shard the non-tensor-parallel activations over the tp group

    def __post_init__(self):
        check_positive(**{name: getattr(self, name) for name in DEGREES},
                       microbatches=self.microbatches, virtual_stages=self.virtual_stages)
        check_schedule(self.schedule)
        check_zero(self.zero)
        if self.recompute not in RECOMPUTE:
            raise ParasimError(f"unknown recompute {self.recompute!r}; known {', '.join(RECOMPUTE)}")
        if self.sequence_parallel and self.tp == 1:
            raise ParasimError("sequence parallel needs tp > 1 (it shards along the tensor-parallel group)")
        if self.dp % self.ep:
            raise ParasimError(f"expert-parallel size ep={self.ep} must divide dp={self.dp} (Megatron-Core "
                               f"carves the expert-parallel group out of the data-parallel ranks)")
        schedule_spec(self.schedule).check(self.pp, self.microbatches, self.virtual_stages)

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shape(self) -> dict[str, int]:
        """{axis: size} in Megatron's order, slowest first (the expert axis splits dp)."""
        sizes = {"pp": self.pp, "dp": self.dp // self.ep, "ep": self.ep, "cp": self.cp, "tp": self.tp}
        return {a: sizes[a] for a in MEGATRON_ORDER}

    @cached_property
    def mesh(self) -> DeviceMesh:
        """The device mesh (built on first use: it lists every rank)."""
        return DeviceMesh.megatron(tp=self.tp, cp=self.cp, ep=self.ep, dp=self.dp // self.ep, pp=self.pp)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """Rank distance of one step along pp, dp, ep, cp, tp (row-major on `mesh`, tp fastest)."""
        return row_major_strides(tuple(self.shape.values()))

    def rank(self, tp_index: int = 0, dp_index: int = 0, stage: int = 0, cp_index: int = 0) -> int:
        """The rank at these coordinates, as `mesh.rank_at` gives it (without listing every rank:
        the cost model asks this of configurations with 10^4-10^6 GPUs)."""
        s_pp, s_dp, s_ep, s_cp, s_tp = self.strides
        return (stage * s_pp + (dp_index // self.ep) * s_dp + (dp_index % self.ep) * s_ep + cp_index * s_cp
                + tp_index * s_tp)
