"""Brute-force search over Megatron-style parallel configurations with the analytic model.

Enumerates t (powers of two dividing the heads, at most `max_tp`), c (context-parallel sizes,
powers of two; by default only for sequences of 16k tokens and more), p (dividing the layers),
d = gpus / (t c p), micro-batch size b (powers of two with B divisible by b d), expert-parallel
sizes e (MoE models: dividing the experts and d; or the sizes given), schedule and recompute, keeps those that fit in
memory and returns them fastest first. ZeRO-2/3 are tried without a pipeline only (refused with
one, as DeepSpeed does). Each evaluation is
`simulator.cost.analytic.estimate` (well under a millisecond), so a few thousand candidates
cost about a second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.cost.analytic import AnalyticResult, estimate
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import MAX_GLOBAL_BATCH, Assumptions, ParallelConfig
from simulator.errors import ParasimError
from simulator.limits import MAX_SEARCH_GPUS
from simulator.parallel.schedule_registry import PRICED_SCHEDULES, schedule_spec


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


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


LONG_SEQUENCE = 16384   # from here on the search tries context parallelism by default


def default_context_parallel(model: ModelSpec, gpus: int) -> tuple[int, ...]:
    """c = 1, and for sequences >= LONG_SEQUENCE every power of two up to 32 with s divisible by 2c."""
    if model.seq < LONG_SEQUENCE:
        return (1,)
    return tuple(c for c in _powers_of_two(min(32, gpus)) if model.seq % (2 * c) == 0)


def _expert_parallel(model: ModelSpec, d: int) -> list[int]:
    experts = getattr(model, "num_experts", 0)
    return [e for e in _powers_of_two(d) if experts and experts % e == 0 and d % e == 0] or [1]


def _layouts(model: ModelSpec, gpus: int, global_batch: int, max_tp: int, micro_batch_sizes=None,
             context_parallel=(1,)):
    """Every (t, p, d, b, c): t a power of two dividing the heads, KV heads and the GPUs, c a
    context-parallel size, p dividing the layers and gpus / (t c), d = gpus / (t c p), b a
    micro-batch size with b d dividing the global batch."""
    for t in _powers_of_two(min(max_tp, gpus)):
        if model.heads % t or model.kv_heads % t or gpus % t:
            continue
        for c in context_parallel:
            if (gpus // t) % c:
                continue
            rest = gpus // (t * c)
            for p in (p for p in range(1, rest + 1) if rest % p == 0 and model.layers % p == 0):
                d = rest // p
                for b in micro_batch_sizes or _powers_of_two(global_batch):
                    if global_batch % (b * d) == 0:
                        yield t, p, d, b, c


def _check_max_tp(max_tp, hw: Hardware) -> int:
    """The largest tensor-parallel size: `max_tp`, or one node's devices when None."""
    if max_tp is None:
        return hw.devices_per_node
    if isinstance(max_tp, bool) or not isinstance(max_tp, int) or max_tp < 1:
        raise ParasimError(f"max_tp must be an integer >= 1, got {max_tp}")
    return max_tp


def search_configs(model: ModelSpec | str, hardware: Hardware | str, gpus: int, global_batch: int, *,
                   max_tp: int | None = None, schedules=("1f1b",), recomputes=("none", "selective", "full"),
                   micro_batch_sizes=None, sequence_parallel: bool = True, zero_stages=(0,),
                   assumptions: Assumptions | None = None, top: int = 10) -> list[Candidate]:
    """The `top` fastest configurations that fit in device memory (fastest first)."""
    model, hw = get_model(model), get_hardware(hardware)
    assumptions = (assumptions or Assumptions()).resolved(model)
    if gpus < 1 or global_batch < 1:
        raise ParasimError(f"gpus and global batch must be >= 1, got {gpus} and {global_batch}")
    found = []
    for t, p, d, b, _c in _layouts(model, gpus, global_batch, _check_max_tp(max_tp, hw), micro_batch_sizes):
        for sched in schedules:
            for rc in recomputes:
                for z in zero_stages:
                    try:
                        cfg = ParallelConfig(tp=t, pp=p, dp=d, micro_batch_size=b, global_batch=global_batch,
                                             schedule=sched, recompute=rc, zero_stage=z,
                                             sequence_parallel=sequence_parallel and t > 1)
                    except ParasimError:
                        continue
                    res = estimate(model, cfg, hw, assumptions)
                    if not res.oom:
                        found.append(Candidate(cfg, res))
    found.sort(key=lambda c: c.result.step_time_s)
    return found[:top]


# ---- the full training-configuration search ------------------------------------------------------

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
    does not fit ("OOM by ... GB"). `evaluated`: configurations timed; `considered`: enumerated (a
    configuration is not timed when a cheaper recomputation of it already fits)."""

    top: tuple[Candidate, ...]
    alternatives: tuple[Alternative, ...]
    evaluated: int
    considered: int

    @property
    def best(self) -> Candidate:
        return self.top[0]

    def to_dict(self) -> dict:
        """Plain data (JSON-able): every number of the result, tables as dicts."""
        def row(c, reason=None):
            r = c.result
            d = {"config": repr(c.config), "tp": c.config.tp, "pp": c.config.pp, "dp": c.config.dp,
                 "micro_batch_size": c.config.micro_batch_size, "microbatches": c.config.microbatches,
                 "schedule": c.config.schedule, "virtual_stages": c.config.virtual_stages,
                 "recompute": c.config.recompute, "sequence_parallel": c.config.sequence_parallel,
                 "zero_stage": c.config.zero_stage, "cp": c.config.cp, "ep": c.config.ep,
                 "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
                 "tflops_per_gpu": r.tflops_per_gpu, "mfu": r.mfu, "bubble_fraction": r.bubble_fraction,
                 "exposed_comm_s": r.exposed_comm_s, "memory_per_gpu_bytes": r.memory_per_gpu_bytes,
                 "memory_headroom_bytes": r.memory.capacity_bytes - r.memory_per_gpu_bytes, "oom": r.oom}
            if reason is not None:
                d["reason"] = reason
            return d
        return {"top": [row(c) for c in self.top], "alternatives": [row(a, a.reason) for a in self.alternatives],
                "evaluated": self.evaluated, "considered": self.considered}

    as_dict = to_dict  # the older name


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


def _interleave_options(model: ModelSpec, p: int, m: int, max_v: int) -> list[int]:
    if p == 1 or m % p:
        return []
    return [v for v in range(2, max_v + 1) if model.layers % (p * v) == 0]


def _check_search(gpus, global_batch, top) -> None:
    """Refuses what the search cannot bound: non-positive or too large sizes, top < 1."""
    if not isinstance(gpus, int) or gpus < 1 or not isinstance(global_batch, int) or global_batch < 1:
        raise ParasimError(f"gpus and global batch must be positive integers, got {gpus} and {global_batch}")
    if gpus > MAX_SEARCH_GPUS or global_batch > MAX_GLOBAL_BATCH:
        raise ParasimError(f"search is bounded to {MAX_SEARCH_GPUS:,} GPUs and a global batch of {MAX_GLOBAL_BATCH:,}; "
                           f"got {gpus:,} GPUs and {global_batch:,}")
    if top < 1:
        raise ParasimError(f"top must be >= 1, got {top}")


def _sizes(name: str, values) -> tuple[int, ...] | None:
    """A list of sizes to search (None: the default); refuses anything but positive integers."""
    if values is None:
        return None
    out = tuple(values)
    if not out or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in out):
        raise ParasimError(f"{name} must be a non-empty list of positive integers, got {values!r}")
    return out


def _experts_searched(model: ModelSpec, d: int, expert_parallel) -> list[int]:
    """The e to try on d data-parallel ranks: the given sizes that divide d (and the experts), or
    by default every power of two dividing both; 1 for dense models."""
    if expert_parallel is None:
        return _expert_parallel(model, d)
    if not model.num_experts:
        return [1]
    return [e for e in expert_parallel if d % e == 0 and model.num_experts % e == 0]


def _variants(model, schedules, sequence_parallel, zero_stages, expert_parallel, max_v, t, p, d, m):
    """Every (schedule, v, SP, ZeRO, e) of one layout (t, p, d) with m micro-batches: interleaved
    with each v that splits the layers; with one stage only 1F1B (every schedule is the same);
    ZeRO >= 1 needs d > 1, ZeRO-2/3 no pipeline (DeepSpeed)."""
    scheds = []
    for s in schedules:
        if schedule_spec(s, priced=True).virtual_stages:
            scheds += [(s, v) for v in _interleave_options(model, p, m, max_v)]
        elif p > 1 or s == "1f1b":
            scheds.append((s, 1))
    for sched, v in scheds:
        for sp in sorted({bool(x) and t > 1 for x in sequence_parallel}):
            for z in (z for z in zero_stages if (d > 1 or z == 0) and (p == 1 or z < 2)):
                for e in _experts_searched(model, d, expert_parallel):
                    yield sched, v, sp, z, e


class _Tally:
    """What the search keeps while it prices: the fits, per layout the fastest configuration that
    does not fit, the one needing the least memory overall, and the counts."""

    def __init__(self):
        self.fits, self.oom_fastest, self.oom_least = [], {}, None
        self.evaluated = self.considered = 0

    def add(self, cand: Candidate) -> bool:
        """Records a priced configuration; True when it fits."""
        self.evaluated += 1
        res, cfg = cand.result, cand.config
        if not res.oom:
            self.fits.append(cand)
            return True
        key = (cfg.tp, cfg.pp, cfg.dp, cfg.cp)
        if key not in self.oom_fastest or res.step_time_s < self.oom_fastest[key].result.step_time_s:
            self.oom_fastest[key] = cand
        if self.oom_least is None or res.memory_per_gpu_bytes < self.oom_least.result.memory_per_gpu_bytes:
            self.oom_least = cand
        return False


def _alternatives(fits: list[Candidate], oom_fastest: dict, overlap_tp: bool) -> list[Alternative]:
    """The best fit of every other (t, p, d, c) layout with why it loses to fits[0], then the
    configurations faster than their layout's best fit (or with no fit at all) that do not fit."""
    best = fits[0]
    layout_best: dict = {}
    for c in fits:
        layout_best.setdefault((c.config.tp, c.config.pp, c.config.dp, c.config.cp), c)
    alts = [Alternative(c.config, c.result, why_slower(best.result, c.result, overlap_tp))
            for c in layout_best.values() if c is not best]
    alts += [Alternative(c.config, c.result, why_slower(best.result, c.result, overlap_tp))
             for key, c in sorted(oom_fastest.items(), key=lambda kv: kv[1].result.step_time_s)
             if key not in layout_best or c.result.step_time_s < layout_best[key].result.step_time_s]
    return alts


def search_training(model: ModelSpec | str, hardware: Hardware | str, gpus: int, global_batch: int, *,
                    max_tp: int | None = None, schedules=PRICED_SCHEDULES,
                    max_virtual_stages: int = 4, recomputes=("none", "selective", "full"),
                    micro_batch_sizes=None, sequence_parallel=(True, False), zero_stages=(0, 1, 2, 3),
                    context_parallel=None, expert_parallel=None, assumptions: Assumptions | None = None,
                    top: int = 10, progress=None) -> ConfigSearchResult:
    """Search t, c, p, d = gpus/(t c p), b (and so m = B/(b d)), e (MoE), schedule (interleaved with
    v = 2..max_v), ZeRO stage, recomputation and sequence parallelism with `analytic.estimate`.
    `context_parallel`: the c to try (default `default_context_parallel`); `expert_parallel`: the
    e to try, each where it divides d and the experts (default every power of two that does).

    Pruning that cannot change the answer: for fixed other knobs, recompute none < selective <
    full in step time (each adds work), so only the least recomputation that fits is timed.
    `progress(done, total, note)` is told after each (t, p, d, b, c) layout.
    """
    model, hw = get_model(model), get_hardware(hardware)
    assumptions = (assumptions or Assumptions()).resolved(model)    # once, not per candidate
    _check_search(gpus, global_batch, top)
    max_tp = _check_max_tp(max_tp, hw)
    cps = _sizes("context_parallel", context_parallel) or default_context_parallel(model, gpus)
    eps = _sizes("expert_parallel", expert_parallel)
    if eps and max(eps) > 1 and not model.num_experts:
        raise ParasimError(f"expert_parallel {list(eps)} needs a mixture-of-experts model (num_experts > 0); "
                           f"{model.name} is dense")
    layouts = list(_layouts(model, gpus, global_batch, max_tp, micro_batch_sizes, cps))
    if not layouts:
        raise ParasimError(
            f"no parallel layout of {model.name} on {gpus} GPUs: tp must be a power of two <= {max_tp} "
            f"dividing the {model.heads} heads and the GPUs, pp must divide the {model.layers} layers, and "
            f"b x dp must divide the global batch {global_batch}; none of these combinations exists")
    order = [rc for rc in ("none", "selective", "full") if rc in recomputes]
    tally = _Tally()
    for k, (t, p, d, b, c) in enumerate(layouts, 1):
        m = global_batch // (b * d)
        for sched, v, sp, z, e in _variants(model, schedules, sequence_parallel, zero_stages, eps,
                                            max_virtual_stages, t, p, d, m):
            tally.considered += len(order)
            for rc in order:
                try:
                    cfg = ParallelConfig(tp=t, pp=p, dp=d, micro_batch_size=b, global_batch=global_batch,
                                         schedule=sched, virtual_stages=v, recompute=rc,
                                         sequence_parallel=sp, zero_stage=z, cp=c, ep=e)
                    res = estimate(model, cfg, hw, assumptions)
                except ParasimError:    # e.g. a sequence c cannot split, an fp8 peak missing
                    break
                if tally.add(Candidate(cfg, res)):
                    break
        if progress:
            progress(k, len(layouts), f"{tally.considered:,} configurations")
    if not tally.fits:
        least = tally.oom_least
        detail = f"; the least memory needs {least.result.memory!r} with {least.config!r}" if least else ""
        raise ParasimError(f"no configuration of {model.name} fits on {gpus} x {hw.name} with global batch "
                           f"{global_batch}{detail}")
    fits = sorted(tally.fits, key=lambda c: c.result.step_time_s)
    alts = _alternatives(fits, tally.oom_fastest, assumptions.overlap_tp_comm)
    return ConfigSearchResult(tuple(fits[:top]), tuple(alts), tally.evaluated, tally.considered)
