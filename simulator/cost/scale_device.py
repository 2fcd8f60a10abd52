"""The clock's device model of a scale program (`scale_program`): one data-parallel replica priced
on the full cluster.

How the symmetric replicas are priced (the brief's "device model whose link() knows the real group
placement"): the program holds one data-parallel replica, program rank k t + i = stage k, TP index
i (or one rank per stage, k, when tensor-parallel ranks are folded too). `global_rank` maps it to
Megatron's layout rank(i, j=0, k) = k t d + i, so `link()` answers with the real intra-/inter-node
link between the real ranks. A collective that stands for the whole data-parallel (or folded
tensor-parallel) group is written as a group of one rank with tag "dp" / "tp"; the clock asks
`price_collective(ins)`, which prices it with `comm.collective_time_s` over the real global group
[rank(i, j, k) for j in range(d)] of that rank on the full cluster's topology (hierarchical across
nodes), and reports the bytes each member sends (nccl-tests bus factor x S).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.cost.comm import NVLS, bus_bandwidth_factor
from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.moe import moe_collective_time_s, moe_group
from simulator.cost.parallel_config import ParallelConfig
from simulator.errors import ParasimError


@dataclass(frozen=True, eq=False)
class ScaleDeviceModel:
    """The clock's device model for one replica of a (t, p, d) configuration on the full cluster.

    `base` is the HardwareDeviceModel of the whole cluster (t p d devices); `fold_tp` says whether
    the program has one rank per stage (TP collectives then stand for the real TP group too)."""

    base: HardwareDeviceModel
    config: ParallelConfig
    fold_tp: bool = False
    collective_algo: str = "ring"
    nvls: bool = True        # all-reduces inside one node use NVLink SHARP where the hardware has it
    stack: object = None     # the software stack whose kernels these are (`simulator.cost.stack`; None: default)
    routing: tuple = (0, 0)  # the model's (experts, top-k), for flex's dispatch (`moe.moe_collective_time_s`)
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.base.n_devices != self.config.gpus:
            raise ParasimError(f"device model covers {self.base.n_devices} devices but the configuration "
                               f"uses tp x pp x dp = {self.config.gpus}")
        object.__setattr__(self, "_topology", self.base.topology)

    @property
    def width(self) -> int:
        """Program ranks per pipeline stage."""
        return 1 if self.fold_tp else self.config.tp

    def global_rank(self, local: int) -> int:
        """Program rank k w + i -> Megatron rank of (tp i, dp 0, stage k)."""
        k, i = divmod(local, self.width)
        return self.config.rank(i, 0, k)

    def compute_time_s(self, ins) -> float:
        kern = ins.attrs.get("kernel") if ins.attrs else None
        if kern is None:
            return self.base.compute_time_s(ins)
        t = self._cache.get(kern)
        if t is None:
            t = self._cache[kern] = kern.time_s(self.base.hardware, self.base.dtype, self.stack)
        return t

    def link(self, src: int, dst: int) -> tuple[float, float]:
        """The link between the real ranks; a program rank sending to itself stands for its
        context-parallel ring (`scale_cp`, its ranks symmetric): the ring's slowest hop."""
        if src != dst:
            return self._topology.link_of(self.global_rank(src), self.global_rank(dst))
        k, i = divmod(src, self.width)
        ring = self.config.cp_group(i, 0, k)
        hops = [self._topology.link_of(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a != b]
        return max(hops, key=lambda lb: (lb[0] + 1.0 / lb[1], lb[0])) if hops else (0.0, float("inf"))

    def real_group(self, ins) -> list[int] | None:
        """The global ranks a one-member collective tagged dp/tp stands for (None: price as written)."""
        if len(ins.group) != 1 or ins.tag not in ("dp", "dpr", "edp", "tp", "cp", "ep", "ep_flex", "etp", "tp_ep"):
            return None
        cfg = self.config
        k, i = divmod(ins.group[0], self.width)
        if ins.tag == "dp":          # HSDP: FSDP's gathers and reduce-scatters stay in the shard group
            return cfg.shard_group(i, k) if cfg.dp_replicate > 1 else cfg.dp_cp_group(i, k)
        if ins.tag == "dpr":         # HSDP: the replicas' all-reduce of a shard (`simulator.cost.fsdp`)
            return cfg.replicate_group(i, k)
        if ins.tag == "edp":        # the expert-data-parallel group (`ParallelConfig.edp_group`)
            return cfg.edp_group(i, k)
        if ins.tag == "cp":
            return cfg.cp_group(i, 0, k)
        if ins.tag in ("ep", "ep_flex", "etp", "tp_ep"):     # the MoE groups (`cost.moe.moe_group`)
            return moe_group(cfg, ins.tag, i, k)
        return cfg.tp_group(0, k) if self.fold_tp else None

    def price_collective(self, ins) -> tuple[float, int] | None:
        """(time_s, bytes each member sends) of a collective standing for a real group, else None."""
        key = (ins.kind, ins.tag, ins.group, ins.nbytes)
        if key in self._cache:
            return self._cache[key]
        group = self.real_group(ins)
        algo = ins.algo or self.collective_algo
        nvls = self.nvls and ins.kind == "all_reduce" and not ins.algo
        if group is None:
            if not (nvls and len(ins.group) > 1 and self._topology.nvls_allreduce_gain.get(len(ins.group), 1.0) > 1):
                return None
            group = [self.global_rank(r) for r in ins.group]   # an in-node all-reduce with NVLS
        n = len(group)
        whole = ins.nbytes * n if ins.kind == "all_gather" else ins.nbytes
        t = moe_collective_time_s(ins.kind, ins.tag, whole, group, self._topology, NVLS if nvls else algo,
                                  *self.routing)
        sent = int(bus_bandwidth_factor(ins.kind, n) * whole) if n > 1 else 0
        self._cache[key] = (t, sent)
        return t, sent
