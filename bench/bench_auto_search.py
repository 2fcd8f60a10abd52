"""Operator-level strategy search on a 24-layer transformer: how long the search takes.

    python bench/bench_auto_search.py                 # 24 layers, 8 devices, both search modes
    python bench/bench_auto_search.py --quick         # 4 layers (a smoke run)
    python bench/bench_auto_search.py --json

Each layer: LayerNorm, Q/K/V BatchMatMuls, the two attention BatchMatMuls, Softmax, the output
BatchMatMul, Add, LayerNorm, two MLP BatchMatMuls, GeLU, Add (simulator.auto.nets), 14
operators with parameters held as shapes only. The search prices every candidate strategy of
every operator (MindSpore's alpha*compute + beta*(comm + gamma*param comm), a100-80gb, bf16)
and minimises it (dynamic_programming: exact eliminations; recursive_programming: greedy
halving). Target: dynamic_programming under 5 s. The chosen plan's objective is printed next to
plain data parallelism's, priced by the same model.
"""

from __future__ import annotations

import argparse
import json
import time

from simulator.auto.context import AutoParallelContext
from simulator.auto.nets import transformer_network
from simulator.auto.planner import build_plan
from simulator.auto.strategy_search import search
from simulator.auto.strategy_search.cost import OpCostModel, plan_cost


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--hardware", default="a100-80gb")
    ap.add_argument("--quick", action="store_true", help="4 layers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    layers = 4 if args.quick else args.layers
    t0 = time.perf_counter()
    net, _ = transformer_network(layers, args.batch, args.seq, args.hidden, values=False)
    build_s = time.perf_counter() - t0
    model = OpCostModel(hardware=args.hardware)
    rows = []
    for mode in ("dynamic_programming", "recursive_programming"):
        ctx = AutoParallelContext("auto_parallel", args.devices, search_mode=mode, cost_model=model)
        res = search(net, ctx)
        rows.append({"mode": mode, "search_time_s": res.search_time_s, "operators": res.n_operators,
                     "candidates": res.n_candidates, "objective_ms": res.objective * 1e3,
                     "memory_MB": res.cost.memory_bytes / 1e6,
                     "layer0": {k: v for k, v in list(res.strategies.items())[:14]}})
    dp = plan_cost(build_plan(net, AutoParallelContext("data_parallel", args.devices)), model)
    out = {"layers": layers, "devices": args.devices, "batch": args.batch, "seq": args.seq,
           "hidden": args.hidden, "network_build_s": build_s, "searches": rows,
           "data_parallel_objective_ms": dp.objective * 1e3}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(f"{layers}-layer transformer (B={args.batch}, S={args.seq}, H={args.hidden}), "
          f"{args.devices} devices, {args.hardware}; {rows[0]['operators']} operators")
    print(f"{'mode':24s} {'search s':>9s} {'candidates':>10s} {'objective ms':>13s} {'memory MB':>10s}")
    for r in rows:
        print(f"{r['mode']:24s} {r['search_time_s']:9.3f} {r['candidates']:10d} "
              f"{r['objective_ms']:13.4f} {r['memory_MB']:10.1f}")
    print(f"{'data_parallel (no search)':24s} {'':9s} {'':10s} {dp.objective * 1e3:13.4f} "
          f"{dp.memory_bytes / 1e6:10.1f}")
    print("layer 0 under dynamic_programming:")
    for k, v in rows[0]["layer0"].items():
        print(f"  {k:16s} {v}")
    target = rows[0]["search_time_s"] < 5.0
    print(f"dynamic_programming search {rows[0]['search_time_s']:.2f} s "
          f"({'within' if target else 'OVER'} the 5 s target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
