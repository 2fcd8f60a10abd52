"""`parasim search`: the fastest parallel configurations of a GPT training step that fit in memory.

    parasim search --model gpt3-175b --gpus 1536 --hardware a100-80gb --global-batch 1536 --top 5 --json

Searches tensor, context, pipeline, data and expert-parallel degrees (`--cp`, `--ep` lists; MoE
models take Megatron's --num-experts --moe-router-topk --moe-ffn-hidden-size), micro-batch size
(and so the micro-batch count), schedule (GPipe, 1F1B, interleaved with v chunks, ZB-H1, ZB-H2), the stage split (even, the
embedding and loss counted, first/last stage layers), ZeRO stage,
recomputation and sequence parallelism with the closed-form model (`simulator.cost.search`), and
says why the best configuration of every other layout loses (OOM by how much, or slower by x%
and the step-time components that grew).
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..cost.assumptions import assumptions_of, format_assumptions
from ..cost.hardware import get_hardware, hardware_names
from ..cost.model_presets import model_names
from ..cost.search import search_training
from ..cost.search_space import STAGE_SPLITS
from ..errors import ParasimError
from ..parallel.schedule_registry import PRICED_SCHEDULES as SCHEDULES
from ..parallel.schedule_registry import SEARCHED_SCHEDULES
from ..progress import Progress
from ..units import fmt_bytes, fmt_time
from .simulate import (
    MODEL_SHAPE_FLAGS,
    add_assumption_flags,
    assumptions_from_args,
    megatron_argv,
    model_from_args,
    own_stack_flags,
)

# Megatron-LM flags that fix what the search explores
_SEARCHED = {"tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
             "expert-model-parallel-size", "micro-batch-size", "num-layers-per-virtual-pipeline-stage",
             "num-virtual-stages-per-pipeline-rank", "recompute-granularity", "use-distributed-optimizer",
             "sequence-parallel", "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
             "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split"}


def add_parser(sub) -> None:
    p = sub.add_parser("search", help="search tp/pp/dp, micro-batch, schedule, ZeRO, recompute for the fastest fit")
    p.add_argument("--model", default=None, help=f"model preset: {', '.join(model_names())}")
    for name in MODEL_SHAPE_FLAGS:
        p.add_argument(f"--{name}", type=int, default=None, help=f"custom model: {name} (instead of --model)")
    p.add_argument("--gpus", type=int, required=True, help="number of devices")
    p.add_argument("--hardware", default="a100-80gb", help=f"preset: {', '.join(hardware_names())}")
    p.add_argument("--global-batch", dest="global_batch", type=int, default=None,
                   help="B sequences per step (or Megatron's --global-batch-size)")
    p.add_argument("--top", type=int, default=5, help="how many configurations to list (default 5)")
    p.add_argument("--schedules", default=",".join(SEARCHED_SCHEDULES),
                   help=f"comma-separated subset of {','.join(SCHEDULES)} (default {','.join(SEARCHED_SCHEDULES)})")
    p.add_argument("--max-tp", dest="max_tp", type=int, default=None, help="largest tensor-parallel size "
                   "(default: devices per node)")
    p.add_argument("--alternatives", type=int, default=10, help="how many losing layouts to explain (default 10)")
    p.add_argument("--cp", dest="cp_sizes", default=None, help="comma-separated context-parallel sizes to try (default: 1, and "
                   "powers of two up to 32 for sequences of 16k tokens or more)")
    p.add_argument("--ep", dest="ep_sizes", default=None, help="comma-separated expert-parallel sizes to try (MoE models, e.g. "
                   "--num-experts 8 --moe-router-topk 2; default: every power of two dividing the experts and "
                   "(t / etp) d)")
    p.add_argument("--etp", dest="etp_sizes", default=None, help="comma-separated expert-tensor-parallel sizes to try "
                   "(MoE parallel folding; default: every power of two dividing t, below t only with SP)")
    p.add_argument("--stage-splits", dest="stage_splits", default=None,
                   help=f"comma-separated subset of {','.join(STAGE_SPLITS)} (default: all; balance_embedding is "
                   "Megatron's --account-for-embedding/loss-in-pipeline-split, first_last its "
                   "--decoder-first/last-pipeline-num-layers)")
    add_assumption_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, megatron_flags=True)


def _sizes(flag: str, text) -> tuple[int, ...] | None:
    """'1,2,4' -> (1, 2, 4); None when not given; refuses anything but positive integers."""
    if not text:
        return None
    try:
        out = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ParasimError(f"{flag} must be comma-separated positive integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise ParasimError(f"{flag} must be comma-separated positive integers, got {text!r}")
    return out


def run(args) -> int:
    hw = get_hardware(getattr(args, "hardware", "a100-80gb"))
    extra, notes = megatron_argv(args), []
    if extra:      # Megatron-LM flags: the model and the software stack; the parallel layout is searched
        from ..cost.megatron_args import megatron_run, parse_megatron_args
        mega = parse_megatron_args(extra)
        searched = [f"--{f}" for f in mega.given if f in _SEARCHED]
        if "expert-tensor-parallel-size" in mega.given and not getattr(args, "etp_sizes", None):
            args.etp_sizes = str(mega["expert-tensor-parallel-size"])    # searched at that one size
        base = model_from_args(args) if getattr(args, "model", None) else None
        run_ = megatron_run(mega, model=base)
        model, A = run_.model, replace(run_.assumptions, **own_stack_flags(args))
        notes = list(run_.notes) + ([f"searched, not fixed: {' '.join(searched)}"] if searched else [])
        ignored = list(run_.ignored)
        if args.global_batch is None and "global-batch-size" in mega.given:
            args.global_batch = mega["global-batch-size"]
    else:
        model, ignored = model_from_args(args), []
        A = assumptions_from_args(args, model)
    # own dests: `megatron_argv` hands `cp` / `ep` back as Megatron's single sizes
    cps, eps = _sizes("--cp", getattr(args, "cp_sizes", None)), _sizes("--ep", getattr(args, "ep_sizes", None))
    etps = _sizes("--etp", getattr(args, "etp_sizes", None))
    schedules = tuple(s.strip() for s in str(getattr(args, "schedules", ",".join(SEARCHED_SCHEDULES))).split(",") if s.strip())
    unknown = [s for s in schedules if s not in SCHEDULES]
    if unknown or not schedules:
        raise ParasimError(f"unknown schedule(s) {unknown or schedules}; choose from {', '.join(SCHEDULES)}")
    if getattr(args, "global_batch", None) is None:
        raise ParasimError("no global batch: give --global-batch B (or Megatron's --global-batch-size)")
    top, n_alt = int(getattr(args, "top", 5)), int(getattr(args, "alternatives", 10))
    if n_alt < 0:
        raise ParasimError(f"--alternatives must be >= 0, got {n_alt}")
    text = getattr(args, "stage_splits", None)
    splits = tuple(x.strip() for x in str(text).split(",") if x.strip()) if text is not None else None
    res = search_training(model, hw, int(args.gpus), int(args.global_batch), schedules=schedules,
                          max_tp=getattr(args, "max_tp", None), top=top, assumptions=A, context_parallel=cps,
                          expert_parallel=eps, expert_tensor_parallel=etps, stage_splits=splits,
                          progress=Progress("search", "layouts"))
    if getattr(args, "json", False):
        out = res.as_dict()
        out["alternatives"] = out["alternatives"][:n_alt]
        out.update(model=model.name, params=model.params(), hardware=hw.name, gpus=args.gpus,
                   global_batch=args.global_batch, ignored=ignored, notes=notes,
                   assumptions=assumptions_of(model, A, res.best.config, door="flag", searched=True))
        print(json.dumps(out))
        return 0
    print(f"{model!r} on {args.gpus} x {hw.name}, global batch {args.global_batch}: "
          f"{res.counts()}")
    print("  space: " + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in res.space.items()))
    print(format_assumptions(assumptions_of(model, A, res.best.config, door="flag", searched=True)))
    for i, c in enumerate(res.top, 1):
        r = c.result
        print(f"  {i}. {c.config!r}\n     {fmt_time(r.step_time_s)} per step, {r.tokens_per_s:,.0f} tokens/s, "
              f"MFU {r.mfu:.1%}, bubble {r.bubble_fraction:.1%}, memory {fmt_bytes(r.memory_per_gpu_bytes)} "
              f"({fmt_bytes(r.memory.capacity_bytes - r.memory_per_gpu_bytes)} headroom)")
    if res.alternatives and n_alt:
        print("why other layouts lose:")
        for a in res.alternatives[:n_alt]:
            cp = f" c={a.config.cp}" if a.config.cp > 1 else ""
            ep = f" e={a.config.ep}" if a.config.ep > 1 else ""
            print(f"  t={a.config.tp}{cp} p={a.config.pp} d={a.config.dp}{ep}: {a.reason}")
    return 0
