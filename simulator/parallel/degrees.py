"""One value for a parallel configuration, shared by the runtime (`TrainConfig`) and the cost model
(`ParallelConfig`): the degrees, the pipeline schedule, ZeRO, recomputation and sequence parallelism.

    Parallelism(dp=2, tp=2, pp=2, microbatches=4).mesh   # Mesh(pp=2, dp=2, ep=1, cp=1, tp=2)

Each rule about these fields is checked here, once, when the value is made, with one line naming the
rule and the numbers. Ranks and groups come from `simulator.mesh.DeviceMesh` in Megatron-LM's order
tp-cp-ep-dp-pp (tensor fastest). The dense layers see the mesh (pp, dp, cp, tp); the expert layers
see the same devices as Megatron-Core's expert rank generator does (MoE parallel folding, Liu et al.
2025): the t c d ranks of each stage cut into etp expert-tensor ranks (fastest), ep expert-parallel
ranks and t c d / (etp ep) expert-data ranks (`expert_mesh`); etp defaults to tp, as Megatron-LM's
--expert-tensor-parallel-size does, which makes ep divide dp x cp.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from numbers import Integral

from ..errors import ParasimError
from ..mesh import MEGATRON_ORDER, DeviceMesh, check_expert_layout, row_major_strides
from ..model_states import check_zero_stage
from ..vocabulary import with_aliases
from .schedule_registry import schedule_spec

RECOMPUTE = ("none", "selective", "full")   # Megatron-LM --recompute-granularity (none: keep activations)
DEGREES = ("dp", "tp", "pp", "cp", "ep")


def is_int(v) -> bool:
    """An integer and not a bool (devices=True is a mistake, not one device)."""
    return isinstance(v, Integral) and not isinstance(v, bool)


def check_positive(**values) -> None:
    """Each value must be an integer >= 1."""
    for name, v in values.items():
        if not (is_int(v) and v >= 1):
            raise ParasimError(f"{name} must be a positive integer, got {v!r}")


def check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ParasimError(f"unknown recompute {recompute!r}; known {', '.join(RECOMPUTE)}")


@with_aliases()
@dataclass(frozen=True)
class Parallelism:
    dp: int = 1                      # data-parallel size
    tp: int = 1                      # tensor-parallel size
    pp: int = 1                      # pipeline stages
    cp: int = 1                      # context-parallel size (each sequence split cp ways)
    ep: int = 1                      # expert-parallel size (ep x etp divides tp x cp x dp)
    microbatches: int = 1            # micro-batches per pipeline per step
    virtual_stages: int = 1          # model chunks per device (interleaved schedule)
    schedule: str = "1f1b"           # one of schedule_registry.SCHEDULES
    zero_stage: int = 0              # ZeRO stage over the data-parallel group
    recompute: str = "none"          # one of RECOMPUTE
    sequence_parallel: bool = False  # shard the non-tensor-parallel activations over the tp group
    etp: int | None = None           # expert-tensor-parallel size (None: tp, Megatron-LM's default)

    def __post_init__(self):
        check_positive(**{name: getattr(self, name) for name in DEGREES},
                       microbatches=self.microbatches, virtual_stages=self.virtual_stages)
        check_zero_stage(self.zero_stage)
        check_recompute(self.recompute)
        if self.sequence_parallel and self.tp == 1:
            raise ParasimError("sequence parallel needs tp > 1 (it shards along the tensor-parallel group)")
        if self.etp is not None:
            check_positive(etp=self.etp)
        check_expert_layout(self.tp, self.cp, self.dp, self.ep, self.expert_tp)
        schedule_spec(self.schedule).check(self.pp, self.microbatches, self.virtual_stages)  # name and rules

    @property
    def expert_tp(self) -> int:
        """The expert layers' tensor-parallel size: etp, or tp when not given (Megatron-LM)."""
        return self.tp if self.etp is None else self.etp

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shape(self) -> dict[str, int]:
        """{axis: size} of the dense layers' mesh in Megatron's order, slowest first (ep = 1)."""
        sizes = {"pp": self.pp, "dp": self.dp, "ep": 1, "cp": self.cp, "tp": self.tp}
        return {a: sizes[a] for a in MEGATRON_ORDER}

    @cached_property
    def mesh(self) -> DeviceMesh:
        """The dense layers' device mesh (built on first use: it lists every rank)."""
        return DeviceMesh.megatron(tp=self.tp, cp=self.cp, ep=1, dp=self.dp, pp=self.pp)

    @cached_property
    def expert_mesh(self) -> DeviceMesh:
        """The expert layers' view of the same devices: (pp, edp, ep, tp = etp)."""
        return DeviceMesh.megatron_experts(tp=self.tp, cp=self.cp, ep=self.ep, dp=self.dp, pp=self.pp, etp=self.etp)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """Rank distance of one step along pp, dp, ep, cp, tp (row-major on `mesh`, tp fastest)."""
        return row_major_strides(tuple(self.shape.values()))

    def rank(self, tp_index: int = 0, dp_index: int = 0, stage: int = 0, cp_index: int = 0) -> int:
        """The rank at these coordinates, as `mesh.rank_at` gives it (without listing every rank:
        the cost model asks this of configurations with 10^4-10^6 GPUs)."""
        s_pp, s_dp, _, s_cp, s_tp = self.strides
        return stage * s_pp + dp_index * s_dp + cp_index * s_cp + tp_index * s_tp
