"""Exhaustive search over Megatron-style parallel configurations with the closed form.

The space is `search_space`'s table of axes (t, c, p and d, b, schedule and v, stage split, SP,
ZeRO, e; recomputation innermost), each axis's default values from `simulator.vocabulary.SEARCHED`.
So pipeline depths that do not divide the layers are tried with Megatron-LM's uneven splits
(--decoder-first/last-pipeline-num-layers) and with the embedding and loss counted in the split.
Each configuration is priced by `simulator.cost.analytic.estimate`; the result is that of pricing
every one of them (what is skipped cannot change it: docstring of `search_training`).
"""

from __future__ import annotations

from simulator.cost.analytic import estimate
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import MAX_GLOBAL_BATCH, Assumptions, ParallelConfig
from simulator.cost.search_bound import Pricer, Tally
from simulator.cost.search_result import Alternative, Candidate, ConfigSearchResult, step_components, why_slower
from simulator.cost.search_space import (
    LAYOUT_AXES,
    LONG_SEQUENCE,
    STAGE_SPLITS,
    VARIANT_AXES,
    Space,
    default_context_parallel,
    default_stage_splits,
    searched,
    walk,
)
from simulator.errors import ParasimError
from simulator.limits import MAX_SEARCH_GPUS
from simulator.vocabulary import BY_NAME, DEFAULTS, SEARCHED

__all__ = ["Alternative", "Candidate", "ConfigSearchResult", "LONG_SEQUENCE", "default_context_parallel",
           "search_configs", "search_training", "step_components", "why_slower"]


def _check_max_tp(max_tp, hw: Hardware) -> int:
    """The largest tensor-parallel size: `max_tp`, or one node's devices when None."""
    if max_tp is None:
        return hw.devices_per_node
    if isinstance(max_tp, bool) or not isinstance(max_tp, int) or max_tp < 1:
        raise ParasimError(f"max_tp must be an integer >= 1, got {max_tp}")
    return max_tp


def search_configs(model: ModelSpec | str, hardware: Hardware | str, gpus: int, global_batch: int, *,
                   max_tp: int | None = None, schedules=None, recomputes=None, micro_batch_sizes=None,
                   sequence_parallel: bool | None = None, zero_stages=None, assumptions: Assumptions | None = None,
                   top: int = 10) -> list[Candidate]:
    """The first search (lesson 11): the `top` fastest configurations that fit (fastest first) over
    t, p (dividing the layers evenly), d and b, every recomputation, each one priced. Defaults from
    the vocabulary: the default schedule and ZeRO stage (`DEFAULTS`), the searched recomputations
    and SP on where t > 1 (`SEARCHED`'s first value)."""
    model, hw = get_model(model), get_hardware(hardware)
    assumptions = (assumptions or Assumptions()).resolved(model)
    if gpus < 1 or global_batch < 1:
        raise ParasimError(f"gpus and global batch must be >= 1, got {gpus} and {global_batch}")
    schedules = tuple(schedules or (DEFAULTS["schedule"],))
    zero_stages = tuple(zero_stages if zero_stages is not None else (DEFAULTS["zero_stage"],))
    sp = SEARCHED["sequence_parallel"][0] if sequence_parallel is None else sequence_parallel
    space = Space(model, gpus, global_batch, _check_max_tp(max_tp, hw), (1,), None,
                  _sizes("micro_batch_sizes", micro_batch_sizes), schedules, (), ("even",), (sp,), zero_stages,
                  searched("recompute", recomputes))
    found = []
    for lay in walk(space, LAYOUT_AXES):
        for sched in schedules:
            for rc in space.recomputes:
                for z in zero_stages:
                    try:
                        cfg = ParallelConfig(**lay, global_batch=global_batch, schedule=sched, recompute=rc,
                                             zero_stage=z, sequence_parallel=sp and lay["tp"] > 1)
                    except ParasimError:
                        continue
                    res = estimate(model, cfg, hw, assumptions)
                    if not res.oom:
                        found.append(Candidate(cfg, res))
    found.sort(key=lambda c: c.result.step_time_s)
    return found[:top]


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


def _space(model: ModelSpec, hw: Hardware, gpus: int, global_batch: int, max_tp, schedules, max_virtual_stages,
           recomputes, micro_batch_sizes, sequence_parallel, zero_stages, context_parallel, expert_parallel,
           stage_splits, fsdp=None, expert_tp=None) -> Space:
    """The search's `Space`: the arguments checked (one line each), None replaced by `SEARCHED`."""
    cps = _sizes("context_parallel", context_parallel) or default_context_parallel(model, gpus)
    eps = _sizes("expert_parallel", expert_parallel)
    if eps and max(eps) > 1 and not model.num_experts:
        raise ParasimError(f"expert_parallel {list(eps)} needs a mixture-of-experts model (num_experts > 0); "
                           f"{model.name} is dense")
    if max_virtual_stages is None:
        vs = searched("virtual_stages", None)
    elif isinstance(max_virtual_stages, bool) or not isinstance(max_virtual_stages, int) or max_virtual_stages < 1:
        raise ParasimError(f"max_virtual_stages must be an integer >= 1, got {max_virtual_stages!r}")
    else:
        vs = tuple(range(2, max_virtual_stages + 1))
    splits = default_stage_splits() if stage_splits is None else tuple(stage_splits)
    unknown = [x for x in splits if x not in STAGE_SPLITS]
    if unknown or not splits:
        raise ParasimError(f"unknown stage split(s) {unknown or list(splits)}; choose from {', '.join(STAGE_SPLITS)}")
    return Space(model, gpus, global_batch, _check_max_tp(max_tp, hw), cps, eps, _sizes("micro_batch_sizes",
                 micro_batch_sizes), searched("schedule", schedules), vs, tuple(splits),
                 searched("sequence_parallel", sequence_parallel), searched("zero_stage", zero_stages),
                 searched("recompute", recomputes), _fsdp(fsdp), _etp(model, expert_tp))


def _etp(model: ModelSpec, given) -> tuple[int, ...] | None:
    """The expert-tensor-parallel sizes to try (None: `search_space`'s rule); MoE models only."""
    sizes = _sizes("expert_tensor_parallel", given)
    if sizes and not model.num_experts:
        raise ParasimError(f"expert_tensor_parallel {list(sizes)} needs a mixture-of-experts model (num_experts > 0); "
                           f"{model.name} is dense")
    return sizes


def _fsdp(given) -> tuple[str, ...]:
    """The FSDP implementations to try with ZeRO-3 (default `SEARCHED`), each one ParallelConfig knows."""
    out = searched("fsdp", given)
    known = BY_NAME["fsdp"].choices
    if not out or any(f not in known for f in out):
        raise ParasimError(f"fsdp must be a non-empty list of {', '.join(known)}, got {given!r}")
    return out


def search_training(model: ModelSpec | str, hardware: Hardware | str, gpus: int, global_batch: int, *,
                    max_tp: int | None = None, schedules=None, max_virtual_stages: int | None = None,
                    recomputes=None, micro_batch_sizes=None, sequence_parallel=None, zero_stages=None,
                    context_parallel=None, expert_parallel=None, expert_tensor_parallel=None, stage_splits=None,
                    fsdp=None,
                    assumptions: Assumptions | None = None, top: int = 10, progress=None,
                    prune: bool = True) -> ConfigSearchResult:
    """Search every configuration of `search_space` (its axes: t, c, p, d = gpus/(t c p), b and so
    m = B/(b d), schedule and v, stage split, SP, ZeRO stage and FSDP, etp and e, recomputation) with
    `analytic.estimate`. Each list argument left None takes the vocabulary's `SEARCHED` values;
    `context_parallel` defaults to `default_context_parallel`, `expert_parallel` and
    `expert_tensor_parallel` to `search_space`'s etp, e rule (parallel folding), `stage_splits` to `default_stage_splits`, `max_virtual_stages`
    to the largest searched v.

    Recomputation is tried none, selective, full and the first that fits ends the chain (each adds
    work). With `prune` (the default) a configuration is built, checked for memory and priced only
    when a lower bound on its step time says it can change the answer (`search_bound`: branch and
    bound, exactly the exhaustive walk's result, which `prune=False` prices one by one).
    `progress(done, total, note)` is told after each (t, c, p, d, b) layout.
    """
    model, hw = get_model(model), get_hardware(hardware)
    assumptions = (assumptions or Assumptions()).resolved(model)    # once, not per candidate
    _check_search(gpus, global_batch, top)
    space = _space(model, hw, gpus, global_batch, max_tp, schedules, max_virtual_stages, recomputes,
                   micro_batch_sizes, sequence_parallel, zero_stages, context_parallel, expert_parallel, stage_splits,
                   fsdp, expert_tensor_parallel)
    layouts = list(walk(space, LAYOUT_AXES))
    if not layouts:
        raise ParasimError(
            f"no parallel layout of {model.name} on {gpus} GPUs: tp must be a power of two <= {space.max_tp} "
            f"dividing the {model.heads} heads and the GPUs, pp must split the {model.layers} layers, and "
            f"b x dp must divide the global batch {global_batch}; none of these combinations exists")
    order = [rc for rc in ("none", "selective", "full") if rc in space.recomputes]
    tally, seen = Tally(top), {}
    pricer = Pricer(model, hw, assumptions, global_batch, tuple(order), tally, prune)
    index, plan = 0, []                      # per layout: (its best bound, [(bound, index, var, bounds)])
    for lay in layouts:
        rows = []
        for var in walk(space, VARIANT_AXES, lay):
            for name, value in var.items():
                seen.setdefault(name, set()).add(value)
            lows = pricer.lows(var)
            rows.append((min(lows), index, var, lows))
            index += len(order)
        tally.considered += len(rows) * len(order)
        if prune:       # best bound first (`search_bound`); the exhaustive walk keeps the table's order
            rows.sort(key=lambda r: r[:2])
        plan.append((rows[0][:2] if rows else (0.0, index), rows))
    if prune:
        plan.sort(key=lambda lr: lr[0])
    for k, (_low, rows) in enumerate(plan, 1):
        for _l, i, var, lows in rows:
            pricer.price(var, i, lows)
        if progress:
            progress(k, len(layouts), f"{tally.evaluated:,} priced of {tally.considered:,} configurations")
    pricer.finish()
    if not tally.fits:
        least = tally.oom_least
        detail = f"; the least memory needs {least[1]!r} with {least[0]!r}" if least else ""
        raise ParasimError(f"no configuration of {model.name} fits on {gpus} x {hw.name} with global batch "
                           f"{global_batch}{detail}")
    fits = tally.ranked_fits()
    alts = _alternatives(fits, tally.ranked_oom(), assumptions.overlap_tp_comm)
    seen["recompute"] = set(order)
    axes = {name: tuple(sorted(v)) for name, v in seen.items()}
    return ConfigSearchResult(tuple(fits[:top]), tuple(alts), tally.evaluated, tally.considered, axes,
                              tally.infeasible, tally.bounded)
