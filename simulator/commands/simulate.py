"""`parasim simulate`: closed-form step time, TFLOP/s, MFU and memory of one GPT training config.

    parasim simulate --model megatron-1t --hardware a100-80gb --tp 8 --pp 64 --dp 6 \\
        --microbatch-size 1 --global-batch 3072 --recompute full --json
"""

from __future__ import annotations

import json

from ..cost.analytic import estimate
from ..cost.hardware import get_hardware, hardware_names
from ..cost.memory import RECOMPUTE, SCHEDULES
from ..cost.model_presets import ModelSpec, get_model, model_names
from ..cost.parallel_config import ParallelConfig
from ..errors import ParasimError
from ..units import fmt_bytes, fmt_time

_SHAPE = ("layers", "hidden", "heads", "seq", "vocab")


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="analytic step time / MFU / memory of a parallel training config")
    p.add_argument("--model", default=None, help=f"model preset: {', '.join(model_names())}")
    for name in _SHAPE:
        p.add_argument(f"--{name}", type=int, default=None, help=f"custom model: {name} (instead of --model)")
    p.add_argument("--hardware", default="a100-80gb", help=f"preset: {', '.join(hardware_names())}")
    p.add_argument("--gpus", type=int, default=None, help="total GPUs; must equal tp x pp x dp")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--dp", type=int, default=None, help="data-parallel size (default gpus / (tp pp))")
    p.add_argument("--microbatch-size", dest="microbatch_size", type=int, default=1, help="b")
    p.add_argument("--global-batch", dest="global_batch", type=int, default=None,
                   help="B sequences per step (default b x dp x pp, i.e. m = pp)")
    p.add_argument("--schedule", default="1f1b", choices=SCHEDULES)
    p.add_argument("--virtual-stages", dest="virtual_stages", type=int, default=1,
                   help="model chunks per device (interleaved schedule)")
    p.add_argument("--recompute", default="none", choices=RECOMPUTE)
    p.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true")
    p.add_argument("--zero", type=int, default=0, help="ZeRO stage 0-3")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="also run the scale program on the event clock and write its Chrome trace to FILE")
    p.add_argument("--trace-all-tp-ranks", dest="trace_all_tp_ranks", action="store_true",
                   help="with --trace: simulate every tensor-parallel rank (default: one per stage)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _model(args) -> ModelSpec:
    shape = {n: getattr(args, n, None) for n in _SHAPE}
    name = getattr(args, "model", None)
    if name and any(v is not None for v in shape.values()):
        raise ParasimError("give either --model PRESET or --layers/--hidden/--heads/--seq/--vocab, not both")
    if name:
        return get_model(name)
    missing = [f"--{n}" for n, v in shape.items() if v is None]
    if missing:
        raise ParasimError(f"no model: give --model PRESET or all of --layers --hidden --heads --seq --vocab "
                           f"(missing {' '.join(missing)})")
    return ModelSpec("custom", **shape)


def config_from_args(args) -> ParallelConfig:
    tp, pp = int(getattr(args, "tp", 1)), int(getattr(args, "pp", 1))
    gpus, dp = getattr(args, "gpus", None), getattr(args, "dp", None)
    for name, v in (("tp", tp), ("pp", pp), ("gpus", gpus), ("dp", dp)):
        if v is not None and v < 1:
            raise ParasimError(f"--{name} must be a positive integer, got {v}")
    if dp is None:
        if gpus is None:
            dp = 1
        elif gpus % (tp * pp):
            raise ParasimError(f"--gpus {gpus} is not divisible by tp x pp = {tp} x {pp} = {tp * pp}")
        else:
            dp = gpus // (tp * pp)
    if gpus is not None and tp * pp * dp != gpus:
        raise ParasimError(f"tp x pp x dp = {tp} x {pp} x {dp} = {tp * pp * dp} must equal --gpus {gpus}")
    b = int(getattr(args, "microbatch_size", 1))
    if b < 1:
        raise ParasimError(f"--microbatch-size must be a positive integer, got {b}")
    B = getattr(args, "global_batch", None)
    B = b * dp * pp if B is None else int(B)
    return ParallelConfig(tp=tp, pp=pp, dp=dp, micro_batch_size=b, global_batch=B,
                          schedule=getattr(args, "schedule", "1f1b"),
                          virtual_stages=int(getattr(args, "virtual_stages", 1)),
                          recompute=getattr(args, "recompute", "none"),
                          sequence_parallel=bool(getattr(args, "sequence_parallel", False)),
                          zero_stage=int(getattr(args, "zero", 0)))


def run(args) -> int:
    model = _model(args)
    hw = get_hardware(getattr(args, "hardware", "a100-80gb"))
    cfg = config_from_args(args)
    res = estimate(model, cfg, hw)
    at_scale = None
    if getattr(args, "trace", None):
        from ..cost.scale_sim import simulate_at_scale
        at_scale = simulate_at_scale(model, cfg, hw, fold_tp=not getattr(args, "trace_all_tp_ranks", False))
        at_scale.trace.save_chrome(args.trace)
    if getattr(args, "json", False):
        out = res.as_dict()
        out.update(model=model.name, params=model.params(), hardware=hw.name, config=repr(cfg))
        if at_scale is not None:
            out["event_clock"] = at_scale.as_dict()
            out["trace_file"] = args.trace
        print(json.dumps(out))
        return 0
    print(f"{model!r}\n{cfg!r} on {cfg.gpus} x {hw.name}")
    print(f"  step time        {fmt_time(res.step_time_s)}  ({res.tokens_per_s:,.0f} tokens/s)")
    print(f"  TFLOP/s per GPU  {res.tflops_per_gpu:.1f} (hardware, eq. 3)  {res.model_tflops_per_gpu:.1f} (model)")
    print(f"  MFU              {res.mfu:.1%}")
    print(f"  bubble           {res.bubble_fraction:.1%} of the step")
    print(f"  communication    {fmt_time(res.comm_time_s)} total, {fmt_time(res.exposed_comm_s)} exposed: "
          + ", ".join(f"{k} {fmt_time(v)}" for k, v in res.comm_time_by_kind.items() if v))
    print(f"  memory per GPU   {fmt_bytes(res.memory_per_gpu_bytes)} of {fmt_bytes(hw.memory_bytes)}"
          + ("  OUT OF MEMORY" if res.oom else ""))
    if at_scale is not None:
        print(f"  event clock      {fmt_time(at_scale.step_time_s)} per step, bubble {at_scale.bubble_fraction:.1%}, "
              f"exposed comm {fmt_time(at_scale.exposed_comm_s)} ({at_scale.simulated_ranks} ranks simulated, "
              f"{at_scale.instructions:,} instructions); Chrome trace -> {args.trace}")
    return 0
