"""The parallel configuration of one GPT training step (Megatron-LM's knobs) and the cost assumptions.

`ParallelConfig` keeps the vocabulary's names and defaults (`simulator.vocabulary`, shared with
`TrainConfig`; Megatron-LM's flags in docs/configuration.md) and adds what only the cost model needs
(the stage split, the CP communication type); older spellings (`zero`) are mapped there. Its degrees,
schedule, ZeRO stage, recomputation and sequence parallelism are one `Parallelism` value
(`simulator.parallel.degrees`, `.parallelism`), validated there, with ranks from `DeviceMesh`.

Rank layout (Megatron-LM `parallel_state`, order tp-cp-ep-dp-pp): tensor-parallel ranks are
consecutive (fastest), then context-parallel, then data-parallel, then pipeline:
rank = k (t c d) + j (t c) + q t + i for tp index i, cp index q, dp index j, stage k. So a TP
group of t <= devices_per_node ranks lives inside one node, a CP group has stride t and a DP
group stride t c. The expert layers see the same t c d ranks of a stage as Megatron-Core's expert
rank generator does (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960): rank within the stage
= n (etp ep) + e etp + i for expert-tensor index i < etp, expert-parallel index e < ep and
expert-data index n, etp x ep dividing t c d (`Parallelism.expert_mesh`; etp = tp by default, then
the ep group is ep consecutive ranks of the flattened context x data axes, stride t).

Layers per stage (Megatron `--decoder-first-pipeline-num-layers` / `--decoder-last-...`): the
first and last stages may hold a given number of layers and the rest are split evenly over the
middle stages; with the interleaved schedule every stage's layers split evenly into v chunks.
Bad combinations are refused with the rule and the numbers (`stage_layers`).

ZeRO-2/3 with a pipeline is refused as DeepSpeed refuses it ("ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism", deepspeed/runtime/pipe/engine.py): gradients would be partitioned and
reduced at every micro-batch of every stage. As FSDP (`fsdp` fsdp2 / megatron_fsdp,
`simulator.cost.fsdp`) it composes with a pipeline, as torchtitan trains FSDP x TP x PP.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.assumptions import MODERN, PRECISION, Assumptions  # noqa: F401  (their home; kept importable here)
from simulator.cost.fsdp import check_fsdp
from simulator.errors import ParasimError
from simulator.parallel.degrees import Parallelism, check_positive
from simulator.parallel.schedule_registry import schedule_spec
from simulator.parallel.schedules import stage_placement
from simulator.vocabulary import BY_NAME, DEFAULTS, with_aliases

CP_COMM_TYPES = BY_NAME["cp_comm_type"].choices


# Bounds on what a configuration may ask for, so the work stays bounded by the inputs: ten times
# the largest GPU clusters built so far (~10^5 GPUs), and a global batch of 10^9 sequences.
MAX_GPUS = 1_000_000
MAX_GLOBAL_BATCH = 1_000_000_000


@with_aliases()
@dataclass(frozen=True)
class ParallelConfig:
    tp: int = DEFAULTS["tp"]         # tensor-parallel size t
    pp: int = DEFAULTS["pp"]         # pipeline stages p
    dp: int = DEFAULTS["dp"]         # data-parallel size d
    micro_batch_size: int = DEFAULTS["micro_batch_size"]  # b sequences per micro-batch
    global_batch: int | None = None  # B sequences per step; None: b x dp (m = 1, Megatron-LM's default)
    schedule: str = DEFAULTS["schedule"]              # one of schedule_registry.SCHEDULES
    virtual_stages: int = DEFAULTS["virtual_stages"]  # v model chunks per device (interleaved only)
    recompute: str = DEFAULTS["recompute"]            # none | selective | full
    sequence_parallel: bool = DEFAULTS["sequence_parallel"]
    zero_stage: int = DEFAULTS["zero_stage"]          # 0-3 over the data-parallel group
    cp: int = DEFAULTS["cp"]                          # context-parallel size c (sequence split over c ranks)
    ep: int = DEFAULTS["ep"]                          # expert-parallel size (ep x etp divides t c d; MoE only)
    etp: int | None = DEFAULTS["etp"]                 # expert-tensor-parallel size (None: tp), Megatron
                                                      # --expert-tensor-parallel-size
    first_stage_layers: int | None = DEFAULTS["first_stage_layers"]  # Megatron --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = DEFAULTS["last_stage_layers"]    # Megatron --decoder-last-pipeline-num-layers
    cp_comm_type: str = DEFAULTS["cp_comm_type"]      # p2p (ring attention) | a2a (Ulysses), Megatron --cp-comm-type
    balance_embedding: bool = DEFAULTS["balance_embedding"]  # embedding and LM head count as a layer each
    fsdp: str = DEFAULTS["fsdp"]                      # none | fsdp2 | megatron_fsdp: how ZeRO-3 shards (`cost.fsdp`)
    reshard_after_forward: str = DEFAULTS["reshard_after_forward"]  # default | always | never (torchtitan)
    dp_replicate: int = DEFAULTS["dp_replicate"]      # FSDP replicas (HSDP); each shards over d c / dp_replicate

    def __post_init__(self):
        if self.global_batch is None and isinstance(self.micro_batch_size, int) and isinstance(self.dp, int):
            object.__setattr__(self, "global_batch", self.micro_batch_size * self.dp)
        # the shared rules (degrees, schedule, ZeRO, recomputation, SP) live in `Parallelism`; the
        # degrees and batch sizes are checked first because the micro-batch count divides by them
        check_positive(tp=self.tp, pp=self.pp, dp=self.dp, micro_batch_size=self.micro_batch_size,
                       global_batch=self.global_batch, virtual_stages=self.virtual_stages, cp=self.cp, ep=self.ep)
        self._check_bounds()
        schedule_spec(self.schedule)   # every schedule compiles (scale_program); `estimate` prices PRICED_SCHEDULES
        self._check_stage_split_options()
        per_step = self.micro_batch_size * self.dp
        if self.global_batch % per_step:
            raise ParasimError(f"global batch B={self.global_batch} is not divisible by micro-batch "
                               f"size b={self.micro_batch_size} x dp={self.dp} = {per_step}")
        object.__setattr__(self, "parallelism", Parallelism(
            dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, microbatches=self.microbatches,
            virtual_stages=self.virtual_stages, schedule=self.schedule, zero_stage=self.zero_stage,
            recompute=self.recompute, sequence_parallel=self.sequence_parallel, etp=self.etp))
        check_fsdp(self)
        if self.zero_stage >= 2 and self.pp > 1 and self.fsdp == "none":
            raise ParasimError(f"ZeRO stage {self.zero_stage} with pp={self.pp} pipeline stages is refused, as "
                               f"DeepSpeed refuses it: ZeRO-2/3 partition gradients, which a pipeline accumulates "
                               f"over its micro-batches; use ZeRO-1 (the distributed optimizer) with a pipeline, "
                               f"or FSDP (fsdp=fsdp2 or megatron_fsdp), which composes with one")
        if self.cp_comm_type not in CP_COMM_TYPES:
            raise ParasimError(f"unknown cp_comm_type {self.cp_comm_type!r}; known {', '.join(CP_COMM_TYPES)}")

    def _check_bounds(self) -> None:
        if self.gpus > MAX_GPUS:
            raise ParasimError(f"tp x pp x dp = {self.tp} x {self.pp} x {self.dp} = {self.gpus:,} GPUs is more than "
                               f"the {MAX_GPUS:,} a configuration may have")
        if self.global_batch > MAX_GLOBAL_BATCH:
            raise ParasimError(f"global batch {self.global_batch:,} is more than the {MAX_GLOBAL_BATCH:,} "
                               "sequences a configuration may have")

    def _check_stage_split_options(self) -> None:
        for f in ("first_stage_layers", "last_stage_layers"):
            v = getattr(self, f)
            if v is None:
                continue
            check_positive(**{f: v})
            if self.pp == 1:
                raise ParasimError(f"{f}={v} needs a pipeline (pp > 1)")
            if self.balance_embedding:
                raise ParasimError(f"give either {f} or balance_embedding, not both")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """m = B / (b d) micro-batches per pipeline per step."""
        return self.global_batch // (self.micro_batch_size * self.dp)

    @property
    def mesh(self):
        """The `DeviceMesh` of these degrees (Megatron order, module docstring)."""
        return self.parallelism.mesh

    def rank(self, tp_index: int, dp_index: int, stage: int, cp_index: int = 0) -> int:
        return self.parallelism.rank(tp_index, dp_index, stage, cp_index)

    def tp_group(self, dp_index: int = 0, stage: int = 0) -> list[int]:
        return [self.rank(i, dp_index, stage) for i in range(self.tp)]

    def dp_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        return [self.rank(tp_index, j, stage) for j in range(self.dp)]

    def cp_group(self, tp_index: int = 0, dp_index: int = 0, stage: int = 0) -> list[int]:
        return [self.rank(tp_index, dp_index, stage, q) for q in range(self.cp)]

    def dp_cp_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The ranks that average a dense parameter's gradient: data- and context-parallel."""
        return [self.rank(tp_index, j, stage, q) for j in range(self.dp) for q in range(self.cp)]

    @property
    def shard_size(self) -> int:
        """Ranks a ZeRO/FSDP shard spans: d c, or d c / dp_replicate with hybrid sharding (HSDP)."""
        return self.dp * self.cp // self.dp_replicate

    def shard_group(self, tp_index: int = 0, stage: int = 0, replica: int = 0) -> list[int]:
        """The ranks one FSDP shard spans (HSDP: replica r holds data-parallel indices r d/R .. (r+1) d/R - 1,
        the replicate mesh dimension outside the shard one, as torchtitan's ["dp_replicate", "dp_shard"])."""
        per = self.dp // self.dp_replicate
        return [self.rank(tp_index, replica * per + j, stage, q) for j in range(per) for q in range(self.cp)]

    def replicate_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The ranks holding the same shard in each replica (HSDP's gradient all-reduce)."""
        per = self.dp // self.dp_replicate
        return [self.rank(tp_index, r * per, stage) for r in range(self.dp_replicate)]

    @property
    def expert_tp(self) -> int:
        """etp, or tp when not given (Megatron-LM's default)."""
        return self.parallelism.expert_tp

    def _expert_coords(self, tp_index: int, stage: int) -> tuple[int, int, int, int]:
        """(first rank of the stage, expert-data index n, expert-parallel index e, expert-tensor index i)
        of the rank at (tp_index, dp 0, cp 0, stage) in the expert layers' grid (module docstring)."""
        base = self.rank(0, 0, stage)
        local = self.rank(tp_index, 0, stage) - base
        et, e = self.expert_tp, self.ep
        return base, local // (et * e), local // et % e, local % et

    def ep_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The experts' all-to-all group of this rank: ep ranks at stride etp (module docstring)."""
        base, n, _, i = self._expert_coords(tp_index, stage)
        et = self.expert_tp
        return [base + n * et * self.ep + x * et + i for x in range(self.ep)]

    def etp_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The expert-tensor-parallel group of this rank: etp consecutive ranks."""
        base, n, e, _ = self._expert_coords(tp_index, stage)
        et = self.expert_tp
        return [base + n * et * self.ep + e * et + x for x in range(et)]

    def tp_ep_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The etp x ep ranks the all-gather dispatcher gathers over (Megatron-Core's tp_ep group)."""
        base, n, _, _ = self._expert_coords(tp_index, stage)
        size = self.expert_tp * self.ep
        return [base + n * size + x for x in range(size)]

    def edp_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The expert-data-parallel group that averages an expert's gradient: stride etp x ep."""
        base, _, e, i = self._expert_coords(tp_index, stage)
        et, size = self.expert_tp, self.expert_tp * self.ep
        return [base + n * size + e * et + i for n in range(self.gpus // self.pp // size)]

    @property
    def stage_map(self) -> tuple[tuple[int, ...], ...]:
        """Per pipeline device, the model chunk of each of its v chunks: the schedule's placement
        (`ScheduleSpec.placement`; loop c p + k, or V-shaped for zb-v and dualpipev)."""
        return stage_placement(schedule_spec(self.schedule).placement, self.pp, self.virtual_stages)

    @property
    def last_device(self) -> int:
        """The pipeline device of the last model chunk (the LM head): p - 1, or 0 when V-shaped."""
        return next(k for k, row in enumerate(self.stage_map) if self.pp * self.virtual_stages - 1 in row)

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Layers held by each pipeline device, its chunks' (module docstring); refuses what cannot be split."""
        chunks = self.chunk_layers(layers)
        return tuple(sum(chunks[c] for c in row) for row in self.stage_map)

    def chunk_layers(self, layers: int) -> tuple[int, ...]:
        """Layers of each of the p v model chunks in model order (chunk c p + k on stage k).
        `balance_embedding`: the embedding and the LM head count as one layer each, so L + 2 slots
        split evenly and the first and last chunks hold one layer fewer (Megatron-LM
        --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)."""
        p, v = self.pp, self.virtual_stages
        if self.balance_embedding:
            if (layers + 2) % (p * v) or (layers + 2) // (p * v) < 2 and p * v > 1:
                raise ParasimError(f"{layers} layers + embedding + LM head = {layers + 2} slots cannot be split "
                                   f"evenly into pp x v = {p * v} chunks of at least 2")
            per = (layers + 2) // (p * v)
            out = [per] * (p * v)
            out[0] -= 1
            out[-1] -= 1
            return tuple(out)
        stages = self._stage_split(layers)
        if any(x % v for x in stages):
            raise ParasimError(f"stage layers {stages} must each split evenly into v={v} interleaved chunks")
        return tuple(stages[k] // v for c in range(v) for k in range(p))

    def _stage_split(self, layers: int) -> tuple[int, ...]:
        p, v = self.pp, self.virtual_stages
        first, last = self.first_stage_layers, self.last_stage_layers
        if first is None and last is None:
            if layers % (p * v):
                raise ParasimError(f"{layers} layers cannot be split evenly into pp x v = {p * v} chunks; give "
                                   f"first_stage_layers / last_stage_layers (Megatron --decoder-first-pipeline-"
                                   f"num-layers) for an uneven split")
            return (layers // p,) * p
        ends = (first or 0) + (last or 0)
        middle = p - (first is not None) - (last is not None)
        rest = layers - ends
        if rest < 0 or (middle == 0 and rest) or (middle and (rest % middle or rest == 0)):
            given = " and ".join(f"the {n} stage's {x}" for n, x in (("first", first), ("last", last)) if x is not None)
            raise ParasimError(f"{layers} layers minus {given} leave {rest} for the other {middle} stages; they must "
                               f"split evenly, at least one layer each")
        mid = rest // middle if middle else 0
        return tuple([first if first is not None else mid] + [mid] * (p - 2) + [last if last is not None else mid])

    def __repr__(self) -> str:
        v = f", v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        sp = "+SP" if self.sequence_parallel else ""
        cp = f", c={self.cp}" + ("" if self.cp_comm_type == "p2p" else f" {self.cp_comm_type}") if self.cp > 1 else ""
        ep = f", e={self.ep}" if self.ep > 1 else ""
        ep += f", etp={self.etp}" if self.etp is not None and self.etp != self.tp else ""
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            v += f", layers first/last {self.first_stage_layers}/{self.last_stage_layers}"
        if self.balance_embedding:
            v += ", embedding/head balanced"
        fsdp = "" if self.fsdp == "none" else f" {self.fsdp}" + (
            "" if self.reshard_after_forward == "default" else f" reshard {self.reshard_after_forward}") + (
            f" hsdp {self.dp_replicate}x{self.shard_size}" if self.dp_replicate > 1 else "")
        return (f"Parallel(t={self.tp}{sp}{cp}, p={self.pp}, d={self.dp}{ep}, b={self.micro_batch_size}, "
                f"B={self.global_batch}, m={self.microbatches}, {self.schedule}{v}, "
                f"recompute={self.recompute}, zero={self.zero_stage}{fsdp})")
