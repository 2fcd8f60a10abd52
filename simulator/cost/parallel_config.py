"""The parallel configuration of one GPT training step (Megatron-LM's knobs) and the cost assumptions.

Rank layout (Megatron-LM `parallel_state`): tensor-parallel ranks are consecutive (fastest),
then data-parallel, then pipeline: rank = k (t d) + j t + i for tp index i, dp index j, stage k.
So a TP group of t <= devices_per_node ranks lives inside one node, and a DP group has stride t.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.memory import RECOMPUTE, SCHEDULES
from simulator.errors import ParasimError


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
    schedule: str = "1f1b"           # gpipe | 1f1b | interleaved | zb-h1 | zb-h2
    virtual_stages: int = 1          # v model chunks per device (interleaved only)
    recompute: str = "none"          # none | selective | full
    sequence_parallel: bool = False
    zero_stage: int = 0              # 0-3 over the data-parallel group

    def __post_init__(self):
        for f in ("tp", "pp", "dp", "micro_batch_size", "global_batch", "virtual_stages"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ParasimError(f"{f} must be a positive integer, got {v!r}")
        if self.gpus > MAX_GPUS:
            raise ParasimError(f"tp x pp x dp = {self.tp} x {self.pp} x {self.dp} = {self.gpus:,} GPUs is more than "
                               f"the {MAX_GPUS:,} a configuration may have")
        if self.global_batch > MAX_GLOBAL_BATCH:
            raise ParasimError(f"global batch {self.global_batch:,} is more than the {MAX_GLOBAL_BATCH:,} "
                               "sequences a configuration may have")
        if self.schedule not in SCHEDULES:
            raise ParasimError(f"unknown schedule {self.schedule!r}; known {', '.join(SCHEDULES)}")
        if self.recompute not in RECOMPUTE:
            raise ParasimError(f"unknown recompute {self.recompute!r}; known {', '.join(RECOMPUTE)}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ParasimError(f"zero stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise ParasimError(f"virtual_stages {self.virtual_stages} > 1 needs schedule 'interleaved', "
                               f"got {self.schedule!r}")
        if self.sequence_parallel and self.tp == 1:
            raise ParasimError("sequence parallel needs tp > 1 (it shards along the tensor-parallel group)")
        per_step = self.micro_batch_size * self.dp
        if self.global_batch % per_step:
            raise ParasimError(f"global batch B={self.global_batch} is not divisible by micro-batch "
                               f"size b={self.micro_batch_size} x dp={self.dp} = {per_step}")
        if self.schedule == "interleaved" and self.microbatches % self.pp:
            raise ParasimError(f"interleaved schedule needs micro-batches m={self.microbatches} to be a "
                               f"multiple of pp={self.pp} (Narayanan et al. 2021 Sec. 2.2)")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """m = B / (b d) micro-batches per pipeline per step."""
        return self.global_batch // (self.micro_batch_size * self.dp)

    def rank(self, tp_index: int, dp_index: int, stage: int) -> int:
        return stage * self.tp * self.dp + dp_index * self.tp + tp_index

    def tp_group(self, dp_index: int = 0, stage: int = 0) -> list[int]:
        return [self.rank(i, dp_index, stage) for i in range(self.tp)]

    def dp_group(self, tp_index: int = 0, stage: int = 0) -> list[int]:
        return [self.rank(tp_index, j, stage) for j in range(self.dp)]

    def __repr__(self) -> str:
        v = f", v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        sp = "+SP" if self.sequence_parallel else ""
        return (f"Parallel(t={self.tp}{sp}, p={self.pp}, d={self.dp}, b={self.micro_batch_size}, "
                f"B={self.global_batch}, m={self.microbatches}, {self.schedule}{v}, "
                f"recompute={self.recompute}, zero={self.zero_stage})")


@dataclass(frozen=True)
class Assumptions:
    """What the closed-form model assumes about the software stack (defaults: Megatron-LM 2021).

    - dtype: matmul/activation dtype (bf16 on A100).
    - grad_reduce_bytes = 4: Megatron accumulates gradients in an fp32 `main_grad` buffer and
      all-reduces it in fp32 for bf16 training.
    - link_efficiency = 0.8: NCCL reaches ~80 % of the datasheet link bandwidth in nccl-tests bus
      bandwidth (e.g. ~230-240 of 300 GB/s NVLink per direction on DGX A100, ~22 of 25 GB/s HDR IB).
    - overlap_grad_reduce = False: Megatron-LM 2021 reduced gradients after the backward pass; if
      True, buckets overlap only the last micro-batch's backward (gradients accumulate before).
    - overlap_tp_comm = False: tensor-parallel all-reduces sit on the critical path (no
      communication/compute overlap in Megatron-LM 2021).
    - collective_algo: the algorithm priced by `simulator.cost.comm` (ring, as NCCL for large S).
    """

    dtype: str = "bf16"
    grad_reduce_bytes: int = 4
    link_efficiency: float = 0.8
    overlap_grad_reduce: bool = False
    overlap_tp_comm: bool = False
    collective_algo: str = "ring"
