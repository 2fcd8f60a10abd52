"""The parallel configuration of one GPT training step (Megatron-LM's knobs) and the cost assumptions.

`ParallelConfig` keeps Megatron-LM's argument names and adds what only the cost model needs (the
micro-batch size and global batch, the stage split, the CP communication type); its degrees,
schedule, ZeRO stage, recomputation and sequence parallelism are one `Parallelism` value
(`simulator.parallel.degrees`, `.parallelism`), validated there, with ranks from `DeviceMesh`.

Rank layout (Megatron-LM `parallel_state`, order tp-cp-ep-dp-pp): tensor-parallel ranks are
consecutive (fastest), then context-parallel, then data-parallel, then pipeline:
rank = k (t c d) + j (t c) + q t + i for tp index i, cp index q, dp index j, stage k. So a TP
group of t <= devices_per_node ranks lives inside one node, a CP group has stride t and a DP
group stride t c. Expert parallelism (Megatron-Core's expert rank generator, ep dividing dp x cp)
takes ep consecutive ranks of the flattened context x data axes (cp fastest, stride t) for the
experts' all-to-all, as the runtime's `Parallelism.expert_mesh` does.

Layers per stage (Megatron `--decoder-first-pipeline-num-layers` / `--decoder-last-...`): the
first and last stages may hold a given number of layers and the rest are split evenly over the
middle stages; with the interleaved schedule every stage's layers split evenly into v chunks.
Bad combinations are refused with the rule and the numbers (`stage_layers`).

ZeRO-2/3 with a pipeline is refused as DeepSpeed refuses it ("ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism", deepspeed/runtime/pipe/engine.py): gradients would be partitioned and
reduced at every micro-batch of every stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ParasimError
from simulator.parallel.degrees import Parallelism, check_positive
from simulator.parallel.schedule_registry import schedule_spec

CP_COMM_TYPES = ("p2p", "a2a")


# Bounds on what a configuration may ask for, so the work stays bounded by the inputs: ten times
# the largest GPU clusters built so far (~10^5 GPUs), and a global batch of 10^9 sequences.
MAX_GPUS = 1_000_000
MAX_GLOBAL_BATCH = 1_000_000_000


@dataclass(frozen=True)
class ParallelConfig:
    tp: int = 1                      # tensor-parallel size t
    pp: int = 1                      # pipeline stages p
    dp: int = 1                      # data-parallel size d
    micro_batch_size: int = 1        # b sequences per micro-batch
    global_batch: int = 1            # B sequences per step
    schedule: str = "1f1b"           # one of schedule_registry.PRICED_SCHEDULES
    virtual_stages: int = 1          # v model chunks per device (interleaved only)
    recompute: str = "none"          # none | selective | full
    sequence_parallel: bool = False
    zero_stage: int = 0              # 0-3 over the data-parallel group
    cp: int = 1                      # context-parallel size c (sequence split over c ranks)
    ep: int = 1                      # expert-parallel size (divides dp; MoE models only)
    first_stage_layers: int | None = None   # Megatron --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = None    # Megatron --decoder-last-pipeline-num-layers
    cp_comm_type: str = "p2p"        # p2p (ring attention) | a2a (Ulysses), Megatron --cp-comm-type
    balance_embedding: bool = False  # embedding and LM head count as a layer each in the stage split

    def __post_init__(self):
        # the shared rules (degrees, schedule, ZeRO, recomputation, SP) live in `Parallelism`; the
        # degrees and batch sizes are checked first because the micro-batch count divides by them
        check_positive(tp=self.tp, pp=self.pp, dp=self.dp, micro_batch_size=self.micro_batch_size,
                       global_batch=self.global_batch, virtual_stages=self.virtual_stages, cp=self.cp, ep=self.ep)
        self._check_bounds()
        schedule_spec(self.schedule, priced=True)   # the closed form prices these only
        self._check_stage_split_options()
        per_step = self.micro_batch_size * self.dp
        if self.global_batch % per_step:
            raise ParasimError(f"global batch B={self.global_batch} is not divisible by micro-batch "
                               f"size b={self.micro_batch_size} x dp={self.dp} = {per_step}")
        object.__setattr__(self, "parallelism", Parallelism(
            dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, microbatches=self.microbatches,
            virtual_stages=self.virtual_stages, schedule=self.schedule, zero=self.zero_stage,
            recompute=self.recompute, sequence_parallel=self.sequence_parallel))
        if self.zero_stage >= 2 and self.pp > 1:
            raise ParasimError(f"ZeRO stage {self.zero_stage} with pp={self.pp} pipeline stages is refused, as "
                               f"DeepSpeed refuses it: ZeRO-2/3 partition gradients, which a pipeline accumulates "
                               f"over its micro-batches; use ZeRO-1 (the distributed optimizer) with a pipeline")
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

    def ep_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        """The experts' all-to-all group: ep consecutive ranks of the flattened cp x dp axes (module
        docstring); the expert-data-parallel group is every ep-th rank of `dp_cp_group`."""
        return self.dp_cp_group(tp_index, stage)[:self.ep]

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Layers held by each pipeline stage (module docstring); refuses what cannot be split."""
        chunks = self.chunk_layers(layers)
        p = self.pp
        return tuple(sum(chunks[c * p + k] for c in range(self.virtual_stages)) for k in range(p))

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
            raise ParasimError(f"{layers} layers minus first {first} and last {last} stage layers leaves {rest} "
                               f"for {middle} middle stages; it must split evenly and leave each at least one")
        mid = rest // middle if middle else 0
        return tuple([first if first is not None else mid] + [mid] * (p - 2) + [last if last is not None else mid])

    def __repr__(self) -> str:
        v = f", v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        sp = "+SP" if self.sequence_parallel else ""
        cp = f", c={self.cp}" + ("" if self.cp_comm_type == "p2p" else f" {self.cp_comm_type}") if self.cp > 1 else ""
        ep = f", e={self.ep}" if self.ep > 1 else ""
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            v += f", layers first/last {self.first_stage_layers}/{self.last_stage_layers}"
        if self.balance_embedding:
            v += ", embedding/head balanced"
        return (f"Parallel(t={self.tp}{sp}{cp}, p={self.pp}, d={self.dp}{ep}, b={self.micro_batch_size}, "
                f"B={self.global_batch}, m={self.microbatches}, {self.schedule}{v}, "
                f"recompute={self.recompute}, zero={self.zero_stage})")


@dataclass(frozen=True)
class Assumptions:
    """What the cost model assumes about the software stack (defaults: Megatron-LM 2021 on A100,
    which is also what Megatron-LM does today unless told otherwise).

    - dtype: matmul/activation dtype (bf16 on A100).
    - fp8 = False: the linear layers' matmuls at the hardware's fp8 peak (Transformer Engine FP8 GEMMs,
      Micikevicius et al. 2022), with their casts; the attention core and output layer stay BF16; element-wise traffic, activations and communication stay 16-bit; MFU is still
      reported against the 16-bit peak (as NeMo/Megatron report it).
    - grad_reduce_bytes = 4: Megatron accumulates gradients in an fp32 `main_grad` buffer and
      all-reduces it in fp32 for bf16 training.
    - link_efficiency = None: the hardware preset's measured NCCL efficiency
      (`Hardware.link_efficiency`, 0.8 on the datasheet presets), the same one `parasim
      collective --hardware` uses; a number overrides it.
    - nvls = True: an all-reduce inside one node uses NVLink SHARP where the hardware has it
      (H100/H200 NVSwitch; `simulator.cost.comm`), as NCCL does by default.
    - overlap_grad_reduce = False (Megatron --overlap-grad-reduce): gradient buckets are reduced
      while the backward of the last micro-batch (ZeRO-2/3: of every micro-batch) runs; only the
      part longer than that backward is exposed.
    - overlap_param_gather = False (Megatron --overlap-param-gather; DeepSpeed ZeRO-3 prefetch):
      parameter all-gathers run under the forward (ZeRO-1/2: the first micro-batch's forward of
      the next step; ZeRO-3: each micro-batch's forward and backward, one layer ahead).
    - overlap_tp_comm = False (Megatron --tp-comm-overlap, Transformer Engine userbuffers): each
      TP collective is split into chunks pipelined with the GEMM next to it, so only the part
      longer than the layer's linear GEMMs is exposed.
    - flash_attention = False (Megatron --use-flash-attn; Dao et al. 2022, Dao 2023): the
      attention core is one fused kernel: no s^2 softmax/dropout traffic to HBM, the backward
      recomputes the scores (5 instead of 4 attention-core matmuls in fwd + bwd), and a causal
      mask skips the blocks above the diagonal (half the core's time).
    - capacity_factor = None: MoE tokens per expert; None is dropless (each expert gets exactly
      its share T k / E under balanced routing), c > 1 pads every expert to c T k / E.
    - collective_algo: the algorithm priced by `simulator.cost.comm` (ring, as NCCL for large S).
    - recipe = "megatron": the model-state bytes per parameter (`simulator.model_states.RECIPES`:
      megatron 2 + 4 + 12, mixed 2 + 2 + 12, fp32 4 + 4 + 8); `PRECISION` names the three
      consistent (dtype, gradient-reduction bytes, recipe) triples.
    - stage3_max_reuse_distance = 1e9 (DeepSpeed's ZeRO-3 config key and default, in elements):
      with full recomputation a ZeRO-3 sub-module whose parameters would be reused only after this
      many other elements were fetched is released and gathered a third time for its backward
      (`simulator.cost.zero3_fetch`; GPT-3 175B: 2/3 of every layer).
    - grad_accum_bytes = 0: HBM bytes moved per parameter of a stage after every micro-batch's
      backward to accumulate its gradient outside the weight-gradient GEMM (memory-bound, on the
      critical path of every stage). 0 is Megatron-LM's gradient-accumulation fusion (the GEMM adds
      into the fp32 `main_grad`). DeepSpeed's pipeline engine with bf16 (DeepSpeed PR #1801,
      pipe/engine.py `_exec_backward_pass` -> bf16_optimizer.py `update_hp_grads`, BLOOM's setup):
      18 = read the bf16 gradient (2), write its fp32 copy (4), read it and the fp32 accumulator
      (4 + 4), write the accumulator (4).
    - dp_grad_all_reduce = False: with ZeRO-1 the gradients are reduce-scattered. True: they are
      all-reduced in full and each rank then updates its shard, as DeepSpeed's BF16_Optimizer does
      (its own ZeRO-1 under `zero_optimization.stage` 0: pipe/engine.py `_bf16_reduce_grads` ->
      `buffered_allreduce_fallback` of the fp32 gradients, then `all_gather_dp_groups`).
    """

    dtype: str = "bf16"
    grad_reduce_bytes: int = 4
    link_efficiency: float | None = None
    overlap_grad_reduce: bool = False
    overlap_tp_comm: bool = False
    collective_algo: str = "ring"
    overlap_param_gather: bool = False
    flash_attention: bool = False
    fp8: bool = False
    nvls: bool = True
    capacity_factor: float | None = None
    recipe: str = "megatron"
    stage3_max_reuse_distance: float = 1e9
    grad_accum_bytes: float = 0.0
    dp_grad_all_reduce: bool = False

    def __post_init__(self):
        from simulator.model_states import recipe_bytes
        recipe_bytes(self.recipe)       # refuses unknown recipes with the known ones
        if self.capacity_factor is not None and not self.capacity_factor >= 1:
            raise ParasimError(f"capacity_factor must be >= 1 (or None for dropless), got {self.capacity_factor}")
        if self.link_efficiency is not None and not 0 < self.link_efficiency <= 1:
            raise ParasimError(f"link_efficiency must be in (0, 1], got {self.link_efficiency}")
        if not self.grad_accum_bytes >= 0:
            raise ParasimError(f"grad_accum_bytes must be >= 0 bytes per parameter, got {self.grad_accum_bytes}")
        if not self.stage3_max_reuse_distance > 0:
            raise ParasimError(f"stage3_max_reuse_distance must be > 0 elements, got {self.stage3_max_reuse_distance}")

    @property
    def matmul_dtype(self) -> str:
        return "fp8" if self.fp8 else self.dtype


PRECISION = {
    "megatron": dict(dtype="bf16", grad_reduce_bytes=4, recipe="megatron"),
    "mixed": dict(dtype="bf16", grad_reduce_bytes=2, recipe="mixed"),
    "fp32": dict(dtype="fp32", grad_reduce_bytes=4, recipe="fp32"),
}
"""Precision recipes as `Assumptions` keywords: Megatron-LM's default (bf16 compute, fp32 main
gradients reduced in fp32, fp32 Adam: 18 bytes per parameter); plain mixed precision (16-bit
gradients reduced in 16 bits, fp32 master weights and Adam: 16 bytes, Micikevicius et al. 2018,
ZeRO Sec. 3.1); fp32 everywhere (matmuls at the fp32 peak, no TF32; 16 bytes). FP8 is the separate
`fp8` switch on top of a 16-bit recipe (Transformer Engine keeps 16-bit master copies)."""

MODERN = Assumptions(overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=True,
                     flash_attention=True)
"""What a Megatron-Core / NeMo run of a modern model turns on (FlashAttention, all three overlaps)."""
