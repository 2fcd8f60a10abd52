"""The configuration vocabulary: one name, meaning and default per knob, and every older spelling.

One table (`KNOBS`) names every setting that `TrainConfig` (a real run), `ParallelConfig` (a
configuration priced at scale) and `Assumptions` (the software stack) take, with its default, the
Megatron-LM flag of the same thing and torchtitan's config name where Megatron-LM has none (or both).
The field names are short (`tp`, `zero_stage`, `global_batch`); the CLI flags are Megatron-LM's long
names (`--tensor-model-parallel-size`) with parasim's short ones beside them. Everything reads this
table: the dataclasses take their defaults from `DEFAULTS`, the CLI its flags and defaults, `sweep`
its names, docs/configuration.md its rows (tests/test_vocabulary.py checks the page against it).

Older spellings (`zero`, `cp_kind`, `batch_size`, `microbatch_size`, `seq_len`/`seq_length`) are
deprecated aliases: `canonical_name` maps them, and `canonical_value` maps their old values
(`cp_kind="all-to-all"` -> `cp_comm_type="a2a"`). Nothing else keeps a list of them.

A default written `PRESET` is the model preset's own (`ModelSpec.flash_attention`: the Llama presets
train with FlashAttention, the GPT-3 / Megatron 2021 presets without it, as their papers ran); one
written `DERIVED` follows from the others (dp = devices / (tp pp cp); m = B / (b dp)).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from .errors import ParasimError

PRESET = "preset"    # the model preset's value (ModelSpec field of the same name)
DERIVED = "derived"  # computed from the other knobs
SAME = "same"        # Knob.train_default: a real run uses `default` too
# gradient bucket size when none is given, for a real run (`bucket_mb` None) and the scale program
# alike: PyTorch DDP's bucket_cap_mb = 25 (Li et al. 2020, Sec. 3.2.3)
DEFAULT_BUCKET_MB = 25.0


@dataclass(frozen=True)
class Knob:
    name: str                     # the field name (TrainConfig / ParallelConfig / Assumptions)
    meaning: str
    default: object               # a value, PRESET or DERIVED
    megatron: str = ""            # Megatron-LM's flag ("" : Megatron-LM has none)
    torchtitan: str = ""          # torchtitan's JobConfig name ("" : none)
    used_by: str = "cost"         # "train", "cost", "stack" (Assumptions) or a comma-separated mix
    aliases: tuple[str, ...] = ()  # deprecated spellings, accepted and mapped here only
    changes_answer: bool = False  # a software-stack assumption every result states (`assumptions`)
    choices: tuple = ()           # the values it takes, when a closed list
    train_default: object = SAME  # a real run's own default, where it differs (small emulated runs)
    searched: object = None       # what `search` tries by default (DERIVED: enumerated from the model and GPUs)


KNOBS: tuple[Knob, ...] = (
    # degrees
    Knob("devices", "emulated devices of a real run (the cost model: tp x pp x dp x cp GPUs)", 1, "(world size)",
         "(world size)", "train"),
    Knob("strategy", "the strategy compiler of a real run (simulator.parallel.strategies)", "single", "", "",
         "train"),
    Knob("tp", "tensor-parallel size t", 1, "--tensor-model-parallel-size", "parallelism.tensor_parallel_degree",
         "train,cost", searched=DERIVED),
    Knob("pp", "pipeline stages p (a real run: 0 = derived from the strategy)", 1, "--pipeline-model-parallel-size",
         "parallelism.pipeline_parallel_degree", "train,cost", train_default=0, searched=DERIVED),
    Knob("dp", "data-parallel size d (devices / (t p c); a real run: 0 = derived)", 1, "(world size / (t p c))",
         "parallelism.data_parallel_replicate_degree x data_parallel_shard_degree", "train,cost", train_default=0,
         searched=DERIVED),
    Knob("cp", "context-parallel size c: each sequence split c ways", 1, "--context-parallel-size",
         "parallelism.context_parallel_degree", "train,cost", searched=DERIVED),
    Knob("ep", "expert-parallel size e (e x etp divides t c d; MoE models)", 1, "--expert-model-parallel-size",
         "parallelism.expert_parallel_degree", "train,cost", searched=DERIVED),
    Knob("etp", "expert-tensor-parallel size of the expert layers (None: tp; MoE parallel folding)", None,
         "--expert-tensor-parallel-size", "parallelism.expert_tensor_parallel_degree", "cost", searched=DERIVED),
    Knob("cp_comm_type", "context-parallel attention: p2p (ring attention, K/V blocks round the ring) or a2a "
         "(DeepSpeed Ulysses all-to-all)", "p2p", "--cp-comm-type", "(ring only; context_parallel_rotate_method)",
         "train,cost", aliases=("cp_kind",), choices=("p2p", "a2a")),
    # batch and pipeline
    Knob("global_batch", "B sequences (samples) per step (the cost model: b x d unless given, m = 1 as "
         "Megatron-LM)", DERIVED, "--global-batch-size", "training.global_batch_size", "train,cost",
         aliases=("batch_size", "global_batch_size"), train_default=8),
    Knob("micro_batch_size", "b sequences per micro-batch (B / (d m))", 1, "--micro-batch-size",
         "parallelism.pipeline_parallel_microbatch_size", "train,cost", aliases=("microbatch_size",),
         searched=DERIVED),
    Knob("microbatches", "m micro-batches per pipeline per step (B / (b d); a real run gives m)", DERIVED,
         "(global batch / (micro-batch x dp))", "(local_batch_size / pipeline_parallel_microbatch_size)",
         "train,cost", aliases=("num_microbatches",), train_default=1),
    Knob("accumulate", "gradient-accumulation micro-steps before one gradient reduction", 1,
         "(part of global batch / (micro-batch x dp))", "(global_batch_size / local_batch_size)", "train"),
    Knob("schedule", "pipeline schedule (simulator.parallel.schedule_registry)", "1f1b",
         "(1F1B; interleaved with virtual stages)", "parallelism.pipeline_parallel_schedule", "train,cost",
         searched="SEARCHED_SCHEDULES"),
    Knob("virtual_stages", "v model chunks per device (interleaved schedule)", 1,
         "--num-virtual-stages-per-pipeline-rank", "", "train,cost", searched=(2, 3, 4)),
    Knob("first_stage_layers", "layers of the first pipeline stage (the rest split evenly)", None,
         "--decoder-first-pipeline-num-layers", "", "cost", searched=DERIVED),
    Knob("last_stage_layers", "layers of the last pipeline stage", None, "--decoder-last-pipeline-num-layers", "",
         "cost", searched=DERIVED),
    Knob("balance_embedding", "embedding and LM head count as a layer each in the stage split", False,
         "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", "", "cost",
         searched=(False, True)),
    # memory
    Knob("zero_stage", "ZeRO stage 0-3 over the data(-and-context)-parallel group", 0,
         "--use-distributed-optimizer (stage 1); --data-parallel-sharding-strategy no_shard / optim / optim_grads "
         "/ optim_grads_params (stage 0-3)", "(FSDP: data_parallel_shard_degree > 1, stage 3)", "train,cost",
         aliases=("zero",), searched=(0, 1, 2, 3)),
    Knob("fsdp", "how ZeRO-3 shards: none (DeepSpeed: one gather per sub-module, refused with a pipeline), fsdp2 "
         "(PyTorch fully_shard: one gather and one reduce-scatter per layer, simulator.cost.fsdp) or megatron_fsdp",
         "none", "--use-torch-fsdp2 / --use-megatron-fsdp", "(fully_shard: data_parallel_shard_degree > 1)", "cost",
         changes_answer=True, choices=("none", "fsdp2", "megatron_fsdp"), searched=("none", "fsdp2")),
    Knob("dp_replicate", "FSDP: hybrid sharding (HSDP) -- the data-parallel ranks split into this many replicas, "
         "each sharding the model over dp x cp / dp_replicate ranks; gradients reduce-scattered in the shard "
         "group, then all-reduced across the replicas (simulator.cost.fsdp)", 1,
         "--num-distributed-optimizer-instances (with --use-torch-fsdp2 / --use-megatron-fsdp)",
         "parallelism.data_parallel_replicate_degree", "cost", changes_answer=True),
    Knob("reshard_after_forward", "FSDP: free a layer's gathered parameters after its forward and gather them again "
         "for its backward; default: on without a pipeline, off with one (torchtitan)", "default",
         "--torch-fsdp2-no-reshard-after-forward (never)", "parallelism.fsdp_reshard_after_forward", "cost",
         changes_answer=True, choices=("default", "always", "never")),
    Knob("recompute", "activation recomputation: none, selective (the stack's policy: Megatron's attention core, "
         "torchtitan's op-level every-second-matmul) or full", "none",
         "--recompute-granularity", "activation_checkpoint.mode", "cost", changes_answer=True,
         searched=("none", "selective", "full")),
    Knob("sequence_parallel", "shard the non-tensor-parallel activations over the tp group", False,
         "--sequence-parallel", "(always on with tensor_parallel_degree > 1)", "cost", changes_answer=True,
         searched=(True, False)),
    # the real run's own
    Knob("bucket_mb", "gradient buckets of about this many MB reduced during the backward (None: buckets of "
         "DEFAULT_BUCKET_MB = 25 reduced after it)", None,
         "--ddp-bucket-size (in elements)", "", "train"),
    Knob("grad_dtype", "dtype of gradients on the wire (a real run)", "float64", "--grad-reduce-in-bf16", "",
         "train"),
    Knob("steps", "training steps of a real run", 1, "--train-iters", "training.steps", "train"),
    Knob("optimizer", "the optimizer of a real run (Adam as Megatron-LM's default, or plain SGD)", "adam",
         "--optimizer", "optimizer.name", "train", choices=("adam", "sgd")),
    Knob("lr", "learning rate of a real run (constant)", 1e-2, "--lr", "optimizer.lr", "train"),
    Knob("seed", "seed of a real run's weights and data", 0, "--seed", "training.seed", "train"),
    # the software stack (Assumptions)
    Knob("flash_attention", "the attention core as one fused kernel (Dao et al. 2022): no s^2 scores kept or "
         "moved, the backward recomputes them", PRESET, "--use-flash-attn", "(scaled_dot_product_attention)",
         "stack", changes_answer=True),
    Knob("dtype", "matmul and activation dtype", "bf16", "--bf16 / --fp16", "training.mixed_precision_param",
         "stack", changes_answer=True),
    Knob("fp8", "linear-layer matmuls in FP8 at the hardware's fp8 peak (Transformer Engine)", False,
         "--fp8-format", "model.converters = float8", "stack", changes_answer=True),
    Knob("grad_reduce_bytes", "bytes per gradient element reduced over data parallelism", 4,
         "--accumulate-allreduce-grads-in-fp32", "training.mixed_precision_reduce", "stack", changes_answer=True),
    Knob("recipe", "model-state bytes per parameter (megatron 2+4+12, mixed 2+2+12, fp32 4+4+8)", "megatron",
         "(--bf16 with the distributed optimizer's fp32 main parameters)", "", "stack", changes_answer=True),
    Knob("overlap_grad_reduce", "gradient buckets reduced under the backward", False, "--overlap-grad-reduce", "",
         "stack", changes_answer=True),
    Knob("overlap_param_gather", "parameter all-gathers under the forward (ZeRO-3: prefetch)", False,
         "--overlap-param-gather", "", "stack", changes_answer=True),
    Knob("overlap_tp_comm", "tensor-parallel collectives pipelined with their GEMMs", False, "--tp-comm-overlap",
         "parallelism.enable_async_tensor_parallel", "stack", changes_answer=True),
    Knob("nvls", "all-reduce inside a node with NVLink SHARP where the hardware has it", True,
         "(NCCL_NVLS_ENABLE)", "", "stack", changes_answer=True),
    Knob("collective_algo", "collective algorithm priced (simulator.cost.comm)", "ring", "(NCCL_ALGO)", "", "stack",
         changes_answer=True),
    Knob("link_efficiency", "fraction of link bandwidth a collective reaches (None: the hardware preset's)", None,
         "", "", "stack", changes_answer=True),
    Knob("capacity_factor", "MoE expert capacity: tokens per expert x this factor (None: dropless)", None,
         "--moe-expert-capacity-factor", "", "stack", changes_answer=True),
    Knob("pad_to_capacity", "MoE: pad every expert's input to its capacity (needs capacity_factor); else "
         "balanced routing fills each expert to its share", False, "--moe-pad-expert-input-to-capacity", "",
         "stack", changes_answer=True),
    Knob("moe_token_dispatcher", "MoE token dispatch: alltoall (all-to-all over ep), allgather (all-gather over "
         "etp x ep) or flex (DeepEP / HybridEP: once per node by RDMA, then NVLink). Megatron-LM's own default is "
         "allgather: its flags "
         "keep it", "alltoall", "--moe-token-dispatcher-type", "", "stack", changes_answer=True,
         choices=("alltoall", "allgather", "flex")),
    Knob("overlap_moe_comm", "MoE dispatch/combine hidden under another micro-batch's compute (Megatron's 1F1B "
         "all-to-all overlap; DeepSeek-V3's DualPipe chunk pairs)", False, "--overlap-moe-expert-parallel-comm", "",
         "stack", changes_answer=True),
    Knob("shared_expert_overlap", "MoE shared experts computed while the tokens are dispatched and combined", False,
         "--moe-shared-expert-overlap", "", "stack", changes_answer=True),
    Knob("stage3_max_reuse_distance", "DeepSpeed ZeRO-3: elements fetched before a released parameter is reused",
         1e9, "(DeepSpeed stage3_max_reuse_distance)", "", "stack", changes_answer=True),
    Knob("grad_accum_bytes", "HBM bytes per parameter to accumulate a micro-batch's gradient outside the GEMM "
         "(0: Megatron's gradient-accumulation fusion)", 0.0, "--gradient-accumulation-fusion (0)", "", "stack",
         changes_answer=True),
    Knob("dp_grad_all_reduce", "ZeRO-1 gradients all-reduced in full (DeepSpeed BF16_Optimizer) instead of "
         "reduce-scattered", False, "", "", "stack", changes_answer=True),
    Knob("causal_attention_flops", "model FLOPs (model TFLOP/s, MFU) count the attention core's causal half, "
         "6 L h s per token, instead of the full 12 L h s of PaLM's 6N + 12 L H Q T (simulator.cost.flops)", False,
         "(num_floating_point_operations: full to core_r0.8, causal since 2025-03)", "", "stack",
         changes_answer=True),
    Knob("stack", "the software stack: kernel efficiencies, per-kernel and per-step overheads and the overlaps it "
         "performs, a preset of simulator/cost/stack_presets/ or a stack file (simulator.cost.stack)",
         "megatron-core", "", "", "stack", changes_answer=True),
    # the model (ModelSpec for the cost model, GPTConfig for a real run)
    Knob("seq", "s tokens per sequence", PRESET, "--seq-length", "training.seq_len", "model",
         aliases=("seq_len", "seq_length")),
)

BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
ALIASES: dict[str, str] = {a: k.name for k in KNOBS for a in k.aliases}
DEFAULTS: dict[str, object] = {k.name: k.default for k in KNOBS}
TRAIN_DEFAULTS: dict[str, object] = {k.name: k.default if k.train_default == SAME else k.train_default
                                     for k in KNOBS if "train" in k.used_by}
STACK: tuple[str, ...] = tuple(k.name for k in KNOBS if "stack" in k.used_by)
# what `parasim search` (simulator.cost.search) tries per knob unless told: the values, DERIVED
# (enumerated from the model and the GPUs, rules in simulator/cost/search_space.py) or "SEARCHED_SCHEDULES"
# (the schedule registry's SEARCHED_SCHEDULES)
SEARCHED: dict[str, object] = {k.name: k.searched for k in KNOBS if k.searched is not None}
# old values of a knob under an old spelling: cp_kind's ring / all-to-all are Megatron's p2p / a2a
VALUE_ALIASES: dict[str, dict[object, object]] = {"cp_comm_type": {"ring": "p2p", "all-to-all": "a2a"}}


def canonical_name(name: str, warn: bool = True) -> str:
    """The knob's name for `name` (itself, or the name an older spelling stands for)."""
    if name in ALIASES:
        if warn:
            warnings.warn(f"{name!r} is a deprecated spelling of {ALIASES[name]!r} (simulator.vocabulary)",
                          DeprecationWarning, stacklevel=3)
        return ALIASES[name]
    return name


def canonical_value(name: str, value):
    """`value` of knob `name` in the vocabulary's terms (old values of an old spelling mapped)."""
    table = VALUE_ALIASES.get(name, {})
    return table.get(value, value) if isinstance(value, str) else value


def canonical(values: dict, known, warn: bool = True) -> dict:
    """`values` with every older spelling renamed (and its old values mapped) to a name of `known`;
    a name given twice (new and old spelling) is refused by the caller's check of duplicates."""
    out: dict = {}
    for key, value in values.items():
        name = canonical_name(key, warn) if key not in known else key
        if name in out:
            raise ParasimError(f"{key!r} and {name!r} name the same setting: give one")
        out[name] = canonical_value(name, value)
    return out


def default(name: str):
    """The table's default of knob `name` (PRESET / DERIVED are resolved by the configuration)."""
    return BY_NAME[canonical_name(name, warn=False)].default


def _spellings(field_name: str) -> tuple[str, str]:
    """(knob, field) : the knob a dataclass field stands for (the field may be an older spelling)."""
    return ALIASES.get(field_name, field_name), field_name


def with_aliases(warn: bool = True):
    """Class decorator for a dataclass: its constructor (and `dataclasses.replace`) takes every
    spelling of a knob it has a field for, mapped by this table (old values too), and reading an
    other spelling returns the field (with a DeprecationWarning when `warn` and the spelling is an
    alias). One mapping, so an older name can never mean something else in one class."""
    def wrap(cls):
        from dataclasses import fields
        own = {f.name for f in fields(cls)}
        readable = own | {k for k in BY_NAME if isinstance(getattr(cls, k, None), property)}
        by_spelling, readings = {}, {}
        for name in sorted(readable):
            knob = ALIASES.get(name, name)
            for spelling in (knob, *BY_NAME[knob].aliases) if knob in BY_NAME else ():
                if spelling not in readable:
                    readings[spelling] = name
                    if name in own:
                        by_spelling[spelling] = name
        init = cls.__init__

        def __init__(self, *args, **kwargs):
            mapped = {}
            for key, value in kwargs.items():
                name = by_spelling.get(key, key)
                if name != key:
                    if warn and key in ALIASES:
                        warnings.warn(f"{cls.__name__}({key}=...) is a deprecated spelling of {name}= "
                                      "(simulator.vocabulary)", DeprecationWarning, stacklevel=2)
                    if name in kwargs or name in mapped:
                        raise ParasimError(f"{key!r} and {name!r} name the same setting: give one")
                    value = canonical_value(ALIASES.get(name, name), value)
                mapped[name] = value
            init(self, *args, **mapped)

        def __getattr__(self, key):
            name = readings.get(key)
            if name is None:
                raise AttributeError(f"{cls.__name__!r} object has no attribute {key!r}")
            if warn and key in ALIASES:
                warnings.warn(f"{cls.__name__}.{key} is a deprecated spelling of .{name} (simulator.vocabulary)",
                              DeprecationWarning, stacklevel=2)
            value = getattr(self, name)
            old = {new: was for was, new in VALUE_ALIASES.get(ALIASES.get(name, name), {}).items()}
            return old.get(value, value) if key in ALIASES else value

        __init__.__doc__, __init__.__wrapped__ = init.__doc__, init
        cls.__init__, cls.__getattr__ = __init__, __getattr__
        cls.spellings = dict(by_spelling)     # older or other spelling -> field
        return cls
    return wrap



def _cell(value) -> str:
    return "—" if value in ("", None) else str(value).replace("|", "\\|")


def _default_text(k: Knob) -> str:
    """`'p2p'`, `1`, `preset`, `derived (a real run: 8)`: a knob's default as the page prints it."""
    shown = k.default if k.default in (PRESET, DERIVED) or not isinstance(k.default, str) else repr(k.default)
    return f"{shown}" if k.train_default == SAME else f"{shown} (a real run: {k.train_default!r})"


def markdown_table() -> str:
    """The vocabulary as the table of docs/configuration.md (tests/test_vocabulary.py keeps the page
    equal to this): name, meaning, default, what `search` tries, Megatron-LM flag, torchtitan name,
    older spellings."""
    rows = ["| name | meaning | default | searched | Megatron-LM flag | torchtitan | used by | older spellings |",
            "|---|---|---|---|---|---|---|---|"]
    for k in KNOBS:
        olds = ", ".join(f"`{a}`" for a in k.aliases) or "—"
        searched = ", ".join(map(str, k.searched)) if isinstance(k.searched, tuple) else k.searched
        rows.append(f"| `{k.name}` | {_cell(k.meaning)} | {_default_text(k)} | {_cell(searched)} | "
                    f"{_cell(k.megatron)} | {_cell(k.torchtitan)} | {k.used_by} | {olds} |")
    return "\n".join(rows)
