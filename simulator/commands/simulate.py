"""`parasim simulate`: closed-form step time, TFLOP/s, MFU and memory of one GPT training config.

    parasim simulate --model megatron-1t --hardware a100-80gb --tp 8 --pp 64 --dp 6 \\
        --microbatch-size 1 --global-batch 3072 --recompute full --json
    parasim simulate --model llama-405b --hardware h100-sxm --gpus 8192 --tp 8 --pp 16 \\
        --schedule interleaved --virtual-stages 2 --balance-embedding --global-batch 2048 \\
        --sequence-parallel --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap --zero 1

The software-stack switches (`Assumptions`) carry Megatron-LM's flag names; their defaults are the
vocabulary's (`simulator.vocabulary`, docs/configuration.md). FlashAttention is the model preset's
(`ModelSpec.flash_attention`: on for the Llama presets, off for the GPT-3 / Megatron 2021 ones,
whose papers ran without it); --use-flash-attn / --no-flash-attn decide explicitly. Every output
states these assumptions and where each came from (`assumptions` in the JSON).

Megatron-LM's own flags can be pasted as they are (`simulator.cost.megatron_args`):

    parasim simulate --gpus 64 --hardware h100-sxm --num-layers 32 --hidden-size 4096 \\
        --num-attention-heads 32 --seq-length 4096 --vocab-size 32000 --swiglu \\
        --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 1 \\
        --global-batch-size 256 --use-distributed-optimizer --overlap-grad-reduce --bf16 --json

Then the defaults are Megatron-LM's (no FlashAttention, no overlap unless given); --model PRESET
gives the model and its software stack (FlashAttention for Llama), which the flags override only
where they are given (restating a preset's value changes nothing); parasim's own parallel flags
(--tp, --pp, ...) cannot be mixed in. Megatron flags that change neither time nor memory are listed under `ignored` in the JSON.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..cost.analytic import estimate
from ..cost.assumptions import assumptions_of, format_assumptions
from ..cost.hardware import get_hardware, hardware_names
from ..cost.memory import RECOMPUTE
from ..cost.model_presets import ModelSpec, get_model, model_names
from ..cost.parallel_config import CP_COMM_TYPES, Assumptions, ParallelConfig
from ..cost.stack import stack_names
from ..errors import ParasimError
from ..parallel.schedule_registry import PRICED_SCHEDULES as SCHEDULES
from ..units import fmt_bytes, fmt_time
from ..vocabulary import BY_NAME, DEFAULTS, canonical_value

MODEL_SHAPE_FLAGS = ("layers", "hidden", "heads", "seq", "vocab")


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="analytic step time / MFU / memory of a parallel training config")
    p.add_argument("--model", default=None, help=f"model preset: {', '.join(model_names())}")
    for name in MODEL_SHAPE_FLAGS:
        p.add_argument(f"--{name}", type=int, default=None, help=f"custom model: {name} (instead of --model)")
    p.add_argument("--hardware", default="a100-80gb", help=f"preset: {', '.join(hardware_names())}")
    p.add_argument("--gpus", type=int, default=None, help="total GPUs; must equal tp x pp x dp")
    p.add_argument("--tp", type=int, default=DEFAULTS["tp"], help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=DEFAULTS["pp"], help="pipeline stages")
    p.add_argument("--dp", type=int, default=None, help="data-parallel size (default gpus / (tp pp))")
    p.add_argument("--microbatch-size", dest="microbatch_size", type=int, default=DEFAULTS["micro_batch_size"],
                   help="b")
    p.add_argument("--global-batch", dest="global_batch", type=int, default=None,
                   help="B sequences per step (default b x dp, one micro-batch: Megatron-LM's default)")
    p.add_argument("--schedule", default=DEFAULTS["schedule"], choices=SCHEDULES, help='pipeline schedule (default %(default)s)')
    p.add_argument("--virtual-stages", dest="virtual_stages", type=int, default=DEFAULTS["virtual_stages"],
                   help="model chunks per device (interleaved schedule)")
    p.add_argument("--recompute", default=DEFAULTS["recompute"], choices=RECOMPUTE, help="activation recomputation: none, selective (the stack's policy: Megatron's attention core, torchtitan's op-level) or full (default %(default)s)")
    p.add_argument("--sequence-parallel", dest="sequence_parallel", action="store_true", help="Megatron's sequence parallelism over the tensor-parallel ranks")
    p.add_argument("--zero", "--zero-stage", dest="zero", type=int, default=None,
                   help=f"ZeRO stage 0-3 (default {DEFAULTS['zero_stage']}; with Megatron-LM flags: overrides theirs)")
    add_fsdp_flags(p)
    add_parallel_extras(p)
    add_assumption_flags(p)
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="also run the scale program on the event clock and write its Chrome trace to FILE")
    p.add_argument("--trace-all-tp-ranks", dest="trace_all_tp_ranks", action="store_true",
                   help="with --trace: simulate every tensor-parallel rank (default: one per stage)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run, megatron_flags=True)


def add_parallel_extras(p) -> None:
    """Context and expert parallelism and the pipeline stage split (flags of `simulate` and `search`)."""
    p.add_argument("--cp", "--context-parallel-size", dest="cp", type=int, default=DEFAULTS["cp"],
                   help="context-parallel size")
    p.add_argument("--cp-comm-type", dest="cp_comm_type", default=DEFAULTS["cp_comm_type"], choices=CP_COMM_TYPES,
                   type=lambda v: canonical_value("cp_comm_type", v),
                   help="ring attention (p2p) or Ulysses all-to-all (a2a); the older ring / all-to-all are accepted")
    p.add_argument("--ep", "--expert-model-parallel-size", dest="ep", type=int, default=DEFAULTS["ep"],
                   help="expert-parallel size (MoE models; ep x etp divides tp x cp x dp)")
    p.add_argument("--etp", "--expert-tensor-parallel-size", dest="etp", type=int, default=DEFAULTS["etp"],
                   help="expert layers' tensor-parallel size (default tp; 1 folds the experts' group over the "
                        "tensor ranks: MoE parallel folding)")
    p.add_argument("--decoder-first-pipeline-num-layers", dest="first_stage_layers", type=int, default=None,
                   help="layers of the first pipeline stage (the rest split evenly)")
    p.add_argument("--decoder-last-pipeline-num-layers", dest="last_stage_layers", type=int, default=None,
                   help="layers of the last pipeline stage")
    p.add_argument("--balance-embedding", dest="balance_embedding", action="store_true",
                   help="count the embedding and LM head as a layer each when splitting stages (Megatron "
                        "--account-for-embedding/loss-in-pipeline-split)")


def add_fsdp_flags(p) -> None:
    """How ZeRO-3 shards (`simulator.cost.fsdp`); Megatron-LM's --use-torch-fsdp2 / --use-megatron-fsdp too."""
    p.add_argument("--fsdp", default=None, choices=BY_NAME["fsdp"].choices,
                   help=f"ZeRO-3 as PyTorch FSDP2 or Megatron-FSDP (per-layer units; composes with --pp); default "
                        f"{DEFAULTS['fsdp']} (DeepSpeed)")
    p.add_argument("--reshard-after-forward", dest="reshard_after_forward", default=None,
                   choices=BY_NAME["reshard_after_forward"].choices,
                   help="FSDP: torchtitan's fsdp_reshard_after_forward (default: on without a pipeline, off with one)")
    p.add_argument("--dp-replicate", dest="dp_replicate", type=int, default=None,
                   help="FSDP: hybrid sharding over this many replicas (torchtitan's data_parallel_replicate_degree, "
                        "Megatron's --num-distributed-optimizer-instances); default 1")


def add_assumption_flags(p) -> None:
    """The software stack (`Assumptions`), with Megatron-LM's flag names."""
    fa = p.add_mutually_exclusive_group()
    fa.add_argument("--use-flash-attn", dest="flash_attention", action="store_true", default=None,
                    help="FlashAttention (default: the model preset's: on for Llama, off for GPT-3 / Megatron 2021)")
    fa.add_argument("--no-flash-attn", dest="flash_attention", action="store_false", help='the unfused attention of Megatron-LM 2021')
    p.add_argument("--fp8", "--fp8-format", dest="fp8", nargs="?", const="hybrid", default=None,
                   help="FP8 matmuls at the hardware's fp8 peak (Transformer Engine; e4m3 or hybrid)")
    p.add_argument("--overlap-grad-reduce", dest="overlap_grad_reduce", action="store_true",
                   help="reduce gradient buckets during the backward")
    p.add_argument("--overlap-param-gather", dest="overlap_param_gather", action="store_true",
                   help="all-gather parameters under the forward (ZeRO-3: prefetch)")
    p.add_argument("--tp-comm-overlap", dest="overlap_tp_comm", action="store_true",
                   help="overlap tensor-parallel collectives with the GEMMs (Transformer Engine)")
    p.add_argument("--no-nvls", dest="nvls", action="store_false", help="no NVLink SHARP all-reduce")
    p.add_argument("--moe-expert-capacity-factor", dest="capacity_factor", type=float, default=None,
                   help="MoE expert capacity: tokens per expert x this factor (default: dropless)")
    p.add_argument("--moe-pad-expert-input-to-capacity", dest="pad_to_capacity", action="store_true",
                   help="pad every expert's input to its capacity (needs --moe-expert-capacity-factor)")
    p.add_argument("--overlap-moe-expert-parallel-comm", dest="overlap_moe_comm", action="store_true",
                   help="hide MoE dispatch/combine under the paired micro-batch's compute (Megatron's 1F1B "
                        "all-to-all overlap; DualPipe's)")
    p.add_argument("--moe-shared-expert-overlap", dest="shared_expert_overlap", action="store_true",
                   help="compute the shared experts while tokens are dispatched and combined")
    p.add_argument("--moe-token-dispatcher-type", dest="moe_token_dispatcher", default=None,
                   choices=BY_NAME["moe_token_dispatcher"].choices,
                   help=f"MoE token dispatch (default {DEFAULTS['moe_token_dispatcher']}; with Megatron-LM's "
                        f"flags Megatron's own default, allgather)")
    p.add_argument("--stage3-max-reuse-distance", dest="stage3_max_reuse_distance", type=float,
                   default=DEFAULTS["stage3_max_reuse_distance"],
                   help="DeepSpeed ZeRO-3: elements fetched before a released parameter's reuse (default 1e9); "
                        "with --recompute full, sub-modules beyond it are gathered a third time")
    add_stack_flag(p)
    p.add_argument("--causal-attention-flops", dest="causal_attention_flops", action="store_true", default=None,
                   help="model TFLOP/s and MFU count the attention core's causal half (6N + 6 L h s per token, as "
                        "NVIDIA's newer tables do; default: the full 6N + 12 L h s, simulator.cost.flops)")


def add_stack_flag(p) -> None:
    p.add_argument("--stack", default=None, metavar="NAME|FILE",
                   help=f"software stack: {', '.join(stack_names())} or a .toml/.json stack file (default "
                        f"{DEFAULTS['stack']}; simulator.cost.stack)")


def own_stack_flags(args) -> dict:
    """The `Assumptions` fields of parasim's own flags that Megatron-LM's flags do not set, given on
    this command line: applied on top of either (a flag that changes the answer is never dropped)."""
    out = {}
    if getattr(args, "causal_attention_flops", None):
        out["causal_attention_flops"] = True
    if getattr(args, "stack", None) is not None:
        out["stack"] = args.stack
    return out


def assumptions_from_args(args, model: ModelSpec) -> Assumptions:
    """The software stack of parasim's flags; FlashAttention left to the model preset unless given."""
    fa = getattr(args, "flash_attention", None)
    fp8 = getattr(args, "fp8", None)
    if fp8 is not None and fp8 not in ("e4m3", "hybrid"):
        raise ParasimError(f"--fp8-format must be e4m3 or hybrid, got {fp8!r}")
    return Assumptions(flash_attention=None if fa is None else bool(fa),
                       fp8=fp8 is not None,
                       overlap_grad_reduce=bool(getattr(args, "overlap_grad_reduce", False)),
                       overlap_param_gather=bool(getattr(args, "overlap_param_gather", False)),
                       overlap_tp_comm=bool(getattr(args, "overlap_tp_comm", False)),
                       nvls=bool(getattr(args, "nvls", True)),
                       capacity_factor=getattr(args, "capacity_factor", None),
                       pad_to_capacity=bool(getattr(args, "pad_to_capacity", False)),
                       overlap_moe_comm=bool(getattr(args, "overlap_moe_comm", False)),
                       shared_expert_overlap=bool(getattr(args, "shared_expert_overlap", False)),
                       moe_token_dispatcher=getattr(args, "moe_token_dispatcher", None) or DEFAULTS["moe_token_dispatcher"],
                       stage3_max_reuse_distance=float(getattr(args, "stage3_max_reuse_distance",
                                                               DEFAULTS["stage3_max_reuse_distance"])),
                       **own_stack_flags(args))


def model_from_args(args) -> ModelSpec:
    """--model PRESET with any of --layers/--hidden/--heads/--seq/--vocab overriding its fields, or
    a custom model from all five."""
    shape = {n: getattr(args, n, None) for n in MODEL_SHAPE_FLAGS}
    name = getattr(args, "model", None)
    if name:
        return get_model(name, **{k: v for k, v in shape.items() if v is not None})
    missing = [f"--{n}" for n, v in shape.items() if v is None]
    if missing:
        raise ParasimError(f"no model: give --model PRESET or all of --layers --hidden --heads --seq --vocab "
                           f"(missing {' '.join(missing)})")
    return ModelSpec("custom", **shape)


def _arg(args, dest: str, knob: str):
    """args.dest, or the vocabulary's default of `knob` (callers may pass a bare Namespace)."""
    value = getattr(args, dest, None)
    return DEFAULTS[knob] if value is None else value


def config_from_args(args) -> ParallelConfig:
    tp, pp, cp = int(_arg(args, "tp", "tp")), int(_arg(args, "pp", "pp")), int(_arg(args, "cp", "cp"))
    gpus, dp = getattr(args, "gpus", None), getattr(args, "dp", None)
    for name, v in (("tp", tp), ("pp", pp), ("cp", cp), ("gpus", gpus), ("dp", dp)):
        if v is not None and v < 1:
            raise ParasimError(f"--{name} must be a positive integer, got {v}")
    mp = tp * pp * cp
    if dp is None:
        if gpus is None:
            dp = 1
        elif gpus % mp:
            raise ParasimError(f"--gpus {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} = {mp}")
        else:
            dp = gpus // mp
    if gpus is not None and mp * dp != gpus:
        raise ParasimError(f"tp x pp x cp x dp = {tp} x {pp} x {cp} x {dp} = {mp * dp} must equal --gpus {gpus}")
    b = int(_arg(args, "microbatch_size", "micro_batch_size"))
    if b < 1:
        raise ParasimError(f"--microbatch-size must be a positive integer, got {b}")
    B = getattr(args, "global_batch", None)     # None: ParallelConfig's default (b x dp, Megatron-LM's)
    B = None if B is None else int(B)
    return ParallelConfig(tp=tp, pp=pp, dp=dp, micro_batch_size=b, global_batch=B,
                          schedule=_arg(args, "schedule", "schedule"),
                          virtual_stages=int(_arg(args, "virtual_stages", "virtual_stages")),
                          recompute=_arg(args, "recompute", "recompute"),
                          sequence_parallel=bool(_arg(args, "sequence_parallel", "sequence_parallel")),
                          zero_stage=int(_arg(args, "zero", "zero_stage")), cp=cp, ep=int(_arg(args, "ep", "ep")),
                          etp=getattr(args, "etp", None),
                          cp_comm_type=_arg(args, "cp_comm_type", "cp_comm_type"),
                          first_stage_layers=getattr(args, "first_stage_layers", None),
                          last_stage_layers=getattr(args, "last_stage_layers", None),
                          balance_embedding=bool(_arg(args, "balance_embedding", "balance_embedding")),
                          fsdp=_arg(args, "fsdp", "fsdp"),
                          reshard_after_forward=_arg(args, "reshard_after_forward", "reshard_after_forward"),
                          dp_replicate=int(_arg(args, "dp_replicate", "dp_replicate")))


# parasim flags that carry Megatron-LM's names: with Megatron flags they go back to its parser
_SHARED = (("sequence_parallel", "--sequence-parallel"), ("overlap_grad_reduce", "--overlap-grad-reduce"),
           ("overlap_param_gather", "--overlap-param-gather"), ("overlap_tp_comm", "--tp-comm-overlap"),
           ("flash_attention", "--use-flash-attn"), ("fp8", "--fp8-format"), ("cp", "--context-parallel-size"),
           ("ep", "--expert-model-parallel-size"), ("first_stage_layers", "--decoder-first-pipeline-num-layers"),
           ("last_stage_layers", "--decoder-last-pipeline-num-layers"), ("etp", "--expert-tensor-parallel-size"),
           ("capacity_factor", "--moe-expert-capacity-factor"), ("pad_to_capacity", "--moe-pad-expert-input-to-capacity"),
           ("moe_token_dispatcher", "--moe-token-dispatcher-type"), ("overlap_moe_comm", "--overlap-moe-expert-parallel-comm"),
           ("shared_expert_overlap", "--moe-shared-expert-overlap"))
# parasim-only knobs that Megatron flags replace: (dest, default, flag)
_NATIVE = (("tp", DEFAULTS["tp"], "--tp"), ("pp", DEFAULTS["pp"], "--pp"), ("dp", None, "--dp"),
           ("microbatch_size", DEFAULTS["micro_batch_size"], "--microbatch-size"), ("global_batch", None, "--global-batch"),
           ("schedule", DEFAULTS["schedule"], "--schedule"), ("virtual_stages", DEFAULTS["virtual_stages"], "--virtual-stages"),
           ("recompute", DEFAULTS["recompute"], "--recompute"))
# parasim flags that combine with Megatron flags, overriding what they say: (dest, ParallelConfig field)
_OVERRIDES = (("zero", "zero_stage"), ("fsdp", "fsdp"), ("reshard_after_forward", "reshard_after_forward"),
              ("dp_replicate", "dp_replicate"))


def megatron_argv(args) -> list[str]:
    """The Megatron-LM flags of this command line (`simulator.cli` hands over what parasim's parser
    does not know), with the shared-name flags parasim's parser took given back."""
    extra = list(getattr(args, "megatron_argv", None) or [])
    if not extra:
        return []
    for dest, flag in _SHARED:
        v = getattr(args, dest, None)
        if v is True:
            extra.append(flag)
        elif v not in (None, False) and not isinstance(v, bool) and not (v == 1 and dest in ("cp", "ep")):
            extra += [flag, str(v)]
    return extra


def resolve(args):
    """(model, ParallelConfig, Assumptions, ignored Megatron flags, notes) of `simulate`'s flags:
    parasim's own, or Megatron-LM's pasted as they are (module docstring)."""
    extra = megatron_argv(args)
    if not extra:
        model = model_from_args(args)
        return model, config_from_args(args), assumptions_from_args(args, model), (), ()
    from ..cost.megatron_args import megatron_run, parse_megatron_args
    mixed = [flag for dest, default, flag in _NATIVE if getattr(args, dest, default) != default]
    if mixed:
        raise ParasimError(f"give Megatron-LM flags or parasim's {' '.join(mixed)}, not both (Megatron: "
                           f"--tensor-model-parallel-size, --pipeline-model-parallel-size, --micro-batch-size, ...)")
    base = model_from_args(args) if getattr(args, "model", None) else None
    run_ = megatron_run(parse_megatron_args(extra), gpus=getattr(args, "gpus", None), model=base)
    over = {field: getattr(args, dest) for dest, field in _OVERRIDES if getattr(args, dest, None) is not None}
    cfg = replace(run_.config, **over) if over else run_.config
    A = replace(run_.assumptions, **own_stack_flags(args))
    return run_.model, cfg, A, tuple(run_.ignored), tuple(run_.notes)


# --trace builds one instruction per layer chunk, micro-batch and pass on every simulated rank:
# about 6 per (rank, micro-batch) cell. 250k cells (~1.5M instructions, twice 1F1B 128 x 1024)
# keep the event clock within seconds and a few hundred MB.
MAX_TRACE_CELLS = 250_000


def _check_trace_size(cfg: ParallelConfig, fold_tp: bool) -> None:
    ranks = cfg.pp * (1 if fold_tp else cfg.tp)
    cells = ranks * cfg.microbatches * cfg.virtual_stages
    if cells > MAX_TRACE_CELLS:
        raise ParasimError(f"--trace would simulate {ranks} ranks x {cfg.microbatches:,} micro-batches x "
                           f"{cfg.virtual_stages} chunks = {cells:,} cells, more than the {MAX_TRACE_CELLS:,} the "
                           "event clock may build; lower --global-batch or drop --trace (the closed form has no limit)")


def run(args) -> int:
    model, cfg, A, ignored, notes = resolve(args)
    hw = get_hardware(getattr(args, "hardware", "a100-80gb"))
    res = estimate(model, cfg, hw, A)
    at_scale = None
    if getattr(args, "trace", None):
        _check_trace_size(cfg, fold_tp=not getattr(args, "trace_all_tp_ranks", False))
        from ..cost.scale_sim import simulate_at_scale
        at_scale = simulate_at_scale(model, cfg, hw, A, fold_tp=not getattr(args, "trace_all_tp_ranks", False),
                               overlap_grad_reduce=A.overlap_grad_reduce)
        at_scale.trace.save_chrome(args.trace)
    if getattr(args, "json", False):
        out = res.as_dict()
        out.update(model=model.name, params=model.params(), hardware=hw.name, config=repr(cfg),
                   assumptions=assumptions_of(model, A, cfg, door="flag"), ignored=list(ignored),
                   notes=list(notes))
        if at_scale is not None:
            out["event_clock"] = at_scale.as_dict()
            out["trace_file"] = args.trace
        print(json.dumps(out))
        return 0
    print(f"{model!r}\n{cfg!r} on {cfg.gpus} x {hw.name}")
    for note in notes:
        print(f"  note: {note}")
    if ignored:
        print(f"  ignored Megatron-LM flags (no effect on time or memory): {' '.join(ignored)}")
    print(format_assumptions(assumptions_of(model, A, cfg, door="flag")))
    print(f"  step time        {fmt_time(res.step_time_s)}  ({res.tokens_per_s:,.0f} tokens/s)")
    print(f"  TFLOP/s per GPU  {res.tflops_per_gpu:.1f} (hardware, eq. 3)  {res.model_tflops_per_gpu:.1f} (model)")
    print(f"  MFU              {res.mfu:.1%}")
    print(f"  bubble           {res.bubble_fraction:.1%} of the step")
    print(f"  communication    {fmt_time(res.comm_time_s)} total, {fmt_time(res.exposed_comm_s)} exposed: "
          + ", ".join(f"{k} {fmt_time(v)}" for k, v in res.comm_time_by_kind.items() if v))
    print(f"  memory per GPU   {fmt_bytes(res.memory_per_gpu_bytes)} of {fmt_bytes(hw.memory_bytes)}"
          + ("  OUT OF MEMORY" if res.oom else ""))
    if res.leaves_out:
        print(f"  closed form leaves out  {', '.join(res.leaves_out)} (docs/step-model.md)")
    if at_scale is not None:
        print(f"  event clock      {fmt_time(at_scale.step_time_s)} per step, bubble {at_scale.bubble_fraction:.1%}, "
              f"exposed comm {fmt_time(at_scale.exposed_comm_s)} ({at_scale.simulated_ranks} ranks simulated, "
              f"{at_scale.instructions:,} instructions); Chrome trace -> {args.trace}")
    return 0
