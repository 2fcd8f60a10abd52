"""Megatron-LM's own command-line flags -> (model, parallel configuration, precision and overlap options).

`parse_megatron_args(["--num-layers", "32", ...])` reads the flags of a Megatron-LM launch script
as they are (`--flag value`, `--flag=value`). Every Megatron-LM flag is in one table,
`megatron_flags.txt` (`megatron_flag_table`). A flag that changes the price is typed and validated
here (`FLAGS`). A flag that changes time or memory but is not priced is refused with the table's
reason. Every other flag has no effect on the time or memory of a step: it is accepted and listed
in `ignored`. Anything else is refused with the closest known name. Nothing is evaluated.

`megatron_run(args, gpus=...)` turns them into a `MegatronRun`. Defaults are Megatron-LM's:
tp = pp = cp = ep = 1, micro-batch 1, global batch = micro-batch x dp, no recomputation, no
sequence parallelism, no FlashAttention (with --model PRESET: the preset's), no overlap, the expert
tensor-parallel size = tp, the allgather token dispatcher, dropless MoE, bf16 with fp32 main gradients (the
"megatron" recipe, 18 bytes per parameter), f = 4h (SwiGLU: int(8h/3 / 64) x 64), one query group
per head, learned absolute positions, linear biases, LayerNorm, tied embeddings, dropout 0.1
(--attention-dropout 0 --hidden-dropout 0 together: no dropout masks kept, `ModelSpec.dropout`). As Megatron-LM does
(`validate_args`), sequence parallelism is switched off when tp = 1 and reported in `notes`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields

from simulator.cost.megatron_flag_table import FLAG_EFFECTS, refusal
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.moe import moe_layer_pattern
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.errors import ParasimError
from simulator.vocabulary import DEFAULTS

_BOOL, _INT, _FLOAT, _POSITIVE, _TEXT = "flag", int, float, "positive", "text"
# Megatron-FSDP's --data-parallel-sharding-strategy -> ZeRO stage (what each one shards)
SHARDING_STRATEGIES = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
# flag -> (type or choices, default) for what changes time or memory
FLAGS = {
    "num-layers": (_INT, None), "hidden-size": (_INT, None), "num-attention-heads": (_INT, None),
    "ffn-hidden-size": (_INT, None), "seq-length": (_INT, None), "vocab-size": (_INT, None),
    "make-vocab-size-divisible-by": (_INT, 128),
    "group-query-attention": (_BOOL, False), "num-query-groups": (_INT, 1), "swiglu": (_BOOL, False),
    "untie-embeddings-and-output-weights": (_BOOL, False), "disable-bias-linear": (_BOOL, False),
    "normalization": (("LayerNorm", "RMSNorm"), "LayerNorm"),
    "position-embedding-type": (("learned_absolute", "rope", "mrope", "relative", "none"), "learned_absolute"),
    "num-experts": (_INT, None), "moe-router-topk": (_INT, 2), "moe-ffn-hidden-size": (_INT, None),
    "tensor-model-parallel-size": (_INT, 1), "pipeline-model-parallel-size": (_INT, 1),
    "num-layers-per-virtual-pipeline-stage": (_INT, None), "num-virtual-stages-per-pipeline-rank": (_INT, None),
    "decoder-first-pipeline-num-layers": (_INT, None), "decoder-last-pipeline-num-layers": (_INT, None),
    "context-parallel-size": (_INT, 1), "expert-model-parallel-size": (_INT, 1),
    "expert-tensor-parallel-size": (_INT, None),
    "moe-token-dispatcher-type": (("allgather", "alltoall", "flex"), "allgather"),   # Megatron-LM's default
    "moe-expert-capacity-factor": (_POSITIVE, None), "moe-pad-expert-input-to-capacity": (_BOOL, False),
    "moe-shared-expert-intermediate-size": (_INT, None), "moe-shared-expert-overlap": (_BOOL, False),
    "overlap-moe-expert-parallel-comm": (_BOOL, False),
    "moe-layer-freq": (_TEXT, "1"), "mtp-num-layers": (_INT, None), "moe-grouped-gemm": (_BOOL, False),
    "kv-channels": (_INT, None), "multi-latent-attention": (_BOOL, False), "kv-lora-rank": (_INT, 32),
    "q-lora-rank": (_INT, None), "qk-head-dim": (_INT, 128), "qk-pos-emb-head-dim": (_INT, 64), "v-head-dim": (_INT, 128),
    "micro-batch-size": (_INT, 1), "global-batch-size": (_INT, None),
    "sequence-parallel": (_BOOL, False),
    "recompute-granularity": (("full", "selective"), None), "recompute-method": (("uniform", "block"), None),
    "recompute-num-layers": (_INT, None),
    "use-distributed-optimizer": (_BOOL, False), "overlap-grad-reduce": (_BOOL, False),
    "use-torch-fsdp2": (_BOOL, False), "use-megatron-fsdp": (_BOOL, False),
    "data-parallel-sharding-strategy": (tuple(SHARDING_STRATEGIES), "optim_grads_params"),
    "torch-fsdp2-no-reshard-after-forward": (_BOOL, False), "num-distributed-optimizer-instances": (_INT, 1),
    "overlap-param-gather": (_BOOL, False), "tp-comm-overlap": (_BOOL, False),
    "use-flash-attn": (_BOOL, False), "attention-backend": (("auto", "flash", "fused", "unfused", "local"), "auto"),
    "bf16": (_BOOL, False), "fp16": (_BOOL, False), "fp8-format": (("e4m3", "hybrid"), None),
    "attention-dropout": (_FLOAT, 0.1), "hidden-dropout": (_FLOAT, 0.1),
}
FLAGS.update({
    "account-for-embedding-in-pipeline-split": (_BOOL, False), "account-for-loss-in-pipeline-split": (_BOOL, False),
    "grad-reduce-in-bf16": (_BOOL, False), "accumulate-allreduce-grads-in-fp32": (_BOOL, False),
    "cp-comm-type": (("p2p", "a2a", "allgather", "a2a+p2p"), "p2p"),
    "optimizer": (("adam", "sgd", "muon", "dist_muon", "lion", "adamw"), "adam"),
    "transformer-impl": (("transformer_engine", "local", "inference_optimized"), "transformer_engine"),
})
_KNOWN = frozenset(FLAG_EFFECTS) | frozenset(FLAGS)


@dataclass(frozen=True)
class MegatronArgs:
    """Typed values of the flags in `FLAGS` (Megatron-LM defaults where not given), by flag name,
    and the other Megatron-LM flags seen, ignored because they change neither time nor memory."""

    values: dict
    given: tuple[str, ...]
    ignored: tuple[str, ...] = ()

    def __getitem__(self, flag: str):
        return self.values[flag]


@dataclass(frozen=True)
class MegatronRun:
    model: ModelSpec
    config: ParallelConfig
    assumptions: Assumptions
    recipe: str = "megatron"                 # model-state bytes (simulator.model_states)
    flash_attention: bool | None = None      # None: the model preset's (ModelSpec.flash_attention)
    fp8: bool = False
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def _closest(name: str) -> str:
    near = difflib.get_close_matches(name, sorted(_KNOWN), n=1, cutoff=0.6)
    return f"; did you mean --{near[0]}?" if near else ""


def _typed(flag: str, kind, text: str):
    if kind == _TEXT:
        return text
    if kind == _POSITIVE:
        try:
            value = float(text)
        except ValueError:
            raise ParasimError(f"--{flag} takes a number, got {text!r}") from None
        if not value > 0:
            raise ParasimError(f"--{flag} must be > 0, got {value}")
        return value
    if kind is _FLOAT:
        try:
            value = float(text)
        except ValueError:
            raise ParasimError(f"--{flag} takes a number, got {text!r}") from None
        if not 0 <= value < 1:
            raise ParasimError(f"--{flag} is a probability in [0, 1), got {value}")
        return value
    if kind is _INT:
        try:
            value = int(text)
        except ValueError:
            raise ParasimError(f"--{flag} takes an integer, got {text!r}") from None
        if value < 1 and flag != "recompute-num-layers":
            raise ParasimError(f"--{flag} must be a positive integer, got {value}")
        return value
    if text not in kind:
        raise ParasimError(f"--{flag} must be one of {', '.join(kind)}, got {text!r}")
    return text


def parse_megatron_args(argv) -> MegatronArgs:
    """Megatron-LM flags -> `MegatronArgs` (module docstring); a string is split on whitespace."""
    tokens = argv.split() if isinstance(argv, str) else list(argv)
    values = {flag: default for flag, (_k, default) in FLAGS.items()}
    given, ignored, i = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise ParasimError(f"unexpected argument {tok!r}: Megatron-LM flags start with --")
        name, eq, inline = tok[2:].partition("=")
        name_key = name.replace("_", "-")
        if name_key not in _KNOWN:
            raise ParasimError(f"unknown Megatron-LM flag --{name}{_closest(name_key)}")
        i += 1
        why = refusal(name_key)
        if why and name_key not in FLAGS:
            raise ParasimError(f"--{name_key} is refused: {why} (simulator/cost/megatron_flags.txt)")
        if name_key not in FLAGS:      # no effect on time or memory: accepted, listed as ignored
            ignored.append(f"--{name_key}")
            while not eq and i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
            continue
        kind, _default = FLAGS[name_key]
        if kind == _BOOL:
            if eq:
                raise ParasimError(f"--{name_key} is a switch and takes no value, got {inline!r}")
            values[name_key] = True
        else:
            if not eq:
                if i >= len(tokens) or tokens[i].startswith("--"):
                    raise ParasimError(f"--{name_key} needs a value")
                inline, i = tokens[i], i + 1
            values[name_key] = _typed(name_key, kind, inline)
        given.append(name_key)
    return MegatronArgs(values, tuple(given), tuple(ignored))


def _attention(a: MegatronArgs) -> dict:
    """--kv-channels and multi-latent attention (Megatron-Core MLASelfAttention; ModelSpec docstring)."""
    over = {"kv_channels": a["kv-channels"]} if "kv-channels" in a.given else {}
    if a["multi-latent-attention"]:
        over.update(kv_lora_rank=a["kv-lora-rank"], q_lora_rank=a["q-lora-rank"] or 0, qk_head_dim=a["qk-head-dim"],
                    qk_pos_emb_head_dim=a["qk-pos-emb-head-dim"], v_head_dim=a["v-head-dim"])
    return over


def _model(a: MegatronArgs, base: ModelSpec | str | None) -> ModelSpec:
    shape = {"num-layers": "layers", "hidden-size": "hidden", "num-attention-heads": "heads",
             "seq-length": "seq", "vocab-size": "vocab"}
    over = {}
    for flag, key in shape.items():
        if flag in a.given:
            over[key] = a[flag]
    for flag, key in (("ffn-hidden-size", "ffn_hidden"), ("make-vocab-size-divisible-by", "vocab_divisible_by"),
                      ("num-experts", "num_experts"), ("moe-router-topk", "moe_router_topk"),
                      ("moe-ffn-hidden-size", "moe_ffn_hidden"),
                      ("moe-shared-expert-intermediate-size", "moe_shared_expert_hidden")):
        if flag in a.given:
            over[key] = a[flag]
    over.update(_attention(a))
    if "group-query-attention" in a.given:
        over["kv_heads"] = a["num-query-groups"]
    elif "num-query-groups" in a.given:
        raise ParasimError("--num-query-groups needs --group-query-attention (Megatron-LM ignores it otherwise)")
    for flag, key, value in (("swiglu", "gated_mlp", True), ("untie-embeddings-and-output-weights", "tied_embeddings", False),
                             ("disable-bias-linear", "biases", False)):
        if flag in a.given:
            over[key] = value
    if a["attention-dropout"] == 0 and a["hidden-dropout"] == 0:     # no dropout masks kept (cost.memory)
        over["dropout"] = False
    if "normalization" in a.given and a["normalization"] == "RMSNorm":
        over["biases"] = False
    if "position-embedding-type" in a.given:
        over["position_embedding"] = a["position-embedding-type"] == "learned_absolute"
    if base is not None:
        return get_model(base, **over)
    missing = [f"--{f}" for f in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "vocab-size")
               if f not in a.given]
    if missing:
        raise ParasimError(f"no model: give a preset or all of --num-layers --hidden-size --num-attention-heads "
                           f"--seq-length --vocab-size (missing {' '.join(missing)})")
    if over.get("gated_mlp") and "ffn_hidden" not in over:   # Megatron-LM validate_args
        over["ffn_hidden"] = int(4 * over["hidden"] * 2 / 3 / 64) * 64
    return ModelSpec("custom", **over)


def _layer_kinds(a: MegatronArgs, spec: ModelSpec) -> ModelSpec:
    """--moe-layer-freq (read whatever the model: a dense model has no MoE layers to place) and
    --mtp-num-layers on the model (`cost.layer_kinds`, `cost.mtp`)."""
    if "moe-layer-freq" in a.given:
        pattern = moe_layer_pattern(a["moe-layer-freq"], spec.layers)
        if spec.num_experts:
            spec = spec.with_overrides(moe_layer_freq=pattern)
    if a["mtp-num-layers"]:
        spec = spec.with_overrides(mtp_num_layers=a["mtp-num-layers"])
    return spec


def _refuse_unpriced_values(a: MegatronArgs) -> None:
    """Values of priced flags that parasim does not price, refused with the reason."""
    if a["optimizer"] not in ("adam", "adamw"):
        raise ParasimError(f"--optimizer {a['optimizer']} is refused: parasim prices Adam's states and step "
                           f"(12 bytes and 30 bytes of traffic per parameter)")
    if a["transformer-impl"] != "transformer_engine":
        raise ParasimError(f"--transformer-impl {a['transformer-impl']} is refused: parasim prices Transformer "
                           f"Engine's kernels")
    if a["grad-reduce-in-bf16"] and a["accumulate-allreduce-grads-in-fp32"]:
        raise ParasimError("give --grad-reduce-in-bf16 (2 bytes per gradient element) or "
                           "--accumulate-allreduce-grads-in-fp32 (4), not both")
    if a["cp-comm-type"] not in ("p2p", "a2a"):
        raise ParasimError(f"--cp-comm-type {a['cp-comm-type']} is refused: parasim prices p2p (ring attention) "
                           f"and a2a (Ulysses)")


def _sharding(a: MegatronArgs, pp: int, ep: int, notes: list) -> tuple[int, str, str]:
    """(zero_stage, fsdp, reshard_after_forward) of the data-parallel sharding flags, refused as
    Megatron-LM's validate_args refuses them: --use-torch-fsdp2 is PyTorch's fully_shard (ZeRO-3;
    without a pipeline, expert parallelism or the distributed optimizer); --use-megatron-fsdp
    shards what --data-parallel-sharding-strategy says (no_shard 0, optim 1, optim_grads 2,
    optim_grads_params 3, Megatron's default)."""
    torch_fsdp, mfsdp = a["use-torch-fsdp2"], a["use-megatron-fsdp"]
    strategy = a["data-parallel-sharding-strategy"]
    if torch_fsdp and mfsdp:
        raise ParasimError("give --use-torch-fsdp2 or --use-megatron-fsdp, not both")
    if a["torch-fsdp2-no-reshard-after-forward"] and not torch_fsdp:
        raise ParasimError("--torch-fsdp2-no-reshard-after-forward needs --use-torch-fsdp2")
    if torch_fsdp:
        for bad, why in ((pp > 1, f"pipeline parallelism (pp={pp})"), (ep > 1, f"expert parallelism (ep={ep})"),
                         (a["use-distributed-optimizer"], "MCore's distributed optimizer")):
            if bad:
                raise ParasimError(f"--use-torch-fsdp2 is not supported with {why} (Megatron-LM validate_args); "
                                   f"torchtitan composes FSDP2 with a pipeline: parasim's --fsdp fsdp2 --zero 3")
        if "data-parallel-sharding-strategy" in a.given and strategy != "optim_grads_params":
            raise ParasimError(f"--data-parallel-sharding-strategy {strategy} applies to --use-megatron-fsdp; "
                               f"--use-torch-fsdp2 shards parameters, gradients and optimizer states "
                               f"(optim_grads_params)")
        return 3, "fsdp2", "never" if a["torch-fsdp2-no-reshard-after-forward"] else "default"
    if mfsdp:
        return SHARDING_STRATEGIES[strategy], "megatron_fsdp", "default"
    if "data-parallel-sharding-strategy" in a.given:
        notes.append("--data-parallel-sharding-strategy has no effect without --use-megatron-fsdp (as in Megatron-LM)")
    return (1 if a["use-distributed-optimizer"] else 0), "none", "default"


def _dispatcher(a: MegatronArgs, spec: ModelSpec) -> str:
    """The token dispatcher as Megatron-LM runs it (its default allgather) for a MoE model; a dense
    model keeps the vocabulary's (it has no effect there), so every door states the same."""
    if spec.num_experts or "moe-token-dispatcher-type" in a.given:
        return a["moe-token-dispatcher-type"]
    return DEFAULTS["moe_token_dispatcher"]


def _moe_notes(a: MegatronArgs, spec: ModelSpec) -> list[str]:
    """What a MoE model's price assumes that its flags leave open (the grouped GEMM)."""
    if spec.num_experts and not a["moe-grouped-gemm"]:
        return ["the experts are priced as one grouped GEMM (--moe-grouped-gemm); without it Megatron runs E / ep "
                "separate expert GEMMs (SequentialMLP), whose extra launch and tail cost is not priced"]
    return []


def megatron_run(a: MegatronArgs, gpus: int | None = None, model: ModelSpec | str | None = None) -> MegatronRun:
    """`MegatronArgs` -> model, `ParallelConfig`, `Assumptions` and precision (module docstring).
    `gpus` is Megatron's world size (default tp x pp x cp: one data-parallel replica)."""
    spec = _layer_kinds(a, _model(a, model))
    tp, pp, cp, ep = (a["tensor-model-parallel-size"], a["pipeline-model-parallel-size"],
                      a["context-parallel-size"], a["expert-model-parallel-size"])
    per_replica = tp * pp * cp
    gpus = per_replica if gpus is None else gpus
    if gpus % per_replica:
        raise ParasimError(f"world size {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} = {per_replica}")
    dp, notes = gpus // per_replica, []
    sp = a["sequence-parallel"]
    if sp and tp == 1:
        sp = False
        notes.append("--sequence-parallel ignored with tensor-model-parallel-size 1 (as Megatron-LM does)")
    v = 1
    if a["num-layers-per-virtual-pipeline-stage"] is not None:
        per_stage = spec.layers // pp
        n = a["num-layers-per-virtual-pipeline-stage"]
        if spec.layers % pp or per_stage % n:
            raise ParasimError(f"--num-layers-per-virtual-pipeline-stage {n} must divide the {spec.layers} / pp={pp} "
                               f"layers of a stage")
        v = per_stage // n
    elif a["num-virtual-stages-per-pipeline-rank"] is not None:
        v = a["num-virtual-stages-per-pipeline-rank"]
    if v > 1 and pp == 1:
        raise ParasimError("virtual pipeline stages need --pipeline-model-parallel-size > 1")
    if a["recompute-method"] and a["recompute-granularity"] != "full":
        raise ParasimError("--recompute-method needs --recompute-granularity full (Megatron-LM validate_args)")
    if a["overlap-param-gather"] and not ((a["use-distributed-optimizer"] or a["use-megatron-fsdp"])
                                          and a["overlap-grad-reduce"]):
        raise ParasimError("--overlap-param-gather needs --use-distributed-optimizer (or --use-megatron-fsdp) and "
                           "--overlap-grad-reduce (Megatron-LM validate_args)")
    zero, fsdp, reshard = _sharding(a, pp, ep, notes)
    replicas = a["num-distributed-optimizer-instances"]
    if replicas > 1 and fsdp == "none":
        raise ParasimError(f"--num-distributed-optimizer-instances {replicas} is priced with FSDP only (hybrid "
                           f"sharding, simulator.cost.fsdp): give --use-torch-fsdp2 or --use-megatron-fsdp; the "
                           f"distributed optimizer's partial sharding is not priced")
    _refuse_unpriced_values(a)
    emb, loss = a["account-for-embedding-in-pipeline-split"], a["account-for-loss-in-pipeline-split"]
    if emb != loss:
        raise ParasimError("--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split are "
                           "priced together (the embedding and the LM head each count as a layer): give both")
    if a["bf16"] and a["fp16"]:
        raise ParasimError("give --bf16 or --fp16, not both")
    b = a["micro-batch-size"]
    B = a["global-batch-size"]      # None: ParallelConfig's default, b x dp (Megatron-LM's)
    kw = dict(tp=tp, pp=pp, dp=dp, micro_batch_size=b, global_batch=B,
              schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v,
              recompute=a["recompute-granularity"] or "none", sequence_parallel=sp,
              zero_stage=zero, fsdp=fsdp, reshard_after_forward=reshard, dp_replicate=replicas, cp=cp, ep=ep,
              etp=a["expert-tensor-parallel-size"],
              first_stage_layers=a["decoder-first-pipeline-num-layers"],
              last_stage_layers=a["decoder-last-pipeline-num-layers"], balance_embedding=emb,
              cp_comm_type=a["cp-comm-type"])
    cfg_fields = {f.name for f in fields(ParallelConfig)}
    unsupported = [k for k, val in kw.items() if k not in cfg_fields and val not in (None, 1)]
    if unsupported:
        raise ParasimError(f"this cost model does not price {', '.join(unsupported)} yet")
    cfg = ParallelConfig(**{k: val for k, val in kw.items() if k in cfg_fields})
    notes += _moe_notes(a, spec)
    # not given (backend "auto"): the model's own, i.e. the preset's stack or Megatron-LM's default
    # (off) for a custom model, so restating a preset's shape never switches its FlashAttention off
    backend = a["attention-backend"] if "attention-backend" in a.given else None
    flash = True if a["use-flash-attn"] or backend in ("flash", "fused") else (
        False if backend in ("unfused", "local") else None)
    fp8 = a["fp8-format"] is not None
    akw = dict(dtype="fp16" if a["fp16"] else "bf16", overlap_grad_reduce=a["overlap-grad-reduce"],
               grad_reduce_bytes=2 if a["grad-reduce-in-bf16"] else DEFAULTS["grad_reduce_bytes"],
               overlap_param_gather=a["overlap-param-gather"], overlap_tp_comm=a["tp-comm-overlap"],
               flash_attention=flash, fp8=fp8, moe_token_dispatcher=_dispatcher(a, spec),
               capacity_factor=a["moe-expert-capacity-factor"],
               pad_to_capacity=a["moe-pad-expert-input-to-capacity"],
               overlap_moe_comm=a["overlap-moe-expert-parallel-comm"], shared_expert_overlap=a["moe-shared-expert-overlap"])
    a_fields = {f.name for f in fields(Assumptions)}
    assumptions = Assumptions(**{k: val for k, val in akw.items() if k in a_fields})
    return MegatronRun(spec, cfg, assumptions, "megatron", flash, fp8, a.ignored, tuple(notes))
