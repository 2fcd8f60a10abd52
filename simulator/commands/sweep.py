"""`parasim sweep`: one experiment over a grid of values, as a table (simulator/sweep.py).

    parasim sweep schedule --set p=4 --set t_b=2 --vary schedule=gpipe,1f1b --vary m=2,4,8 --csv out.csv
    parasim sweep estimate --set model=megatron-1.7b --set hardware=a100-80gb --set global_batch=64 \
        --vary zero_stage=0,1,2,3 --vary dp=1,8 --json
    parasim sweep search --set model=megatron-18.4b --set hardware=a100-80gb --set gpus=64 \
        --vary global_batch=64,256,1024
    parasim sweep train --set strategy=dp --set devices=4 --vary bucket_mb=none,0.004,1

`--set NAME=VALUE` fixes a value (`--set NAME=V1,V2` a list, e.g. `--set schedules=1f1b,zb-h1` for a
search), `--vary NAME=V1,V2,...` varies one (every combination runs).
Values are numbers, `none`, `true`/`false`, or text. For `train` the model is a small GPT (layers
2, hidden 32, heads 4, seq 16, vocab 32; `--set layers=4` etc. change it). Prints the table (or
`--json`, or writes `--csv OUT`); a point that is refused has its one-line reason in `error`.
"""

from __future__ import annotations

import json
from dataclasses import fields

from ..cost.parallel_config import ParallelConfig
from ..errors import ParasimError
from ..models import GPTConfig
from ..parallel.config import TrainConfig
from ..progress import Progress
from ..sweep import KINDS, sweep

GPT_FIELDS = {"layers": 2, "hidden": 32, "heads": 4, "seq_len": 16, "vocab": 32}


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run an experiment over a grid of values and print a table")
    p.add_argument("kind", choices=KINDS, help="train (real runs), estimate (cost model), search, schedule")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a fixed value")
    p.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2", help="values to vary")
    p.add_argument("--csv", metavar="OUT", default=None, help="write the table as CSV")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def parse_value(text: str):
    """A number, None, a bool, or the text itself (never evaluated as code)."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ParasimError(f"{what} {item!r} is not NAME=VALUE")
        out[name.strip()] = value
    return out


def build(kind: str, fixed: dict):
    """(base, runner_kwargs) of a sweep of `kind` from the --set values."""
    if kind == "train":
        gpt = {k: fixed.pop(k, v) for k, v in GPT_FIELDS.items()}
        known = ({f.name for f in fields(TrainConfig)} | set(TrainConfig.spellings)) - {"model"}
        if unknown := sorted(set(fixed) - known):
            raise ParasimError(f"TrainConfig has no field {unknown[0]!r}")
        return TrainConfig(GPTConfig(**gpt), **fixed), {}
    if kind == "estimate":
        own = {f.name for f in fields(ParallelConfig)} | set(ParallelConfig.spellings)
        return ParallelConfig(**{k: v for k, v in fixed.items() if k in own}), \
            {k: v for k, v in fixed.items() if k not in own}
    return fixed, {}


def run(args) -> int:
    fixed = {k: tuple(parse_value(x) for x in v.split(",")) if "," in v else parse_value(v)
             for k, v in _pairs(args.set, "--set").items()}
    vary = {k: [parse_value(x) for x in v.split(",")] for k, v in _pairs(args.vary, "--vary").items()}
    try:
        base, kwargs = build(args.kind, fixed)
    except TypeError as e:  # a dataclass given a name it does not have
        raise ParasimError(str(e)) from None
    table = sweep(args.kind, base, kwargs, progress=Progress(f"sweep {args.kind}", "points"), **vary)
    if args.csv:
        table.to_csv(args.csv)
        print(f"{len(table.records)} point(s), {len(table.ok())} ran; wrote {args.csv}")
    elif args.json:
        print(json.dumps(table.to_dict()))
    else:
        print(table.to_frame().to_string(index=False))
    return 0
