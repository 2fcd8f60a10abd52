"""`parasim collective`: run one collective for real on emulated devices, check it, and price it.

    parasim collective all_reduce --devices 8 --size 1000003 --algo ring --runtime local --json
    parasim collective all_to_all --devices 5 --size 13 --trace a2a.json

The inputs are random float64 vectors of --size elements per device (all_gather: --size is the
gathered total, cut np.array_split-wise). `correct` compares every device's result with the numpy
reference: bit for bit where the algorithm only moves data, within Higham's floating-point summation
bound for the dtype and group size where it adds (simulator.collectives.check); the simulated time comes from the event clock on a hardware preset (or a
plain 100 GB/s, 5 us link), the wall time from the real run.
"""

from __future__ import annotations

import json

import numpy as np

from ..collectives.algorithms import algorithms
from ..collectives.check import check_collective
from ..collectives.reference import KINDS, OPS
from ..errors import ParasimError
from ..limits import MAX_COLLECTIVE_BYTES, MAX_RUN_DEVICES
from ..units import fmt_bytes, fmt_time

# A real run moves every chunk between emulated devices: a ring all_reduce sends 2n(n-1) chunks, so
# n = 256 takes seconds and n = 1000 minutes; the inputs (n x size elements) are really allocated.


def add_parser(sub) -> None:
    p = sub.add_parser("collective", help="run one collective on emulated devices, check and price it")
    p.add_argument("kind", help=f"one of: {', '.join(KINDS)}")
    p.add_argument("--devices", type=int, default=8, help="group size N")
    p.add_argument("--size", type=int, default=1024, help="elements per device (all_gather: in total)")
    p.add_argument("--algo", default=None, help="ring | tree | halving_doubling | direct | dissemination "
                                                "(default: the kind's default)")
    p.add_argument("--op", default="sum", help=f"reduction: {', '.join(OPS)}")
    p.add_argument("--root", type=int, default=0, help="root of broadcast / reduce")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32", "float16"),
                   help="element type of the buffers (default float64)")
    p.add_argument("--runtime", default="local", choices=("local", "ray"),
                   help="in-process devices or Ray actors (default local)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start Ray in-process)")
    p.add_argument("--hardware", default=None, help="hardware preset for the simulated time")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace JSON")
    p.add_argument("--summary", action="store_true",
                   help="--trace: one bar per device for the whole collective (default: every step of the "
                        "algorithm as send/recv events with chunk ids and flow arrows)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _check(args) -> None:
    if args.kind not in KINDS:
        raise ParasimError(f"unknown collective {args.kind!r}; valid kinds: {', '.join(KINDS)}")
    if args.devices < 1:
        raise ParasimError(f"--devices must be at least 1, got {args.devices}")
    if args.size < 0:
        raise ParasimError(f"--size must be >= 0 elements, got {args.size}")
    if args.devices > MAX_RUN_DEVICES:
        raise ParasimError(f"--devices {args.devices} is more than the {MAX_RUN_DEVICES} devices a real run emulates "
                           f"(a ring moves 2n(n-1) chunks); price larger groups with simulator.collective_time_s")
    itemsize = np.dtype(args.dtype).itemsize
    # every device holds its input and its output: all_gather's --size is the gathered total (each
    # device's output), every other kind's output is at most its input
    per = args.devices * (2 if args.kind != "all_gather" else 1) + (1 if args.kind == "all_gather" else 0)
    held = per * args.size * itemsize
    if held > MAX_COLLECTIVE_BYTES:
        raise ParasimError(f"the devices' inputs and outputs take {per} x --size {args.size} x {itemsize} B = "
                           f"{fmt_bytes(held)}, more than the {fmt_bytes(MAX_COLLECTIVE_BYTES)} a real run may allocate")
    if args.algo is not None and args.algo not in algorithms(args.kind):
        raise ParasimError(f"unknown algorithm {args.algo!r} for {args.kind}; valid: "
                           f"{', '.join(algorithms(args.kind))}")
    if args.op not in OPS:
        raise ParasimError(f"unknown reduction op {args.op!r}; valid ops: {', '.join(OPS)}")
    if not 0 <= args.root < args.devices:
        raise ParasimError(f"--root {args.root} is not a device of {args.devices}")


def _exact_plan(args, inputs):
    """The plan with chunks cut at element boundaries (the runtime's lowering only knows bytes)."""
    from ..collectives.algorithms import make_plan

    xs = [inputs[r]["act/x"] for r in range(args.devices)]
    itemsize = np.dtype(args.dtype).itemsize
    if args.kind == "all_gather":
        return make_plan(args.kind, args.algo, args.devices, sizes=[x.size for x in xs], itemsize=itemsize)
    nbytes = 0 if args.kind == "barrier" else xs[args.root].nbytes
    return make_plan(args.kind, args.algo, args.devices, nbytes, itemsize=itemsize, root=args.root)


def run(args) -> int:
    from ..cost.clock import SimpleDeviceModel, simulate
    from ..runtime import make_runtime
    from ..runtime.programs import collective_program

    _check(args)
    prog, inputs, expected = collective_program(args.kind, args.devices, args.size, args.algo, args.op,
                                                args.root, args.dtype)
    with make_runtime(args.runtime, args.devices, address=args.address) as rt:
        rt.load(inputs)
        res = rt.run(prog)
        outputs = [None if expected[r] is None else rt.fetch(r, ["act/y"])["act/y"] for r in range(args.devices)]
    verdict = check_collective(args.kind, [inputs[r]["act/x"] for r in range(args.devices)], outputs, args.op,
                               args.root, axis=0)
    correct = verdict.correct
    plan = _exact_plan(args, inputs)
    if args.hardware is not None:
        from ..cost.device_model import HardwareDeviceModel

        model = HardwareDeviceModel(args.hardware, args.devices)
    else:
        model = SimpleDeviceModel()
    trace = simulate(prog, model, memory=res.memory_by_instruction(), name=prog.name,
                     collective_steps=not args.summary)
    trace.wall_time_s = res.wall_time_s
    if args.trace:
        trace.save_chrome(args.trace)
    out = {"kind": args.kind, "devices": args.devices, "algo": plan.algo, "op": args.op, "size": args.size,
           "dtype": args.dtype, "runtime": args.runtime, "correct": bool(correct), "steps": len(plan.steps),
           "messages": plan.messages, "plan_bytes_sent_per_rank": plan.bytes_sent_per_rank(),
           "bytes_sent_per_rank": list(res.bytes_sent), "total_bytes": int(sum(res.bytes_sent)),
           "simulated_time_s": trace.makespan_s, "wall_time_s": res.wall_time_s, "device_calls": res.calls}
    out.update(verdict.to_dict())
    if args.trace:
        out["trace"] = args.trace
    if args.json:
        print(json.dumps(out))
        return 0 if correct else 1
    print(f"{args.kind}/{plan.algo} over {args.devices} devices, {args.size} x {args.dtype} "
          f"({args.runtime} runtime): {'correct' if correct else 'WRONG'}")
    if verdict.exact:
        print("  checked bit for bit against the numpy reference (the algorithm only moves data)")
    else:
        print(f"  max error vs float64 {verdict.max_abs_error_vs_float64:.3g} (relative "
              f"{verdict.max_rel_error_vs_float64:.3g}); allowed: {verdict.bound_rel:.3g} x sum|x_i| "
              f"(Higham's summation bound for {args.devices} terms in {args.dtype})")
    if not correct:
        print(f"  {verdict.reason}")
    print(f"  {len(plan.steps)} steps, {plan.messages} messages, {fmt_bytes(sum(res.bytes_sent))} moved; "
          f"per device {', '.join(fmt_bytes(b) for b in res.bytes_sent)}")
    print(f"  simulated {fmt_time(trace.makespan_s)}, wall {fmt_time(res.wall_time_s)}")
    if args.trace:
        print(f"  trace written to {args.trace} (open in https://ui.perfetto.dev)")
    return 0 if correct else 1
