"""A scale program device's gradient buckets (`scale_program`): layers whose gradients are complete
are grouped into buckets of >= bucket_nbytes, each reduced over the data-parallel group when full
(PyTorch DDP's buckets; Megatron-LM's overlap_grad_reduce), the experts' share over the
expert-data-parallel group. Without overlap every reduction waits for the end of the schedule."""

from __future__ import annotations

from simulator.cost.scale_kernels import Kernel
from simulator.program import Collective, Compute


class GradBuckets:
    """A device's gradient buckets: the layers whose gradients are complete are grouped into
    buckets of >= bucket_nbytes, each reduced over the data-parallel group when full."""

    def __init__(self, em, r: int):
        self.em, self.r = em, r
        self.kind = "all_reduce" if em.cfg.zero_stage == 0 else "reduce_scatter"
        self.names: list[str] = []                       # the buckets so far
        self.pending_bytes, self.pending = 0.0, []       # gradients not yet in a bucket
        self.pending_expert = 0.0                        # the experts' bytes of pending_bytes
        # Without overlap the step's buckets are reduced after the whole schedule (Megatron-LM's
        # finalize_model_grads -> DDP finish_grad_sync after forward_backward_func): a blocking
        # reduction inside the cooldown would hold back the stage's backward send, and so every
        # earlier stage, once per stage. DeepSpeed's per-micro-batch reductions (ZeRO-2/3, no
        # pipeline) stay after each micro-batch's backward.
        self.defer = not em.overlap and not em.per_mb_grads
        self.deferred: list[Collective] = []

    def done(self, out, r, c, l, j, name: str | None = None, nbytes: float | None = None,
             expert_nbytes: float = 0.0) -> None:
        """Layer l of chunk c's gradient is complete (or the tensor `name` of `nbytes`, `expert_nbytes`
        of them the experts'). FSDP: the layer is a unit of its own, reduce-scattered at once
        (`simulator.cost.fsdp`)."""
        if self.em.fsdp and name is None:
            grad, em = self.em.grad_name(c, l, j), self.em
            whole, experts = em.layer_grad_at(r, c, l)
            experts = experts if em.cfg.ep > 1 else 0.0
            out.append(Collective("reduce_scatter", grad, grad, (self.r,), nbytes=int(whole - experts),
                                  blocking=not em.rs_overlap, tag="dp", microbatch=j))
            if experts:     # the experts' part over the expert-data-parallel group (`simulator.cost.fsdp`)
                out.append(Collective("reduce_scatter", grad, grad, (self.r,), nbytes=int(experts),
                                      blocking=not em.rs_overlap, tag="edp", microbatch=j))
            self.replica_all_reduce(out, grad, whole - experts, j)
            self.names.append(grad)
            return
        grad, expert = self.em.layer_grad_at(r, c, l) if nbytes is None else (nbytes, expert_nbytes)
        self.pending_bytes += grad
        self.pending_expert += expert
        self.pending.append(self.em.grad_name(c, l, j) if name is None else name)
        self.flush(out)

    def replica_all_reduce(self, out, grad: str, nbytes: float, j=None) -> None:
        """HSDP: the reduce-scattered shard of `grad` all-reduced across the replicas (tag "dpr",
        `simulator.cost.fsdp`), after the reduce-scatter on the same stream."""
        cfg = self.em.cfg
        if cfg.dp_replicate > 1:
            out.append(Collective("all_reduce", grad, grad, (self.r,), nbytes=int(nbytes / cfg.shard_size),
                                  blocking=not self.em.rs_overlap, tag="dpr", microbatch=j))

    def flush(self, out, force=False) -> None:
        em = self.em
        if not self.pending or (self.pending_bytes < em.bucket_nbytes and not force):
            if force:
                out.extend(self.deferred)
                self.deferred = []
            return
        name = f"bucket{len(self.names)}"
        # the bucket's gradients are its layers' grad tensors; one collective reduces them all
        out.append(Compute("pack", tuple(self.pending), (name,), 0.0, 0, {"kernel": Kernel("pack")},
                           "other", None, f"bucket {len(self.names)}"))
        parts = ((self.pending_bytes - self.pending_expert, "dp", em.cfg.dp * em.cfg.cp),
                 (self.pending_expert, "edp", em.expert_dp))
        for nbytes, tag, size in parts:
            if size > 1 and nbytes > 0:
                reduce = Collective(self.kind, name, name, (self.r,), nbytes=int(nbytes), blocking=not em.overlap,
                                    tag=tag)
                (self.deferred if self.defer else out).append(reduce)
        self.names.append(name)
        self.pending_bytes, self.pending, self.pending_expert = 0.0, [], 0.0
        if force:
            out.extend(self.deferred)
            self.deferred = []
