"""The ends of one scale-program device's step (`scale_program`): before the first action the
previous step's overlapped ZeRO-1/2 parameter gather; after the last, the embedding gradient, the
last gradient bucket, sequence parallelism's all-reduce of partial gradients, the tied embedding's first-last all-reduce, the optimizer and ZeRO-1/2's
parameter all-gather. The parameters a device holds follow the schedule's stage placement
(`Schedule.stage_map`: V-shaped schedules put the first and the last model stage on device 0)."""

from __future__ import annotations

from simulator.cost.analytic import ADAM_BYTES_PER_PARAM
from simulator.cost.rank_params import (
    embedding_copy,
    embedding_params_on_rank,
    ends_params_on_rank,
    head_params_on_rank,
    stage_params_on_rank,
)
from simulator.cost.scale_kernels import Kernel
from simulator.cost.tp_ends import sp_partial_params
from simulator.program import Collective, Compute


class StepEnds:
    """Mixed into `scale_program._Emitter`, whose fields (cfg, model, A, w, dev, stage_of, chunks,
    emb_params, head_params, head_bucketed, mb_buckets, fsdp, overlap, optimizer, expert_local, expert_dp,
    layer_local, plain) it reads."""

    def prologue(self, out, r) -> None:
        cfg = self.cfg
        d = cfg.dp * cfg.cp
        if cfg.zero_stage in (1, 2) and d > 1 and self.A.overlap_param_gather:
            # the previous step's parameter all-gather, overlapping this step's first forward
            self.param_gather(out, r // self.w, r, "params_next", blocking=False)

    def prefetched_params(self) -> tuple:
        """What the device's last layer waits for in the first micro-batch's forward: the previous
        step's overlapped ZeRO-1/2 parameter gather (`prologue`; Megatron-LM's --overlap-param-gather
        gathers bucket by bucket ahead of the first forward, each layer waiting for its own)."""
        cfg = self.cfg
        if cfg.zero_stage in (1, 2) and cfg.dp * cfg.cp > 1 and self.A.overlap_param_gather:
            return ("params_next",)
        return ()

    def epilogue(self, out, k, r, buckets) -> None:
        """The embedding gradient, the last bucket, the optimizer and ZeRO's parameter gather."""
        cfg = self.cfg
        d, zero = cfg.dp * cfg.cp, cfg.zero_stage
        last = self.dev[-1]                    # the device of the last model stage (V-shaped: device 0)
        holds_emb = k == 0 or k == last
        params = self._params(k)
        emb, tied = "emb", last != 0 and (self.model.tied_embeddings or embedding_copy(self.model, last))
        # the ends' gradients not in a bucket yet (the input embedding's, a tied or one-device head's)
        left = self.ends_left(k)
        if holds_emb:
            out.append(Compute("embedding_grad", (), (emb,), 0.0, 0,
                               {"kernel": Kernel("embedding_grad")}, "backward", None, "embedding grad"))
        own = holds_emb and self.fsdp    # reduced on its own, after the last bucket
        if holds_emb and not own and d > 1 and not self.mb_buckets:
            # complete after the first layer's backward: it joins the last bucket (Megatron's DDP
            # buckets; the runnable GradSync), a tied copy too
            buckets.done(out, r, None, None, None, emb, self.A.grad_reduce_bytes * left)
        buckets.flush(out, force=True)
        if cfg.sequence_parallel and cfg.tp > 1:
            # SP: the norms' and row-parallel biases' partial gradients, flattened into one all-reduce
            # over the tensor group after the data-parallel reduction (`tp_ends`)
            nbytes = self.A.grad_reduce_bytes * sp_partial_params(self.model, self._layers(k), k == last,
                                                                  self._dense(k))
            self.tp_sized(out, r, "sp_grads", None, (("all_reduce", int(nbytes)),))
        if holds_emb and tied:
            # then the first and last stage sum their copies of the tied embedding's gradient, after
            # the data-parallel reduction (Megatron-LM finalize_model_grads: finish_grad_sync, then
            # _allreduce_embedding_grads over the embedding group)
            pair = (r % self.w, last * self.w + r % self.w)
            out.append(Collective("all_reduce", emb, emb, pair,
                                  nbytes=int(self.A.grad_reduce_bytes * self.emb_params), tag="emb"))
        if own and d > 1 and left > 0:
            out.append(Collective(buckets.kind, emb, emb, (r,), nbytes=int(self.A.grad_reduce_bytes * left),
                                  blocking=not self.overlap, tag="dp"))
            if self.fsdp:
                buckets.replica_all_reduce(out, emb, self.A.grad_reduce_bytes * left)
        if own or (holds_emb and (d == 1 or tied)):
            buckets.names.append(emb)
        if self.optimizer:
            shard = cfg.shard_size if zero >= 1 else 1
            kern = Kernel("adam", (), ADAM_BYTES_PER_PARAM * params / shard)
            out.append(Compute("adam", tuple(buckets.names), ("params",), 0.0, int(kern.ew_nbytes), {"kernel": kern},
                               "optimizer", None, "optimizer"))
        if zero in (1, 2) and d > 1 and not self.A.overlap_param_gather:
            self.param_gather(out, k, r, "params")

    def unit_params(self, l) -> float:
        """Parameters ZeRO-3 gathers for layer l, or for the "emb" / "head" unit: the vocabulary
        matrix (FSDP's units, as `fsdp.fsdp_sync` counts them); DeepSpeed's whole ends (the position
        table, the final norm: `rank_params`, as the closed form's `dp_sync` moves them)."""
        if l not in ("emb", "head"):
            return self.layer_local
        if self.fsdp:
            return self.emb_params
        return (embedding_params_on_rank if l == "emb" else head_params_on_rank)(self.model, self.cfg.tp)

    def microbatch_buckets(self, out, k, r, j, c, buckets) -> None:
        """DeepSpeed ZeRO-2/3: the end of micro-batch j's backward of chunk c on device k flushes
        its open bucket, with the ends' gradients of the stage that holds them."""
        s, last = self.stage_of[k][c], self.dev[-1]
        if (s == 0 and k == 0) or (s == self.S - 1 and k == last != 0):
            left = self.ends_left(k)
            if left > 0 and self.cfg.dp * self.cfg.cp > 1:
                buckets.done(out, r, None, None, j, f"emb.{j}", self.A.grad_reduce_bytes * left)
        buckets.flush(out, force=True)

    def ends_left(self, k: int) -> float:
        """The ends' parameters of device k whose gradients join no layer's bucket: the input
        embedding's, and a tied or one-device output layer's."""
        last = self.dev[-1]
        return (ends_params_on_rank(self.model, self.cfg.tp, k, self.cfg.pp, last)
                - (k == last and self.head_bucketed) * self.head_params)

    def param_gather(self, out, k, r, name, blocking=True) -> None:
        """ZeRO-1/2: all-gather device k's updated parameters (`Assumptions.param_bytes` each), the dense ones over the data x
        context group, the experts' over the expert-data-parallel group."""
        d = self.cfg.dp * self.cfg.cp
        experts = (self._layers(k) - self._dense(k)) * self.expert_local
        for params, tag, size in ((self._params(k) - experts, "dp", d), (experts, "edp", self.expert_dp)):
            if size > 1 and params > 0:
                out.append(Collective("all_gather", "params", name, (r,), nbytes=int(self.A.param_bytes * params / size), tag=tag,
                                      blocking=blocking))

    def _params(self, k: int) -> float:
        """Parameters of pipeline device k on one TP rank: its layers, and the embedding / LM head
        (`rank_params`, shared with the closed form)."""
        cfg = self.cfg
        return sum(stage_params_on_rank(self.model, cfg.tp, cfg.ep, self._layers(k), k, cfg.pp, cfg.expert_tp,
                                        self.dev[-1], self._dense(k)))

    def _layers(self, k: int) -> int:
        """Layers of pipeline device k, over its chunks (the schedule's stage placement)."""
        return sum(self.chunks[s] for s in self.stage_of[k])

    def _dense(self, k: int) -> int:
        """A mixed model's dense layers on pipeline device k (`layer_kinds`)."""
        return sum(self.plain[s] for s in self.stage_of[k])


