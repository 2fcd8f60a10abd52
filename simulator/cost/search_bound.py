"""Branch and bound for `search_training`: the exhaustive search's answer without pricing what
cannot change it.

The answer of the exhaustive walk (`search.search_training(..., prune=False)`) is: the `top`
fastest fits; per (t, p, d, c) layout its fastest fit; per layout the fastest timed configuration
that does not fit, shown when faster than that layout's fastest fit (or when the layout has none);
and, when nothing fits, the one needing the least memory. Recomputation is tried none, selective,
full, and the first that fits ends the chain (the lighter ones that do not fit are timed).

The bound. `estimate`'s step is a sum of parts that are each >= 0 (`step_breakdown`): m times the
slowest stage's F + B + W with its exposed tensor-, context- and expert-parallel communication,
then the bubble, p2p, data-parallel sync, the optimizer and host overhead. The slowest stage holds at
least as much as any stage's layers times one layer's F + B + W (`analytic.layer_times`, the same
function `estimate` uses; with `overlap_moe_comm` less the layer's exposed all-to-all, which the
overlap prices per stage, each >= 0); the bubble of GPipe, 1F1B and interleaved is a nondecreasing function of
the other stages' mean F, B, W, each at least the fewest layers of a stage times one layer's; the
zero-bubble forms (ZB-H1, ZB-H2) are bounded by their `bubble_floor` (nondecreasing in F and B,
nonincreasing in W), so W enters as at most the most layers times one layer's W plus the LM head's W
(what the last stage adds; with `Assumptions.grad_accum_bytes` > 0 their bubble counts 0). Hence, with f, b, w one layer's F, B, W and X = f + b + w,

    step >= m * max(stage layers) * X + bubble(p, m, lo(f), lo(b), lo(w) or hi(w), v)

To that it adds what every step pays besides: the largest stage's optimizer (the step waits for it),
and with p > 1 the least over the devices of the stage-boundary exchanges and what they add to the
fill (`analytic_comm.p2p_exposed`: the slowest device pays its own); and, except for the played
schedules (whose floor bounds the idle of a device of the most layers only), the last device's
layers times X plus the LM head's F + B + W, which the slowest stage holds at least as well. For a
mixed model's dense layers (`layer_kinds`) X takes the lesser of the two kinds' F, B, W (and the
greater W where the bubble falls with W).

X depends on (t, c, b, SP, e, etp, recomputation) only: computed once per such
sub-configuration and reused for every schedule, v, stage split and ZeRO stage under it
(`layer_times`' docstring). The bound is taken (1 - 1e-9) lower against rounding.

Order. Layouts (t, c, p, d, b) are priced best bound first, and a layout's variants likewise, so
the thresholds tighten early; results are ranked by (step, position in the walk), so ties keep
the exhaustive walk's order.

With ZeRO 0-1 (no FSDP) and neither `overlap_grad_reduce` nor `overlap_param_gather`, the exposed
data-parallel sync is the whole gradient all-reduce (or reduce-scatter and all-gather) of the
largest stage, independent of the stage times: the bound adds it too (`analytic_comm.dp_sync` itself).

What is skipped, each provably without effect on the answer:
  - a configuration whose bound exceeds both its layout's fastest fit so far and the `top`-th
    fastest fit so far (fit or not, it is in neither list, nor faster than the layout's fit);
    when every remaining recomputation of a variant is so bounded, none is even built;
  - a configuration that does not fit (memory is checked first, `analytic.estimate_memory`, the
    function that decides `estimate`'s `oom`) whose bound exceeds its layout's fastest fit or
    fastest non-fit so far.
Skips use strict inequalities, so ties keep the exhaustive order. The least-memory non-fit is kept
over every configuration whose memory was checked, which includes every one the walk would time
whenever nothing fits (a bound skip needs a fit).
"""

from __future__ import annotations

import heapq
import math

from simulator.cost.analytic import ADAM_BYTES_PER_PARAM, check_estimate, estimate, estimate_memory, layer_times
from simulator.cost.analytic_comm import dp_sync, p2p_exposed
from simulator.cost.compute import memory_time_s
from simulator.cost.layer_kinds import device_dense_layers, mixed
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.rank_params import stage_params_on_rank
from simulator.cost.search_result import Candidate
from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import schedule_spec

MARGIN = 1e-9     # relative: the bound is taken this much lower against floating-point rounding
INF = math.inf
# how a priced schedule's bubble (`schedule_registry`) moves with the stages' mean F, B, W:
# nondecreasing in all three, or, for a schedule that splits B and W (`ScheduleSpec.splits_bw`, the
# zero-bubble ones), nondecreasing in F and B and nonincreasing in W


class Tally:
    """What the search keeps while it prices: the fits, per layout the fastest fit and the fastest
    configuration that does not fit, the one needing the least memory overall, and the counts:
    `evaluated` (priced), `infeasible` (memory checked, does not fit, not priced), `bounded` (skipped
    by the bound), `considered` (the space)."""

    def __init__(self, top: int):
        self.fits, self.oom_fastest, self.oom_least = [], {}, None
        self.evaluated = self.considered = self.infeasible = self.bounded = 0
        self.top, self._heap, self.layout_best = top, [], {}
        self._oom_rank: dict = {}

    def kth(self) -> float:
        """The `top`-th fastest fit's step so far (inf until there are `top`)."""
        return -self._heap[0] if len(self._heap) >= self.top else INF

    def oom_step(self, key) -> float:
        """The fastest configuration of layout `key` that does not fit, so far (inf: none)."""
        return self._oom_rank[key][0] if key in self._oom_rank else INF

    def note_memory(self, cfg: ParallelConfig, memory, index: int) -> None:
        """Keeps the least memory of the configurations that do not fit (the first of equals in the walk)."""
        if self.oom_least is None or (memory.total_bytes, index) < self.oom_least[2]:
            self.oom_least = (cfg, memory, (memory.total_bytes, index))

    def add(self, cand: Candidate, index: int) -> bool:
        """Records a priced configuration, `index`-th in the walk; True when it fits."""
        self.evaluated += 1
        res, cfg = cand.result, cand.config
        key = (cfg.tp, cfg.pp, cfg.dp, cfg.cp)
        rank = (res.step_time_s, index)
        if not res.oom:
            self.fits.append((rank, cand))
            if res.step_time_s < self.layout_best.get(key, INF):
                self.layout_best[key] = res.step_time_s
            if len(self._heap) < self.top:
                heapq.heappush(self._heap, -res.step_time_s)
            elif res.step_time_s < -self._heap[0]:
                heapq.heapreplace(self._heap, -res.step_time_s)
            return True
        if key not in self._oom_rank or rank < self._oom_rank[key]:
            self._oom_rank[key] = rank
            self.oom_fastest[key] = cand
        self.note_memory(cfg, res.memory, index)
        return False

    def ranked_fits(self) -> list[Candidate]:
        """The fits fastest first, equals in the walk's order."""
        return [c for _r, c in sorted(self.fits, key=lambda rc: rc[0])]

    def ranked_oom(self) -> dict:
        """Per layout its fastest non-fit, in the order of (step, position in the walk)."""
        return {k: self.oom_fastest[k] for k in sorted(self.oom_fastest, key=lambda k: self._oom_rank[k])}


NOT_IN_A_LAYER = ("pp", "dp", "schedule", "virtual_stages", "first_stage_layers", "last_stage_layers",
                  "balance_embedding", "zero_stage", "fsdp")   # what `analytic.layer_times` does not depend on


class Pricer:
    """Prices one variant's recomputation chain (`price`), exhaustively or with the bound; with the
    bound, what does not fit is priced last (`finish`), when the fits have set every threshold."""

    def __init__(self, model, hw, A, global_batch: int, order: tuple[str, ...], tally: Tally, prune: bool):
        self.model, self.hw, self.A, self.B, self.order = model, hw, A, global_batch, order
        self.tally, self.prune = tally, prune
        self._layer: dict = {}
        self._stages: dict = {}
        self._deferred: dict = {}     # layout -> [(bound, index, config, memory, layer)]
        self._dp: dict = {}
        self._p2p_memo: dict = {}
        self._dp_exact = not (A.overlap_grad_reduce or A.overlap_param_gather)

    def _dp_exposed(self, var: dict, rc: str) -> float:
        """What `estimate` adds after the stages that no stage time changes: the largest stage's
        optimizer (the step waits for it, `analytic.estimate`) and, with ZeRO 0-1 without FSDP and
        without the gradient / parameter overlaps, the exposed data-parallel sync
        (`analytic_comm.dp_sync`)."""
        # the schedule matters only by where it places the ends (`ScheduleSpec.placement`: V-shaped, both on device 0)
        key = tuple(x for x in var.items() if x[0] not in ("schedule", "sequence_parallel", "micro_batch_size")) \
            + (schedule_spec(var["schedule"]).placement,)
        got = self._dp.get(key)
        if got is None:
            try:
                cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                model, p, t = self.model, cfg.pp, cfg.tp
                layers = cfg.stage_layers(model.layers)
                plain = device_dense_layers(model, cfg)
                dense_k, expert_k = zip(*(stage_params_on_rank(model, t, cfg.ep, layers[k], k, p, cfg.expert_tp,
                                                               cfg.last_device, plain[k]) for k in range(p)))
                k_big = max(range(p), key=lambda k: dense_k[k] + expert_k[k])     # as `estimate` picks it
                shard = cfg.shard_size if cfg.zero_stage >= 1 else 1
                got = memory_time_s(ADAM_BYTES_PER_PARAM * (dense_k[k_big] + expert_k[k_big]) / shard, self.hw,
                                    self.A.profile)
                if self._dp_exact and cfg.zero_stage <= 1 and cfg.fsdp == "none":
                    topo = self.hw.topology(cfg.gpus, self.A.link_efficiency)
                    got += dp_sync(cfg, self.A, topo, dense_k[k_big], expert_k[k_big], (0.0, 0.0, 0.0), 1)[1]
            except ParasimError:
                got = 0.0
            self._dp[key] = got
        return got

    def _p2p(self, var: dict, rc: str) -> float:
        """The least, over the pipeline devices, of `estimate`'s stage-boundary exchanges and what
        they add to the fill (`analytic_comm.p2p_exposed`): the slowest device pays its own."""
        if var["pp"] == 1:
            return 0.0
        key = tuple(x for x in var.items() if x[0] not in ("zero_stage", "fsdp"))
        got = self._p2p_memo.get(key)
        if got is None:
            try:
                cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                topo = self.hw.topology(cfg.gpus, self.A.link_efficiency)
                act = 2 * cfg.micro_batch_size * self.model.seq * self.model.hidden / cfg.cp
                got = min(own + fill for own, fill in p2p_exposed(cfg, topo, act, self.A.collective_algo))
            except ParasimError:
                got = 0.0
            self._p2p_memo[key] = got
        return got

    def _layer_of(self, var: dict, rc: str):
        """(`layer_times`, one layer's F, B, W and the LM head's W) of (var, rc), once per sub-configuration."""
        key = (tuple(x for x in var.items() if x[0] not in NOT_IN_A_LAYER), rc)
        got = self._layer.get(key)
        if got is None:
            try:
                cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                times = layer_times(self.model, cfg, self.hw, self.A)
                kt = lambda k: k.time_s(self.hw, self.A.matmul_dtype, self.A.profile)  # noqa: E731
                head_w = kt(times[0].logits_w)
                head = kt(times[0].logits_fwd) + kt(times[0].logits_b) + head_w
                f, b, w = times[4:]
                if self.A.overlap_moe_comm:   # each stage's exposed all-to-all is its own, >= 0 (`moe_overlap`)
                    b -= times[3]["ep"]
                w_hi = w
                if mixed(self.model):     # a dense layer's times too: the least of each, and the most W
                    f_d, b_d, w_d = layer_times(self.model.dense_layer(), cfg, self.hw, self.A)[4:]
                    f, b, w, w_hi = min(f, f_d), min(b, b_d), min(w, w_d), max(w, w_d)
                got = (times, (f, b, w, head_w, w_hi, head))
            except ParasimError:
                got = (None, (0.0, 0.0, 0.0, INF, INF, 0.0))
            self._layer[key] = got
        return got

    def lower(self, var: dict, rc: str) -> float:
        """A lower bound on `estimate`'s step of configuration (var, rc) (module docstring); 0 when
        a part of it cannot be computed."""
        f, b, w, head_w, w_hi, head = self._layer_of(var, rc)[1]
        p, v = var["pp"], var["virtual_stages"]
        split = (p, v, var.get("first_stage_layers"), var.get("last_stage_layers"), var.get("balance_embedding", False),
                 schedule_spec(var["schedule"]).placement)
        n = self._stages.get(split)
        if n is None:
            try:
                cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                layers = cfg.stage_layers(self.model.layers)
                n = (max(layers), min(layers), layers[cfg.last_device])
            except ParasimError:
                n = (0, 0, 0)
            self._stages[split] = n
        most, fewest, on_last = n
        m = self.B // (var["micro_batch_size"] * var["dp"])
        lo = lambda x: (fewest if x >= 0 else most) * x   # noqa: E731  (the other stages' mean, from below)
        bubble, spec = 0.0, schedule_spec(var["schedule"], priced=True)
        if p > 1 and not spec.splits_bw:
            bubble = (spec.bubble_floor or spec.bubble)(p, m, lo(f), lo(b), lo(w), v)
        elif p > 1 and not self.A.grad_accum_bytes and w >= 0:
            bubble = (spec.bubble_floor or spec.bubble)(p, m, lo(f), lo(b), most * w_hi + head_w, v)
        # the slowest stage holds at least the most layers, and at least the last device's with the LM head
        # (a played schedule's floor bounds the idle of a device of the most layers only: not there)
        work = m * most * (f + b + w)
        if not (spec.per_chunk and p > 1):
            work = max(work, m * (on_last * (f + b + w) + head))
        return (work + bubble + self._dp_exposed(var, rc) + self._p2p(var, rc)) * (1 - MARGIN)

    def lows(self, var: dict) -> list[float]:
        """The bound of each recomputation of `var` (0s when not pruning)."""
        return [self.lower(var, rc) for rc in self.order] if self.prune else [0.0] * len(self.order)

    def price(self, var: dict, index: int, lows: list[float]) -> None:
        """Times var's recomputations lightest first until one fits, skipping what the bound allows;
        `index`: var's first configuration's position in the walk."""
        tally, order, model, hw, A = self.tally, self.order, self.model, self.hw, self.A
        key = (var["tp"], var["pp"], var["dp"], var["cp"])
        for i, rc in enumerate(order):
            if not self.prune:
                try:
                    cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                    res = estimate(model, cfg, hw, A)
                except ParasimError:    # e.g. a sequence c cannot split, an fp8 peak missing
                    return
                if tally.add(Candidate(cfg, res), index + i):
                    return
                continue
            either = max(tally.layout_best.get(key, INF), tally.kth())
            if min(lows[i:]) > either:        # fit or not, none of the rest can change the answer
                tally.bounded += len(order) - i
                return
            try:
                cfg = ParallelConfig(**var, global_batch=self.B, recompute=rc)
                check_estimate(model, cfg, A)
                memory = estimate_memory(model, cfg, hw, A)
            except ParasimError:
                return
            layer = self._layer_of(var, rc)[0]
            if memory.oom:                    # priced in `finish`, if it can still matter
                self._deferred.setdefault(key, []).append((lows[i], index + i, cfg, memory, layer))
                continue
            if lows[i] > either:
                tally.bounded += 1
                return
            try:
                res = estimate(model, cfg, hw, A, layer=layer, memory=memory)
            except ParasimError:
                return
            tally.add(Candidate(cfg, res), index + i)
            return

    def finish(self) -> None:
        """Prices the deferred configurations that do not fit, per layout fastest bound first, while
        one can still be faster than both the layout's fastest fit and its fastest non-fit."""
        tally = self.tally
        for key, rows in self._deferred.items():
            rows.sort(key=lambda r: r[:2])
            for k, (low, index, cfg, memory, layer) in enumerate(rows):
                tally.note_memory(cfg, memory, index)
                if low > min(tally.layout_best.get(key, INF), tally.oom_step(key)):
                    tally.infeasible += len(rows) - k
                    for _l, i, c, mem, _x in rows[k + 1:]:
                        tally.note_memory(c, mem, i)
                    break
                try:     # `_check` and the memory passed: the closed form prices it
                    res = estimate(self.model, cfg, self.hw, self.A, layer=layer, memory=memory)
                except ParasimError:
                    continue
                tally.add(Candidate(cfg, res), index)
        self._deferred = {}
