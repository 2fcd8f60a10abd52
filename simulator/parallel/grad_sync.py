"""Data-parallel gradient synchronisation, with the communication optimisations the field uses.

- Bucketing (PyTorch DDP, Li et al. 2020 "PyTorch Distributed", Sec. 3.2.3; Megatron-LM's
  `DistributedDataParallel` buckets): gradients are packed into buckets of about `bucket_bytes` in
  the order backward produces them (the scale program's `cost/grad_buckets.py` keeps the same
  plan). With `overlap` (Megatron's --overlap-grad-reduce) each bucket's AllReduce is issued
  non-blocking as soon as its last gradient is ready, so it overlaps the rest of backward; without
  it the buckets are reduced one after the other, blocking, after the whole backward (Megatron-LM
  `finalize_model_grads` -> megatron/core/distributed/param_and_grad_buffer.py
  `finish_grad_sync`, which without overlap_grad_reduce starts the synchronous collectives).
  Fewer, larger messages: fewer latency terms alpha in the alpha-beta cost.
- Expert parallelism (`grad_group`): each bucket's dense gradients reduce over the data-parallel
  group, its expert gradients (summed, then scaled) over their expert-data group, one packed
  collective each (Megatron-Core's separate expert-parallel buckets).
- Gradient accumulation: several micro-steps add into the gradients before one synchronisation
  (the emitter calls `ready` once per layer, after the last micro-step).
- Reduced precision on the wire: gradients are cast (e.g. to float16) before the AllReduce and
  back after, halving or quartering the bytes; the rounding error this introduces is measured by
  the run against one device, not hidden.
- ZeRO (`zero` 1-3, `zero.py`): a bucket is reduce-scattered instead, coalesced: one collective
  per bucket in which every gradient is split over the group on its own (np.array_split, so each
  rank keeps its `zero.shard_sizes` piece of every tensor; DeepSpeed's reduce_scatter_coalesced,
  without its padding: the collective's per-member `counts`). Stage 1 after the whole backward as
  above; stages 2-3 (DeepSpeed) at every micro-batch, the bucket still open flushed when the
  micro-batch's backward ends, each micro-batch's shards added into the kept ones.
`mean=True` divides by the group size (MindSpore's gradients_mean).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..program import Collective, ProgramBuilder
from ..vocabulary import DEFAULT_BUCKET_MB
from .emit import grad
from .layer_kernels import layer_of
from .zero import scatter_bucket

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2}


@dataclass
class GradSync:
    builder: ProgramBuilder
    config: object
    group_of: dict[int, tuple[int, ...]]  # rank -> its data-parallel group
    bucket_bytes: float = DEFAULT_BUCKET_MB * 1e6
    overlap: bool = False  # buckets reduced under the backward (non-blocking) or after it (blocking)
    dtype: str = "float64"
    mean: bool = True
    shapes: Callable | None = None  # layer -> {name: local shape} (shards under tensor parallelism)
    # (rank, grad tensor, its data-parallel group) -> (another group, factor) or None: expert gradients
    # are summed over their expert-data group and scaled by factor (moe_hybrid.Experts.grad_group)
    grad_group: Callable | None = None
    zero: int = 0  # the ZeRO stage: buckets are reduce-scattered (module docstring)
    _open: dict = field(default_factory=dict)  # rank -> [layer indices] in the open bucket
    _buckets: dict = field(default_factory=dict)  # rank -> list of closed buckets
    _accumulate: dict = field(default_factory=dict)  # rank -> stages 2-3: add into the kept shards

    def _grads(self, li):
        shapes = self.shapes(li) if self.shapes else layer_of(self.config, li).param_shapes()
        return [(grad(li, n), shape) for n, shape in shapes.items()]

    def _collective(self, rank: int, tensor: str, nbytes: int, blocking: bool, tag: str) -> Collective:
        return Collective("all_reduce", tensor, tensor, self.group_of[rank], op="mean" if self.mean else "sum",
                          nbytes=nbytes, blocking=blocking, tag=tag)

    def ready(self, rank: int, li: int) -> None:
        """Layer li's gradients on `rank` are final (called by the emitter in backward order)."""
        if len(self.group_of.get(rank, ())) <= 1:
            return
        self._open.setdefault(rank, []).append(li)
        size = sum(int(np.prod(s)) for li2 in self._open[rank] for _, s in self._grads(li2))
        if size * DTYPE_BYTES[self.dtype] >= self.bucket_bytes:
            self._close(rank)

    def _close(self, rank: int) -> None:
        layers = self._open.pop(rank, [])
        if not layers:
            return
        buckets = self._buckets.setdefault(rank, [])
        name = f"grad/bucket{len(buckets)}"
        for part in self._parts(rank, name, [e for li in layers for e in self._grads(li)]):
            buckets.append(part)
            if self.overlap or self.zero >= 2:
                self._reduce(rank, *part)

    def microbatch_done(self, rank: int, accumulate: bool) -> None:
        """ZeRO-2/3: the micro-batch's backward on `rank` has ended; flush its open bucket. The next
        micro-batch's shards add into the kept ones when `accumulate`."""
        self._close(rank)
        self._accumulate[rank] = accumulate

    def _parts(self, rank: int, name: str, entries: list) -> list:
        """A bucket's (name, entries, expert group or None): with `grad_group` its dense gradients
        over the data-parallel group, then each expert-data group's (Megatron-Core keeps the experts'
        buckets apart, reduced over the expert-data-parallel group; the scale program's `GradBuckets`
        "edp" part)."""
        if self.grad_group is None:
            return [(name, entries, None)]
        dense, experts = [], {}
        for t, shape in entries:
            other = self.grad_group(rank, t, self.group_of[rank])
            (experts.setdefault(other, []) if other else dense).append((t, shape))
        return ([(name, dense, None)] if dense else []) + [(f"{name}/experts{k}", ents, other)
                                                             for k, (other, ents) in enumerate(experts.items())]

    def _reduce(self, rank: int, name: str, entries: list, experts=None) -> None:
        if self.zero:
            return scatter_bucket(self.builder, rank, name, entries, experts or (self.group_of[rank], None),
                                  self.mean, not self.overlap, self.zero, self._accumulate.get(rank, False))
        b = self.builder
        nbytes = sum(int(np.prod(s)) for _, s in entries) * DTYPE_BYTES[self.dtype]
        b.compute(rank, "flatten", [t for t, _ in entries], [name], attrs={"dtype": self.dtype},
                  phase="other", label=f"pack {name}")
        b.free(rank, *[t for t, _ in entries])
        if experts:      # summed over the expert-data group, then scaled (`grad_group`)
            return self._sum_and_scale(rank, name, nbytes, *experts, blocking=not self.overlap)
        b.add(rank, self._collective(rank, name, nbytes, blocking=not self.overlap, tag=name))

    def finish(self, rank: int) -> None:
        """After backward: flush the last bucket (without overlap: reduce every bucket) and unpack, or
        run the per-parameter AllReduces."""
        if len(self.group_of.get(rank, ())) <= 1:
            return
        b = self.builder
        self._close(rank)
        buckets = self._buckets.pop(rank, [])
        if self.zero >= 2:       # reduced at every micro-batch (`microbatch_done`)
            return
        if not self.overlap:
            for part in buckets:
                self._reduce(rank, *part)
        if self.zero:            # scattered into shards (`zero.scatter_bucket`)
            return
        for name, entries, _ in buckets:
            b.compute(rank, "unflatten", [name], [t for t, _ in entries],
                      attrs={"shapes": tuple(s for _, s in entries)}, phase="other", label=f"unpack {name}")
            b.free(rank, name)

    def _sum_and_scale(self, rank: int, tensor: str, nbytes: int, group: tuple[int, ...], factor: float,
                       blocking: bool = True) -> None:
        if len(group) > 1:
            self.builder.add(rank, Collective("all_reduce", tensor, tensor, group, op="sum", nbytes=nbytes, tag=tensor,
                                              blocking=blocking))
        if factor != 1.0:
            self.builder.compute(rank, "scale", [tensor], [tensor], attrs={"factor": factor}, phase="other",
                                 label=f"{tensor} x {factor:.4g}")
