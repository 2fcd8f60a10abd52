"""`parasim explain`: what MindSpore-style semi-auto parallelism inserts for one operator.

    parasim explain --op matmul --shapes 64x32,32x16 --strategy "((2,4),(4,1))" --devices 8 --json

Prints the device matrix, tensor maps, output strategy and every inserted communication
(forward, backward, parameter_gradient) with its rank groups, bytes per rank and reason.
Strategies are parsed with ast.literal_eval (literals only, never eval).
"""

from __future__ import annotations

import ast

from ..errors import ParasimError
from ..limits import MAX_EXPLAIN_DEVICES, check

OPS = ("matmul", "batchmatmul")


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help="explain the communication a sharded operator needs")
    p.add_argument("--op", required=True, choices=OPS, help="the operator")
    p.add_argument("--shapes", required=True, help="input shapes, e.g. 64x32,32x16")
    p.add_argument("--strategy", required=True, help='shard strategy, e.g. "((2,4),(4,1))"')
    p.add_argument("--out-strategy", default=None, help='output strategy, e.g. "((8,1),)"')
    p.add_argument("--devices", type=int, default=8, help="device_num (default 8)")
    p.add_argument("--transpose-b", action="store_true", help="MatMul(transpose_b=True)")
    p.add_argument("--gradients-mean", action="store_true", help="divide mirrored gradients")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def parse_strategy(text: str, what: str = "strategy") -> tuple:
    """'((2,4),(4,1))' -> ((2, 4), (4, 1)): nested tuples of positive integers only."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise ParasimError(f"{what} {text!r} is not a tuple of integer tuples, e.g. "
                           f"((2,4),(4,1))") from None
    if not isinstance(value, (tuple, list)) or not all(
            isinstance(t, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                 for v in t) for t in value):
        raise ParasimError(f"{what} {text!r} must be a tuple of integer tuples, e.g. ((2,4),(4,1))")
    return tuple(tuple(t) for t in value)


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """'64x32,32x16' -> [(64, 32), (32, 16)]."""
    try:
        shapes = [tuple(int(v) for v in part.lower().split("x")) for part in text.split(",")]
    except ValueError:
        raise ParasimError(f"shapes {text!r} must look like 64x32,32x16") from None
    if any(v < 1 for s in shapes for v in s):
        raise ParasimError(f"shapes {text!r}: every dim must be >= 1")
    return shapes


def run(args) -> int:
    from ..auto.context import AutoParallelContext
    from ..auto.explain import explain
    from ..auto.ops import BatchMatMul, MatMul

    if args.devices < 1:
        raise ParasimError(f"--devices must be at least 1 (device_num), got {args.devices:,}")
    check("--devices (device_num)", args.devices, MAX_EXPLAIN_DEVICES, rule="explain lists every device group")
    cls = MatMul if args.op == "matmul" else BatchMatMul
    op = cls(transpose_b=args.transpose_b)
    out = parse_strategy(args.out_strategy, "out-strategy") if args.out_strategy else None
    op.shard(parse_strategy(args.strategy), out)
    ctx = AutoParallelContext("semi_auto_parallel", args.devices, gradients_mean=args.gradients_mean)
    result = explain(op, ctx, shapes=parse_shapes(args.shapes))
    print(result.to_json() if args.json else result.to_text())
    return 0
