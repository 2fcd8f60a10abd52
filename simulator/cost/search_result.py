"""What a configuration search returns: the fastest fits (`Candidate`), the layouts that lose and why
(`Alternative`, `why_slower`), the counts and the space searched (`ConfigSearchResult`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.cost.analytic import AnalyticResult
from simulator.cost.parallel_config import ParallelConfig


@dataclass(frozen=True)
class Candidate:
    config: ParallelConfig
    result: AnalyticResult

    def to_dict(self) -> dict:
        """Plain data: the configuration's fields, then the result's (`AnalyticResult.to_dict`)."""
        return {**dataclasses.asdict(self.config), **self.result.to_dict()}

    def __repr__(self) -> str:
        r = self.result
        return (f"{self.config!r}: {r.step_time_s:.4g} s, {r.tflops_per_gpu:.4g} TFLOP/s/GPU, "
                f"MFU {r.mfu:.1%}, {r.memory_per_gpu_bytes / 1e9:.3g} GB")


@dataclass(frozen=True)
class Alternative:
    """A configuration that did not win, and why: OOM by how much, or slower by x% because of ..."""

    config: ParallelConfig
    result: AnalyticResult
    reason: str

    def to_dict(self) -> dict:
        """Plain data: the configuration's fields, the result's, and the reason."""
        return {**dataclasses.asdict(self.config), **self.result.to_dict(), "reason": self.reason}

    def __repr__(self) -> str:
        return f"{self.config!r}: {self.reason}"


@dataclass(frozen=True)
class ConfigSearchResult:
    """`top`: the fastest configurations that fit, fastest first. `alternatives`: the best
    configuration of every other (t, p, d) layout with the reason it loses to top[0] ("slower by
    x%: ..."), then, per layout, the fastest configuration that would beat that layout's best but
    does not fit ("OOM by ... GB"). `considered`: enumerated, the size of the space searched;
    `evaluated`: configurations priced by the closed form; `infeasible`: checked for memory, found
    not to fit and not priced; `bounded`: skipped by the lower bound on the step time
    (`search_bound`). The rest were not priced because a lighter recomputation of them fits, or the
    closed form refused them. `space`: every value each axis took (`search_space`)."""

    top: tuple[Candidate, ...]
    alternatives: tuple[Alternative, ...]
    evaluated: int
    considered: int
    space: dict = dataclasses.field(default_factory=dict)
    infeasible: int = 0
    bounded: int = 0

    @property
    def best(self) -> Candidate:
        return self.top[0]

    def counts(self) -> str:
        """'98,235 configurations considered: 20,025 priced, 1,769 not fitting in memory (not priced),
        59,932 skipped by the bound ...' (`counts_text` of `to_dict`'s numbers)."""
        return counts_text(self.to_dict())

    def to_dict(self) -> dict:
        """Plain data (JSON-able): every number of the result, tables as dicts."""
        def row(c, reason=None):
            r = c.result
            d = {"config": repr(c.config), "tp": c.config.tp, "pp": c.config.pp, "dp": c.config.dp,
                 "micro_batch_size": c.config.micro_batch_size, "microbatches": c.config.microbatches,
                 "schedule": c.config.schedule, "virtual_stages": c.config.virtual_stages,
                 "recompute": c.config.recompute, "sequence_parallel": c.config.sequence_parallel,
                 "zero_stage": c.config.zero_stage, "fsdp": c.config.fsdp, "cp": c.config.cp, "ep": c.config.ep, "etp": c.config.etp,
                 "first_stage_layers": c.config.first_stage_layers, "last_stage_layers": c.config.last_stage_layers,
                 "balance_embedding": c.config.balance_embedding,
                 "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
                 "tflops_per_gpu": r.tflops_per_gpu, "mfu": r.mfu, "bubble_fraction": r.bubble_fraction,
                 "exposed_comm_s": r.exposed_comm_s, "memory_per_gpu_bytes": r.memory_per_gpu_bytes,
                 "memory_headroom_bytes": r.memory.capacity_bytes - r.memory_per_gpu_bytes, "oom": r.oom}
            if reason is not None:
                d["reason"] = reason
            return d
        return {"top": [row(c) for c in self.top], "alternatives": [row(a, a.reason) for a in self.alternatives],
                "evaluated": self.evaluated, "considered": self.considered, "infeasible": self.infeasible,
                "bounded": self.bounded,
                "space": {k: list(v) for k, v in self.space.items()}}

    as_dict = to_dict  # the older name


def counts_text(d: dict) -> str:
    """The counts of a search result's plain data (`ConfigSearchResult.to_dict`) in one sentence."""
    return (f"{d['considered']:,} configurations considered: {d['evaluated']:,} priced, {d['infeasible']:,} not "
            f"fitting in memory (not priced), {d['bounded']:,} skipped by the bound (they cannot change the answer)")


def step_components(r: AnalyticResult, overlap_tp: bool = False) -> dict[str, float]:
    """The step time of an analytic result split into what a reason can name (sums to the step)."""
    tp = 0.0 if overlap_tp else r.comm_time_by_kind["tensor_parallel"]
    p2p, emb = r.comm_time_by_kind["pipeline_p2p"], r.comm_time_by_kind["embedding_all_reduce"]
    return {"compute": r.compute_time_s - tp, "tensor-parallel communication": tp, "pipeline bubble": r.bubble_time_s,
            "pipeline p2p": p2p, "data-parallel communication": max(0.0, r.exposed_comm_s - tp - p2p - emb),
            "embedding all-reduce": emb, "optimizer": r.optimizer_time_s}


def why_slower(best: AnalyticResult, other: AnalyticResult, overlap_tp: bool = False) -> str:
    """'OOM by 3.2 GB (83.2 of 80 GB)' or 'slower by 12.3%: +0.81 s pipeline bubble, +0.2 s ...'."""
    if other.oom:
        mem = other.memory
        return (f"OOM by {(mem.total_bytes - mem.capacity_bytes) / 1e9:.3g} GB ({mem.total_bytes / 1e9:.4g} of "
                f"{mem.capacity_bytes / 1e9:.4g} GB)")
    pct = (other.step_time_s / best.step_time_s - 1) * 100
    a, b = step_components(best, overlap_tp), step_components(other, overlap_tp)
    deltas = sorted(((b[k] - a[k], k) for k in a), reverse=True)
    parts = [f"+{d:.3g} s {k}" for d, k in deltas[:2] if d > 1e-4 * best.step_time_s]
    return f"slower by {pct:.1f}%" + (": " + ", ".join(parts) if parts else "")


