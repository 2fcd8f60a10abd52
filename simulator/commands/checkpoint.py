"""`parasim checkpoint`: inspect a distributed checkpoint, or reshard it for another strategy.

    parasim checkpoint show DIR [--json]
    parasim checkpoint convert SRC DST --to-strategy pp --devices 4 --dp 2 --pp 2
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..errors import ParasimError
from ..parallel.config import SCHEDULES, STRATEGIES
from .train import add_degree_flags, devices_of


def add_parser(sub) -> None:
    p = sub.add_parser("checkpoint", help="inspect or reshard a distributed checkpoint")
    cmds = p.add_subparsers(dest="checkpoint_cmd", metavar="{show,convert}")
    cmds.required = True
    show = cmds.add_parser("show", help="the strategy file: step, config, each tensor's layout")
    show.add_argument("path", help="a checkpoint root (its latest) or a step_K directory")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run)
    conv = cmds.add_parser("convert", help="re-cut a checkpoint for another strategy / device count")
    conv.add_argument("src")
    conv.add_argument("dst")
    conv.add_argument("--to-strategy", required=True, choices=STRATEGIES, help='the strategy to reshard for')
    conv.add_argument("--devices", type=int, default=None,
                      help="default: the product of the degrees given, dp x cp x tp x pp (as `parasim train`)")
    add_degree_flags(conv, cp_comm_type_default=None)    # cp-comm-type default: the source's
    conv.add_argument("--zero", "--zero-stage", dest="zero", type=int, default=0, help='ZeRO stage 0-3 of the target (default 0)')
    conv.add_argument("--microbatches", type=int, default=None, help="default: the source's")
    conv.add_argument("--schedule", choices=SCHEDULES, default=None, help="default: the source's")
    conv.add_argument("--json", action="store_true", help="print one JSON object")
    conv.set_defaults(func=run)
    p.set_defaults(func=run)


def run(a) -> int:
    from ..faults.checkpoint import Checkpoint, convert_checkpoint

    if a.checkpoint_cmd == "show":
        ck = Checkpoint.open(a.path)
        out = {"path": str(ck.path), "step": ck.step, "strategy": ck.config.strategy, "devices": ck.config.devices,
               "dp": ck.config.dp, "pp": ck.config.pp, "tp": ck.config.tp, "zero_stage": ck.config.zero_stage,
               "tensors": {n: {"global_shape": t["global_shape"], "layout": t["layout"]}
                           for n, t in ck.record["tensors"].items()}}
        if a.json:
            print(json.dumps(out))
        else:
            print(f"checkpoint {out['path']}: step {ck.step}, {ck.config.strategy} on {ck.config.devices} devices "
                  f"(dp={ck.config.dp}, pp={ck.config.pp}, tp={ck.config.tp}, zero={ck.config.zero_stage})")
            for n, t in out["tensors"].items():
                print(f"  {n} {tuple(t['global_shape'])}: {t['layout']}")
        return 0
    src = Checkpoint.open(a.src)
    devices = devices_of(a)
    if devices < 1:
        raise ParasimError(f"--devices must be a positive integer, got {devices}")
    # the source's micro-batches carry over, except into layer-wise model parallelism (it has none)
    m = a.microbatches or (1 if a.to_strategy == "layer" else src.config.microbatches)
    target = replace(src.config, strategy=a.to_strategy, devices=devices, dp=a.dp, pp=a.pp, tp=a.tp, cp=a.cp,
                     cp_comm_type=a.cp_comm_type or src.config.cp_comm_type, zero_stage=a.zero, ep=a.ep,
                     microbatches=m,
                     schedule=a.schedule or src.config.schedule, virtual_stages=1).resolved()
    path = convert_checkpoint(a.src, a.dst, target)
    out = {"src": str(src.path), "dst": str(path), "step": src.step, "from": f"{src.config.strategy} on "
           f"{src.config.devices}", "to": f"{target.strategy} on {target.devices}", "dp": target.dp,
           "pp": target.pp, "tp": target.tp}
    print(json.dumps(out) if a.json else f"wrote {path}: step {src.step}, {out['from']} devices -> "
          f"{out['to']} devices (dp={target.dp}, pp={target.pp}, tp={target.tp})")
    return 0
