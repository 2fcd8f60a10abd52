"""Autograder of lesson 11: the student's brute-force search against search_configs."""

import numpy as np

from simulator import estimate, get_model, search_configs
from simulator.lessons import compare, expect, ok

LESSON = {
    "title": "Auto-parallel search: how a framework decides where to cut",
    "goals": ["enumerate the space of (t, p, d, b) configurations and its divisibility rules",
              "let a cost model price every candidate, drop those that do not fit, keep the fastest",
              "compare a hand-written search with parasim's search_configs"],
    "app_pages": ["Scale explorer", "Sharding & auto-parallel"],
    "requires": ["search_configs", "estimate", "get_hardware"],
    "minutes": 45,
    "prerequisites": [9, 10],
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
        cfg = s.best_config(name, "a100-80gb", gpus, batch)
        got = estimate(get_model(name), cfg, "a100-80gb")
        if got.oom or not np.isclose(got.step_time_s, want.result.step_time_s, rtol=1e-9):
            return compare(f"{want.config!r}: {want.result.step_time_s:.4g} s",
                           f"{cfg!r}: {got.step_time_s:.4g} s{' OOM' if got.oom else ''}",
                           f"{name} on {gpus} GPUs: did you drop OOM candidates and use SP when t > 1?")
    return ok()
