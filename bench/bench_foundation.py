"""Foundation benchmark: the Ray runtime vs the local runtime vs one numpy call, side by side.

    python bench/bench_foundation.py            # 64 MB ring all_reduce on 8 devices, 4096^2 matmul
    python bench/bench_foundation.py --quick    # smaller sizes (a smoke run)
    python bench/bench_foundation.py --object-store   # also Ray with chunks through the object store

Times are medians of --reps runs of `Runtime.run`, the two runtimes alternating (loading the
inputs is not timed); ray/local is the median of the per-pair ratios; the numpy column is the same
result computed by a single call on one array. Targets (issue 18): the ring all_reduce within
1.5x of local, the matmul within 3x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from simulator.runtime import make_runtime
from simulator.runtime.programs import collective_program, sharded_matmul_program
from simulator.units import fmt_bytes, fmt_time


def median_of(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_case(name, prog, inputs, check, numpy_fn, runtimes, reps):
    """Both runtimes hold the inputs; then the runs alternate local, ray, local, ray ... so a change
    of the machine's load hits both alike. Medians of the wall times, and the median of the
    per-pair ratios ray / local."""
    row = {"case": name}
    for kind, rt in runtimes.items():
        rt.clear()
        rt.load(inputs)
        rt.run(prog)  # warm-up (and the correctness check below)
        assert check(rt), f"{kind} runtime gave a wrong result for {name}"
    times: dict[str, list[float]] = {kind: [] for kind in runtimes}
    for _ in range(reps):
        for kind, rt in runtimes.items():
            times[kind].append(rt.run(prog).wall_time_s)
    for kind, rt in runtimes.items():
        row[f"{kind}_s"] = statistics.median(times[kind])
        rt.clear()
    row["numpy_s"] = median_of(numpy_fn, reps)
    for kind in runtimes:
        if kind != "local":
            row[f"{kind}_over_local"] = statistics.median(r / v for r, v in zip(times[kind], times["local"]))
    row["local_over_numpy"] = row["local_s"] / row["numpy_s"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--mbytes", type=float, default=64.0, help="all_reduce size per device in MB (float32)")
    ap.add_argument("--matmul", type=int, default=4096, help="square matmul size (float32)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="4 MB and 1024^2")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: in-process Ray)")
    ap.add_argument("--object-store", action="store_true",
                    help="also run Ray with every chunk through the object store (shared_memory=False, as before issue 18)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.mbytes, args.matmul = 4.0, 1024
    n = args.devices
    elems = int(args.mbytes * 1e6) // 4

    t0 = time.perf_counter()
    runtimes = {"local": make_runtime("local", n), "ray": make_runtime("ray", n, address=args.address)}
    if args.object_store:  # the same Ray session, a second set of actors
        runtimes["ray_objstore"] = make_runtime("ray", n, address=args.address, shared_memory=False)
    startup_s = time.perf_counter() - t0
    rows = []
    try:
        prog, inputs, expected = collective_program("all_reduce", n, elems, "ring", dtype="float32")
        stacked = np.stack([inputs[r]["act/x"] for r in range(n)])
        rows.append(bench_case(
            f"ring all_reduce {fmt_bytes(elems * 4)} x {n}", prog, inputs,
            lambda rt: np.allclose(rt.fetch(n - 1, ["act/y"])["act/y"], expected[n - 1], rtol=1e-4, atol=1e-4),
            lambda s=stacked: s.sum(axis=0), runtimes, args.reps))
        del stacked, inputs

        m = args.matmul
        prog, inputs, want = sharded_matmul_program(n, m, m, m, dtype="float32")
        a, bmat = np.concatenate([inputs[r]["act/a"] for r in range(n)]), inputs[0]["param/b"]
        rows.append(bench_case(
            f"{n}-way sharded matmul {m}^2", prog, inputs,
            lambda rt: np.allclose(rt.fetch(0, ["act/out"])["act/out"], want, rtol=1e-3, atol=1e-2),
            lambda: a @ bmat, runtimes, args.reps))
    finally:
        for rt in runtimes.values():
            rt.close()

    if args.json:
        print(json.dumps({"startup_s": startup_s, "rows": rows}))
        return 0
    print(f"runtimes started in {fmt_time(startup_s)} (Ray: {n} actors)")
    extra = "ray_objstore" in runtimes
    print(f"{'case':30} {'numpy':>9} {'local':>9} {'ray':>9} {'ray/local':>10}"
          + (f" {'ray objstore':>13} {'objstore/local':>15}" if extra else "") + f" {'local/numpy':>12}")
    for r in rows:
        print(f"{r['case']:30} {fmt_time(r['numpy_s']):>9} {fmt_time(r['local_s']):>9} {fmt_time(r['ray_s']):>9} "
              f"{r['ray_over_local']:>9.2f}x"
              + (f" {fmt_time(r['ray_objstore_s']):>13} {r['ray_objstore_over_local']:>14.2f}x" if extra else "")
              + f" {r['local_over_numpy']:>11.2f}x")
    ring, matmul = rows[0]["ray_over_local"], rows[1]["ray_over_local"]
    print(f"target ring all_reduce on Ray within 1.5x of local: {'met' if ring <= 1.5 else 'NOT met'} ({ring:.2f}x); "
          f"matmul within 3x: {'met' if matmul <= 3 else 'NOT met'} ({matmul:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
