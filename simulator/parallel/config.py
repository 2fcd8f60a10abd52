"""TrainConfig: one typed, validated description of a training run and its parallel strategy.

Its names and defaults are the vocabulary's (`simulator.vocabulary`, docs/configuration.md), shared
with `ParallelConfig`: `zero_stage`, `cp_comm_type` (p2p | a2a), `global_batch`, `microbatches`,
`micro_batch_size`. The older spellings `zero`, `cp_kind` (ring | all-to-all) and `batch_size` are
deprecated aliases mapped there. `resolved()` fills the derived degrees once: a resolved
configuration resolves to itself.

Refusals happen here, up front, with one line naming the rule and the numbers: degrees that do not
multiply to the device count, more pipeline stages than layers, a batch that micro-batches cannot
divide, a schedule's own rules (schedule_registry: e.g. interleaving's equal rounds of micro-batches).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from functools import cached_property
from numbers import Real

from ..errors import ParasimError
from ..limits import MAX_ACTIVATIONS, MAX_BATCH, MAX_LAYERS, MAX_PARAMS, MAX_RUN_DEVICES, MAX_STEPS
from ..limits import check as check_bound
from ..mesh import DeviceMesh
from ..model_states import check_zero_stage
from ..models import GPTConfig, MLPConfig, build_model
from ..vocabulary import BY_NAME, TRAIN_DEFAULTS, with_aliases
from .cp_split import check_context_parallel
from .degrees import Parallelism, check_positive, is_int
from .schedule_registry import SCHEDULES as SCHEDULES  # re-exported: the CLI and app list them
from .schedule_registry import schedule_spec

STRATEGIES = ("single", "dp", "layer", "pp", "tp", "sp", "cp", "ep", "zero1", "zero2", "zero3", "hybrid")
CP_COMM_TYPES = BY_NAME["cp_comm_type"].choices
CP_KINDS = CP_COMM_TYPES  # the older name
GRAD_DTYPES = ("float64", "float32", "float16")
OPTIMIZERS = BY_NAME["optimizer"].choices
# Resolution is a pure function of the (frozen) fields: a configuration equal to one already resolved
# resolves to that one (entries go when the resolved value is no longer referenced)
_RESOLVED: "weakref.WeakValueDictionary[TrainConfig, TrainConfig]" = weakref.WeakValueDictionary()
# Real runs really compute every step on every sample: the work the inputs can ask for is bounded
# (the bounds live in simulator/limits.py)


@with_aliases()
@dataclass(frozen=True)
class TrainConfig:
    model: MLPConfig | GPTConfig
    strategy: str = TRAIN_DEFAULTS["strategy"]  # one of STRATEGIES
    devices: int = TRAIN_DEFAULTS["devices"]    # emulated devices
    dp: int = TRAIN_DEFAULTS["dp"]    # data-parallel degree (0: derived from the strategy and device count)
    pp: int = TRAIN_DEFAULTS["pp"]    # pipeline stages (0: derived)
    tp: int = TRAIN_DEFAULTS["tp"]    # tensor-parallel degree
    cp: int = TRAIN_DEFAULTS["cp"]    # context-parallel degree (Megatron's --context-parallel-size)
    # Megatron's --cp-comm-type: "p2p" (ring attention: K/V blocks round the ring) or "a2a" (DeepSpeed Ulysses)
    cp_comm_type: str = TRAIN_DEFAULTS["cp_comm_type"]
    ep: int = TRAIN_DEFAULTS["ep"]    # expert-parallel degree
    zero_stage: int = TRAIN_DEFAULTS["zero_stage"]        # ZeRO stage over the data-parallel group
    global_batch: int = TRAIN_DEFAULTS["global_batch"]    # B samples per step (sequences for the GPT)
    microbatches: int = TRAIN_DEFAULTS["microbatches"]    # m pipeline micro-batches per step
    schedule: str = TRAIN_DEFAULTS["schedule"]            # pipeline schedule
    schedule_text: str | None = None  # a hand-written schedule, one line per stage ("F0 F1 BW0 BW1")
    virtual_stages: int = TRAIN_DEFAULTS["virtual_stages"]  # model chunks per device (interleaved schedule)
    # gradient buckets of about this many MB, each AllReduced as soon as the backward fills it (overlap);
    # None (default): buckets of vocabulary.DEFAULT_BUCKET_MB, reduced after the whole backward pass
    bucket_mb: float | None = TRAIN_DEFAULTS["bucket_mb"]
    accumulate: int = TRAIN_DEFAULTS["accumulate"]        # gradient-accumulation micro-steps before one AllReduce
    grad_dtype: str = TRAIN_DEFAULTS["grad_dtype"]        # dtype of gradients on the wire
    gradients_mean: bool = True  # average (True) or sum (False) gradients over data-parallel replicas
    optimizer: str = TRAIN_DEFAULTS["optimizer"]
    lr: float = TRAIN_DEFAULTS["lr"]
    steps: int = TRAIN_DEFAULTS["steps"]
    seed: int = TRAIN_DEFAULTS["seed"]

    def __post_init__(self):
        _check(self.strategy in STRATEGIES, f"unknown strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        schedule_spec(self.schedule)
        _check(self.grad_dtype in GRAD_DTYPES, f"unknown grad dtype {self.grad_dtype!r}; known: {', '.join(GRAD_DTYPES)}")
        _check(self.optimizer in OPTIMIZERS, f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        _check(self.cp_comm_type in CP_COMM_TYPES, f"unknown cp_comm_type {self.cp_comm_type!r}; known: "
                                                   f"{', '.join(CP_COMM_TYPES)} (older spellings: ring, all-to-all)")
        check_positive(**{name: getattr(self, name) for name in (
            "devices", "tp", "cp", "ep", "global_batch", "microbatches", "virtual_stages", "accumulate", "steps")})
        for name in ("dp", "pp"):
            v = getattr(self, name)
            _check(is_int(v) and v >= 0, f"{name} must be a positive integer (or 0: derived), got {v!r}")
        check_zero_stage(self.zero_stage)
        _check(is_int(self.seed) and 0 <= self.seed < 2**32, f"seed must be an integer in [0, 2^32), got {self.seed!r}")
        _check(_is_real(self.lr) and math.isfinite(self.lr) and self.lr > 0,
               f"learning rate must be a finite number > 0, got {self.lr!r}")
        _check(self.bucket_mb is None or (_is_real(self.bucket_mb) and math.isfinite(self.bucket_mb) and self.bucket_mb > 0),
               f"bucket size must be a finite number > 0 MB, got {self.bucket_mb!r}")
        _check(self.ep == 1 or self.strategy in ("ep", "hybrid"),
               f"--ep {self.ep} shards experts with strategies ep and hybrid, not {self.strategy}: use --strategy "
               "hybrid or drop --ep")
        _check(self.steps <= MAX_STEPS and self.global_batch <= MAX_BATCH,
               f"a real run is bounded to {MAX_STEPS} steps of a batch of at most {MAX_BATCH}; "
               f"got steps={self.steps}, batch={self.global_batch}")
        check_bound("a real run's --devices", self.devices, MAX_RUN_DEVICES,
                    rule="each device is emulated with numpy; price larger runs with `parasim simulate`")
        _check_model_work(self.model, self.global_batch)

    @property
    def n_layers(self) -> int:
        return len(build_model(self.model).layers)

    @property
    def m(self) -> int:
        """Micro-batches per replica per step (pipeline micro-batches x accumulation micro-steps)."""
        return self.microbatches * self.accumulate

    def resolved(self) -> "TrainConfig":
        """Fill derived degrees (dp, pp) from the strategy and check every cross-field rule, once: a
        resolved configuration is returned as it is (`train()` and the compilers all call this)."""
        if self.__dict__.get("_resolved"):
            return self
        known = _cached(self)      # an equal configuration (e.g. a compiler's replace(cfg, strategy=...))
        if known is not None:
            return known
        s, n = self.strategy, self.devices
        dp, pp, tp, cp = self.dp, self.pp, self.tp, self.cp
        if s in ("tp", "sp") and tp == 1 and not (dp or pp):
            tp = n  # every device on the tensor axis unless degrees are given
        if s == "cp" and cp == 1 and tp == 1 and not (dp or pp):
            cp = n  # every device on the context axis unless degrees are given
        _check(cp == 1 or s in ("cp", "hybrid"), f"context parallelism (cp={cp}) runs with strategies cp and hybrid, "
                                                 f"not {s}")
        if s == "single":
            _check(n == 1, f"strategy single runs on 1 device, got --devices {n}")
            dp, pp = dp or 1, pp or 1
        elif s in ("dp", "zero1", "zero2", "zero3"):
            dp, pp = dp or n, pp or 1
        elif s in ("layer", "pp"):
            pp, dp = pp or n // max(dp, 1), dp or 1
        else:
            dp = dp or max(1, n // max(1, (pp or 1) * tp * cp))
            pp = pp or max(1, n // (dp * tp * cp))
        cps = f" x cp={cp}" if cp > 1 else ""
        _check(dp * pp * tp * cp == n,
               f"degrees dp={dp}{cps} x pp={pp} x tp={tp} = {dp * pp * tp * cp} do not multiply to {n} devices")
        if cp > 1:
            check_context_parallel(self.model, cp, self.cp_comm_type, tp)
        if self.ep > 1:
            check_expert_parallel(self, dp, cp, pp)
        if s == "layer":
            _check(self.m == 1, f"layer-wise model parallelism uses no micro-batches, got {self.m}")
        kinds = [type(layer).__name__ for layer in build_model(self.model).layers]
        layers = len(kinds)
        _check(pp * self.virtual_stages <= layers,
               f"{pp} stages x {self.virtual_stages} virtual stages = {pp * self.virtual_stages} exceeds the model's "
               f"{layers} layers ({_describe_layers(kinds)}); each stage holds at least one")
        stage = int(s[-1]) if s.startswith("zero") else self.zero_stage
        # the shared value checks the schedule's rules (schedule_registry.ScheduleSpec.check) and that
        # ep divides dp x cp (Megatron-Core's expert rank generator)
        par = Parallelism(dp=dp, tp=tp, pp=pp, cp=cp, ep=self.ep, microbatches=self.microbatches,
                          virtual_stages=self.virtual_stages, schedule=self.schedule, zero_stage=stage,
                          sequence_parallel=s == "sp" and tp > 1)
        per = dp * self.m
        parts = f"micro-batches={self.microbatches} x accumulate={self.accumulate}" if self.accumulate > 1 \
            else f"micro-batches={self.m}"
        _check(self.global_batch % per == 0,
               f"batch {self.global_batch} cannot be split into dp={dp} x {parts} = {per} equal parts")
        _check(stage == self.zero_stage or self.zero_stage == 0,
               f"strategy {s} means ZeRO stage {stage}, but --zero {self.zero_stage} was given")
        # only the ZeRO compiler shards model states; elsewhere a stage would be silently ignored
        _check(stage == 0 or s in ("dp", "zero1", "zero2", "zero3") or (stage == 1 and s in ("pp", "tp", "sp", "hybrid", "ep"))
               or (s in ("tp", "hybrid", "ep") and pp == 1),
               f"ZeRO stage {stage} runs with strategies dp and zero1-3, stage 1 (the distributed optimizer) also with "
               f"pp, tp, sp, hybrid and ep, stages 2-3 with tp, hybrid and ep without a pipeline (DeepSpeed refuses "
               f"ZeRO-2/3 with pipeline parallelism); strategy {s} (dp={dp}, pp={pp}, tp={tp}) cannot use stage "
               f"{stage}: drop --zero{' or use pp=1' if pp > 1 and s in ('tp', 'hybrid', 'ep') else ''}")
        _check(stage == 0 or dp * cp > 1 or s.startswith("zero"),
               f"ZeRO stage {stage} shards model states over the data x context group, but strategy {s} has "
               f"dp=1 and cp=1 (pp={pp}, tp={tp}): raise --dp or drop --zero")
        out = replace(self, dp=dp, pp=pp, tp=tp, cp=cp, zero_stage=stage)
        object.__setattr__(out, "parallelism", par)
        object.__setattr__(out, "_resolved", True)
        if _cached(self, out) is not None:
            _RESOLVED[out] = out
        return out

    @property
    def attention_mesh(self) -> DeviceMesh:
        """The ranks of the dense layers, (pp, dp, ep=1, cp, tp) with ep folded into dp: Megatron-Core's
        decoder rank generator (ep=1); the expert layers see `.parallelism.expert_mesh`
        (DeviceMesh.megatron_experts)."""
        return self.parallelism.mesh

    @cached_property
    def parallelism(self) -> Parallelism:
        """The resolved degrees, schedule and ZeRO stage as the value the cost model shares
        (`simulator.parallel.degrees`); ranks and groups: `.parallelism.mesh`."""
        return self.resolved().parallelism

    @property
    def micro_batch_size(self) -> int:
        """b = B / (d m) samples per micro-batch (Megatron's --micro-batch-size)."""
        return self.global_batch // (max(self.dp, 1) * self.m)

    @property
    def tokens_per_device(self) -> int | None:
        """Tokens of each sequence one context rank holds (None for models without sequences)."""
        seq = getattr(self.model, "seq_len", None)
        return None if seq is None else seq // self.cp


def check_expert_parallel(cfg: TrainConfig, dp: int, cp: int, pp: int) -> None:
    """ep > 1: a mixture-of-experts model whose experts and dp x cp ranks split into ep equal parts
    (Megatron-LM carves the expert-parallel group out of data x context), and what the expert
    gradients' own group (expert-data, dp cp / ep ranks) cannot combine with."""
    ep, m = cfg.ep, cfg.model
    experts = getattr(m, "experts", None)
    _check(experts is not None, f"expert parallelism (ep={ep}) spreads the experts of a mixture-of-experts model; "
                                f"{m!r} has none: use --model moe")
    _check(experts % ep == 0, f"ep={ep} must divide the experts ({experts}): each expert-parallel rank holds "
                              f"experts/ep of every MoE block")
    # ep dividing dp x cp is the shared value's rule (`Parallelism`, checked when it is made)
    _check(cfg.bucket_mb is None and cfg.grad_dtype == "float64",
           "expert parallelism moves float64 per-parameter AllReduces: drop --bucket-mb and --grad-dtype")


def _cached(cfg: TrainConfig, out: TrainConfig | None = None) -> TrainConfig | None:
    """The resolved value of a configuration equal to `cfg` (or record `out` as it); None when the
    configuration is not hashable (a model holding a list)."""
    try:
        if out is not None:
            _RESOLVED[cfg] = out
            return out
        return _RESOLVED.get(cfg)
    except TypeError:
        return None


def _describe_layers(kinds: list[str]) -> str:
    """['Embedding', 'TransformerBlock', 'TransformerBlock', 'LMHead'] -> 'Embedding, 2 x TransformerBlock, LMHead'."""
    runs: list[list] = []
    for k in kinds:
        if runs and runs[-1][0] == k:
            runs[-1][1] += 1
        else:
            runs.append([k, 1])
    return ", ".join(k if n == 1 else f"{n} x {k}" for k, n in runs)


def _is_real(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ParasimError(message)


def _check_model_work(model, batch_size: int) -> None:
    """Refuse, before building anything, a model whose real run would not fit the bounds of
    simulator/limits.py: its layers, its parameters (counted from its configuration) and its
    activations (batch x the widest activation of a layer x layers)."""
    layers = int(getattr(model, "layers", 1))
    check_bound("the model's layers", layers, MAX_LAYERS, rule="a real run executes every layer")
    if isinstance(model, GPTConfig):
        h, s = int(model.hidden), int(model.seq_len)
        experts = int(getattr(model, "experts", 1))  # a mixture of experts: the MLP's 8 h^2 per expert
        params = layers * (4 + 8 * experts) * h * h + int(model.vocab) * h * 2 + s * h  # Megatron's 12 L h^2
        act = batch_size * s * max(4 * h, int(model.heads) * s) * layers
    else:
        h = int(model.hidden)
        params = int(model.in_dim) * h + max(layers - 2, 0) * h * h + h * int(model.classes)
        act = batch_size * max(h, int(model.in_dim), int(model.classes)) * layers
    check_bound("the model's parameters", params, MAX_PARAMS, " elements", "a real run holds them in float64")
    check_bound("the activations (batch x widest layer output x layers)", act, MAX_ACTIVATIONS, " elements",
                "a real run computes them in float64")
