"""Autograder of lesson 11: the student's brute-force search against search_configs, and the
operator-level search (predictions, candidates, brute force) against auto_search."""

from math import prod

import numpy as np

from simulator import (
    AutoParallelContext,
    OpCostModel,
    ParallelConfig,
    auto,
    auto_search,
    estimate,
    explain,
    get_model,
    plan_cost,
    reset_auto_parallel_context,
    search_configs,
    viz,
)
from simulator.grading import compare, each_case, expect, explanation_item, hidden_random, ok, own_plot_item, rebuild

LESSON = {
    "title": "Auto-parallel search: how a framework decides where to cut",
    "goals": ["enumerate the space of (t, p, d, b) configurations and its divisibility rules",
              "let a cost model price every candidate, drop those that do not fit, keep the fastest",
              "compare a hand-written search with parasim's search_configs",
              "run MindSpore's operator-level search (auto_parallel, dynamic/recursive programming)",
              "predict when the search picks data parallel and when it shards the weights",
              "check dynamic programming against brute force on a tiny chain"],
    "app_pages": ["Scale explorer", "Sharding & auto-parallel"],
    "requires": ["search_configs", "estimate", "get_hardware", "auto_search", "OpCostModel", "plan_cost",
                 "explain", "set_auto_parallel_context", "module:simulator.auto.nets"],
    "minutes": 75,
    "prerequisites": [9, 10],
    # the search answers the prediction: it raises while your function runs
    "withhold": {"predict_first_layer": ["simulator.auto.strategy_search.modes:search"],
                 "why_fastest_fills_memory": ["simulator.cost.analytic:estimate", "simulator.cost.analytic:estimate_memory",
                                              "simulator.cost.memory_report:memory_report",
                                              "simulator.cost.memory:model_state_bytes_per_device"]},
}

CASES = [("megatron-18.4b", 64, 256), ("megatron-7.5b", 32, 128), ("gpt3-175b", 512, 1536)]


def _space(name, gpus, batch):
    found = search_configs(name, "a100-80gb", gpus, batch, recomputes=("selective",), micro_batch_sizes=(1, 2),
                           top=10**6)
    return found


def check_candidates_cover(s):
    "candidates contains every configuration that search_configs finds (its feasible ones)"
    for name, gpus, batch in CASES:
        mine = {tuple(c) for c in s.candidates(get_model(name), gpus, batch, 8, (1, 2))}
        for c in _space(name, gpus, batch):
            key = (c.config.tp, c.config.pp, c.config.dp, c.config.micro_batch_size)
            if key not in mine:
                return compare(f"{key} among your candidates", sorted(mine)[:6], f"{name} on {gpus} GPUs")
    return ok()


def check_candidates_rules(s):
    "every candidate obeys the rules (t | heads, t <= 8, p | layers, t p d = gpus, b d | B)"
    for name, gpus, batch in CASES:
        m = get_model(name)
        for t, p, d, b in s.candidates(m, gpus, batch, 8, (1, 2)):
            good = m.heads % t == 0 and t <= 8 and m.layers % p == 0 and t * p * d == gpus and batch % (b * d) == 0
            if not good:
                return expect(False, "only valid (t, p, d, b)", (t, p, d, b), f"{name}: check every rule")
    return ok()


def check_best(s):
    "best_config is as fast as search_configs' best (same space, selective recomputation)"
    for name, gpus, batch in CASES:
        want = _space(name, gpus, batch)[0]
        cfg = rebuild(s.best_config(name, "a100-80gb", gpus, batch), ParallelConfig)
        got = estimate(get_model(name), cfg, "a100-80gb")
        if got.oom or not np.isclose(got.step_time_s, want.result.step_time_s, rtol=1e-9):
            return compare(f"{want.config!r}: {want.result.step_time_s:.4g} s",
                           f"{cfg!r}: {got.step_time_s:.4g} s{' OOM' if got.oom else ''}",
                           f"{name} on {gpus} GPUs: did you drop OOM candidates and use SP when t > 1?")
    return ok()


# ---- operator-level search ------------------------------------------------------------------
DP, REC = "dynamic_programming", "recursive_programming"
LARGE_BATCH, HUGE_WEIGHTS, MIDDLE = (2 ** 16, 128, 128, 128), (8, 2048, 2048, 16), (1024, 256, 256, 16)


def _first_layer(n, d, f, c, D, mode):
    net, _ = auto.mlp_network(n=n, d=d, f=f, c=c, bias=False, x_grad=True)
    ctx = AutoParallelContext("auto_parallel", D, search_mode=mode, cost_model=OpCostModel())
    return auto_search(net, ctx).strategies["MatMul-0"]


def _chain(n, d, f, c):
    return lambda: auto.mlp_network(n=n, d=d, f=f, c=c, bias=False)[0]


CHAINS = [((16, 8, 16, 4), 4), ((8, 4, 8, 2), 2)]


def check_kind_of(s):
    "kind_of names data parallel, weight sharded and mixed MatMul strategies"
    cases = [(((8, 1), (1, 1)), 8, "data parallel"), (((1, 2), (2, 4)), 8, "weight sharded"),
             (((1, 1), (1, 8)), 8, "weight sharded"), (((4, 1), (1, 2)), 8, "mixed"),
             (((2, 2), (2, 2)), 8, "mixed"), (((4, 1), (1, 1)), 4, "data parallel")]
    return each_case(cases, lambda strategy, D, want: (
        want, s.kind_of(strategy, D), f"{strategy} on {D} devices: a = D alone is data parallel; k x c = D is weight "
                                      "sharded"))


def check_searched_first_layer(s):
    "searched_first_layer returns auto_search's MatMul-0 strategy (both search modes)"
    try:
        for case, D, mode in ((LARGE_BATCH, 8, DP), (HUGE_WEIGHTS, 8, DP), (MIDDLE, 8, REC), (MIDDLE, 4, DP)):
            got = s.searched_first_layer(*case, D, mode)
            want = _first_layer(*case, D, mode)
            if tuple(map(tuple, got)) != want:
                return compare(want, got, f"mlp_network{case} on {D} devices, {mode}: parallel_mode='auto_parallel'")
    finally:
        reset_auto_parallel_context()
    return ok()


def check_prediction(s):
    "predict_first_layer agrees with the search on the two extreme MLPs"
    def case(mlp):
        strategy = _first_layer(*mlp, 8, DP)
        return ("data parallel" if strategy[0][0] == 8 else "weight sharded"), s.predict_first_layer(*mlp), \
            f"n, d, f, c = {mlp}: the search chose {strategy}; which moves fewer bytes?"
    return each_case([(LARGE_BATCH,), (HUGE_WEIGHTS,)], case)


def check_op_candidates(s):
    "op_candidates: valid power-of-two strategies using all D devices, as many as auto_search counts"
    for case, D in CHAINS:
        net = _chain(*case)()
        total = 0
        for node in net.nodes:
            shapes = [net.tensors[x].shape for x in node.inputs]
            cands = s.op_candidates(node.op.name, shapes, D)
            for strategy in cands:
                cuts = [v for dims in strategy for v in dims]
                good = all(v & (v - 1) == 0 for v in cuts) and all(
                    n % v == 0 for dims, shape in zip(strategy, shapes) for v, n in zip(dims, shape))
                if node.op.name == "MatMul":
                    good = good and strategy[0][1] == strategy[1][0] and prod(strategy[0]) * strategy[1][1] == D
                elif node.op.name == "GeLU":
                    good = good and prod(strategy[0]) == D
                else:
                    good = good and strategy[0][1] == 1 and strategy[0][0] == strategy[1][0] == D
                if not good:
                    return expect(False, "powers of two dividing each dim, equal k, product = D", strategy,
                                  f"{node.label} {shapes} on {D} devices")
            if len(set(map(tuple, cands))) != len(cands):
                return expect(False, "no duplicates", cands, node.label)
            total += len(cands)
        want = auto_search(net, AutoParallelContext("auto_parallel", D, search_mode=DP,
                                                    cost_model=OpCostModel())).n_candidates
        if total != want:
            return compare(want, total, f"mlp_network{case} on {D} devices: candidates over all operators")
    return ok()


def check_brute_force(s):
    "brute_force finds the dynamic-programming optimum; recursive programming is never better"
    model = OpCostModel()
    for case, D in CHAINS:
        make = _chain(*case)
        ctx = AutoParallelContext("auto_parallel", D, search_mode=DP, cost_model=model)
        want = auto_search(make(), ctx)
        objective, strategies = s.brute_force(make, D, model)
        if not np.isclose(objective, want.objective, rtol=1e-9):
            return compare(want.objective, objective, f"mlp_network{case} on {D} devices: DP chose {want.strategies}")
        net = make()
        for node in net.nodes:
            node.op.shard(strategies[node.label])
        priced = plan_cost(explain(net, AutoParallelContext("semi_auto_parallel", D)).plan, model).objective
        if not np.isclose(priced, objective, rtol=1e-9):
            return compare(objective, priced, "the strategies you return must cost the objective you return")
        rec = auto_search(make(), AutoParallelContext("auto_parallel", D, search_mode=REC, cost_model=model))
        if rec.objective < objective * (1 - 1e-9):
            return expect(False, "recursive programming >= the brute-force optimum", rec.objective)
    return ok()


def _searched_objectives(ns) -> list[float]:
    """auto_search's objective of mlp_network(n, 1024, 1024, 16) on 8 devices (dynamic programming,
    the default OpCostModel) for each batch-row count n."""
    out = []
    for n in ns:
        net, _ = auto.mlp_network(n=n, d=1024, f=1024, c=16, bias=False, x_grad=True)
        out.append(auto_search(net, AutoParallelContext("auto_parallel", 8, search_mode=DP, cost_model=OpCostModel())).objective)
    return out


def hidden_cuts() -> tuple[int, int]:
    """A tensor- and pipeline-parallel size of GPT-3 175B, drawn when grading (1 to 8 each)."""
    rng = hidden_random()
    return rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8])


def _state_bytes(t, p) -> float:
    return estimate(get_model("gpt3-175b"), ParallelConfig(tp=t, pp=p, global_batch=64), "a100-80gb").memory.model_state_bytes


check_explanation = explanation_item(
    "explanation: why the fastest configuration that fits uses the most memory (a choice, and GPT-3 175B's model "
    "states per GPU at cuts drawn when grading, within 5 %)", ask="why_fastest_fills_memory",
    right="b", case=hidden_cuts, answer=_state_bytes, rtol=0.05,
    reason=lambda t, p: (f"t={t}, p={p}: the cuts divide the 174.6B parameters' states, 18 bytes each (bf16 weight, "
                         f"fp32 gradient, fp32 master weight and Adam's two moments), over t p GPUs (the first "
                         f"stage's embedding adds a little)"),
    hints={"a": "every candidate of the figure fits under the same capacity line: none is over",
           "c": "the activations of one micro-batch do not depend on the search; the cuts t and p divide the states",
           "d": "search_configs sorts by step time, not memory (section 2)"})

check_plot_of_your_sweep = own_plot_item(
    "your own sweep: the searched objective of the MLP at batch sizes drawn when grading, point by point",
    ask="plot_my_sweep", case=lambda: (sorted(hidden_random().sample([2 ** k for k in range(3, 17)], 3)),),
    run=lambda ns: (ns, _searched_objectives(ns)),
    draw=lambda run: viz.sweep_chart(run[0], {"searched": run[1]}, xlabel="batch rows n", ylabel="objective"),
    what=lambda ns: f"auto_search's objective of mlp_network(n, 1024, 1024, 16) on 8 devices, n = {ns} (chosen when grading)",
    hint="viz.sweep_chart(ns, {'searched': objectives}, xlabel=..., ylabel=...) of your own auto_search runs (no y_is_time)")
