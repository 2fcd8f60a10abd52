"""Pipeline parallelism for auto-parallel networks: stages, their sub-plans, the boundary moves.

MindSpore semantics (MindSpore docs "pipeline_parallel"):

- `pipeline_stages=S` with `device_num=D`: stage k owns the contiguous rank block
  [k D/S, (k+1) D/S) (8 ranks, 2 stages -> {0-3}, {4-7}).
- Every operator belongs to one stage: `op.pipeline_stage = k` or `with net.pipeline_stage(k):`
  (MindSpore's `cell.pipeline_stage = k`). Either every operator is placed or none is; with none,
  the operator sequence is cut into S contiguous parts of equal operator COUNT (the first
  n mod S parts get one more) -- predictable, like MindSpore's equal-layer split.
- Shard strategies apply within a stage: each stage is planned by planner.build_plan as its own
  network on D/S devices (local ranks 0..D/S-1, laid on the block's ranks by compile).
- A tensor produced in stage a and consumed in stage b > a crosses with Send/Recv, rank
  a D/S + i -> b D/S + i. If both stages keep it in the same layout, each rank sends its own block
  ("direct"); otherwise stage a gathers it to replicated (the existing redistribution), every rank
  sends the whole tensor and stage b cuts it locally. Its gradient comes back the same way:
  summed over stage b's copies (b's mirror of the input), gathered if needed, sent, and turned
  into stage a's gradient convention (one copy kept, the others zeroed: plan.grad_layout).
- micro_size m >= S micro-batches: every network input is cut along dim 0 into m equal parts;
  shapes inside the stages are those of one micro-batch. A scalar loss is a mean (SoftmaxCrossEntropy,
  MSELoss), so the step's loss is the mean of the m micro-batch losses and each copy of a micro-batch
  loss is seeded with 1/(D/S * m); parameter gradients are accumulated over the m micro-batches
  before their mirror AllReduce (MindSpore's gradient accumulation in PipelineCell).
- grad_accumulation_step g without pipelining (MindSpore's GradAccumulationCell) is the same
  machinery with one stage and micro_size g (`accumulation_context`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from ...errors import ParasimError
from ...layout import Layout
from ..context import AutoParallelContext
from ..graph import Network
from ..ops import Reshape
from ..plan import ITEMSIZE, ParallelPlan, grad_layout, named_dataset_strategy
from ..planner import build_plan
from ..redistribution import Step, redistribute
from ..strategy_ckpt import save_strategy


@dataclass(frozen=True)
class Boundary:
    """Tensor `tensor` produced in stage `src`, consumed in stage `dst` (local rank i -> i)."""

    tensor: str
    src: int
    dst: int
    shape: tuple[int, ...]  # one micro-batch
    direct: bool  # same layout on both sides: each rank sends its own block
    nbytes: int  # bytes each sending rank sends (forward; the gradient is the same size)
    needs_grad: bool
    gather: tuple[Step, ...]  # stage src: stored layout -> replicated (() if direct)
    scatter: tuple[Step, ...]  # stage dst: replicated -> stored layout
    grad_gather: tuple[Step, ...]  # stage dst: summed gradient -> replicated
    grad_scatter: tuple[Step, ...]  # stage src: received gradient -> its grad layout

    def __repr__(self) -> str:
        how = "its blocks" if self.direct else "replicated"
        return f"Boundary({self.tensor}: stage {self.src} -> {self.dst}, {how})"


@dataclass(frozen=True)
class PipelinePlan:
    ctx: AutoParallelContext
    net: Network
    device_num: int  # D, all stages
    stage_devices: int  # D / S
    micro_size: int
    stage_of: tuple[int, ...]  # node index -> stage
    stages: tuple[ParallelPlan, ...]  # each stage planned on D / S local ranks
    boundaries: tuple[Boundary, ...]

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def ranks(self, k: int) -> tuple[int, ...]:
        """Stage k's contiguous rank block."""
        return tuple(range(k * self.stage_devices, (k + 1) * self.stage_devices))

    @property
    def loss(self) -> str | None:
        out = self.net.output
        return out.name if out.shape == () else None

    @property
    def loss_stage(self) -> int:
        return self.stage_of[-1]

    def __repr__(self) -> str:
        blocks = ", ".join(f"stage {k}: ranks {self.ranks(k)[0]}-{self.ranks(k)[-1]}"
                           for k in range(self.n_stages))
        return f"PipelinePlan({self.net.name!r}, {blocks}, micro_size={self.micro_size})"


def assign_stages(net: Network, S: int) -> tuple[int, ...]:
    """node index -> stage: the operators' own stages, or contiguous parts of equal count."""
    n = len(net.nodes)
    if n == 0:
        raise ParasimError(f"network {net.name!r} has no operators to place on pipeline stages")
    given = [node.stage for node in net.nodes]
    if all(g is None for g in given):
        if n < S:
            raise ParasimError(f"{n} operator(s) cannot fill pipeline_stages={S}: each stage "
                               f"needs at least one")
        sizes = [n // S + (1 if k < n % S else 0) for k in range(S)]
        return tuple(k for k, c in enumerate(sizes) for _ in range(c))
    missing = [node.label for node, g in zip(net.nodes, given) if g is None]
    if missing:
        raise ParasimError(f"operators {missing} have no pipeline stage while others do: place "
                           f"all (op.pipeline_stage = k or `with net.pipeline_stage(k):`) or none")
    bad = [(node.label, g) for node, g in zip(net.nodes, given) if g >= S]
    if bad:
        raise ParasimError(f"pipeline stages go from 0 to {S - 1} (pipeline_stages={S}); got "
                           f"{', '.join(f'{l} in stage {g}' for l, g in bad)}")
    empty = sorted(set(range(S)) - set(given))
    if empty:
        raise ParasimError(f"pipeline stage(s) {empty} have no operators; each of the {S} stages "
                           f"needs at least one")
    return tuple(given)


def _micro_shapes(net: Network, m: int) -> dict:
    """Input name -> shape of one micro-batch (dim 0 cut m ways)."""
    out = {}
    for t in net.inputs:
        if not t.shape or t.shape[0] % m:
            n = t.shape[0] if t.shape else "no"
            raise ParasimError(f"input {t.name!r} of shape {t.shape}: micro_size {m} must divide "
                               f"its batch dim 0 ({n})")
        out[t.name] = (t.shape[0] // m,) + t.shape[1:]
    return out


def _stage_network(net: Network, k: int, stage_of, m: int,
                   micro: dict, needs: dict) -> Network:
    """Stage k as its own network: its operators (original names and labels), its parameters,
    the inputs it reads and the tensors it receives from earlier stages (as inputs)."""
    sub = Network(f"{net.name}/stage{k}")
    have: dict = {}
    for node, s in zip(net.nodes, stage_of):
        if s != k:
            continue
        ins = []
        for x in node.inputs:
            if x not in have:
                t = net.tensors[x]
                if t.kind == "parameter":
                    have[x] = sub.parameter(x, net.params[x])
                elif t.kind == "input":
                    have[x] = sub.input(x, micro[x], t.dtype, t.requires_grad)
                else:  # received from an earlier stage
                    have[x] = sub.input(x, micro[x], t.dtype, needs[x])
            ins.append(have[x])
        op = node.op
        if isinstance(op, Reshape):  # its target shape holds the batch dim: one micro-batch's
            if op.shape[0] % m:
                raise ParasimError(f"{node.label}: micro_size {m} must divide the batch dim 0 of "
                                   f"its target shape {op.shape}")
            op = copy.copy(op)
            op.shape = (op.shape[0] // m,) + op.shape[1:]
        shape = tuple(op.out_shape([t.shape for t in ins]))
        micro[node.output] = shape
        have[node.output] = sub.add_node(op, ins, shape, name=node.output, label=node.label, stage=k,
                                        recompute=node.recompute)
    return sub


def accumulation_context(ctx: AutoParallelContext) -> AutoParallelContext:
    """grad_accumulation_step g > 1 as one pipeline stage with g micro-batches."""
    if ctx.grad_accumulation_step > 1:
        return replace(ctx, micro_size=ctx.grad_accumulation_step)
    return ctx


def build_pipeline_plan(net: Network, ctx: AutoParallelContext) -> PipelinePlan:
    S, m, D = ctx.pipeline_stages, ctx.micro_size, ctx.device_num
    stage_of = assign_stages(net, S)
    producer_stage = {node.output: s for node, s in zip(net.nodes, stage_of)}
    params_in: dict = {}
    for node, s in zip(net.nodes, stage_of):
        for x in node.inputs:
            if x in producer_stage and producer_stage[x] > s:
                raise ParasimError(f"{node.label} in stage {s} reads {x}, which stage "
                                   f"{producer_stage[x]} computes later; a stage may only read "
                                   f"earlier stages")
            if net.tensors[x].kind == "parameter":
                params_in.setdefault(x, set()).add(s)
    shared = {p: sorted(v) for p, v in params_in.items() if len(v) > 1}
    if shared:
        raise ParasimError(f"parameters used by several pipeline stages are not supported: "
                           f"{shared}")
    micro, needs = _micro_shapes(net, m), net.needs_grad()
    sub_ctx = replace(ctx, device_num=D // S, pipeline_stages=1, micro_size=1, global_rank=0,
                      strategy_ckpt_save_file="",
                      dataset_strategy=named_dataset_strategy(net, ctx.dataset_strategy, D // S))
    stages = tuple(build_plan(_stage_network(net, k, stage_of, m, micro, needs),
                              sub_ctx) for k in range(S))
    boundaries = []
    for k, plan in enumerate(stages):
        for t in plan.net.inputs:
            if t.name in producer_stage:
                boundaries.append(_boundary(t.name, stages[producer_stage[t.name]], plan,
                                            producer_stage[t.name], k, needs[t.name]))
    if ctx.strategy_ckpt_save_file:
        save_strategy(stages, ctx.strategy_ckpt_save_file)
    return PipelinePlan(ctx, net, D, D // S, m, stage_of, stages, tuple(boundaries))


def _same(a: Layout, b: Layout) -> bool:
    """Every local rank holds the same block under both layouts (meshes may differ in shape)."""
    return (not a.partial and not b.partial and a.splits == b.splits
            and all(a.block_index(r) == b.block_index(r) for r in a.mesh.ranks))


def _boundary(x: str, a: ParallelPlan, b: ParallelPlan, sa: int, sb: int, needs: bool) -> Boundary:
    shape = b.net.tensors[x].shape
    la, lb = a.stored[x], b.stored[x]
    if _same(la, lb):
        gather, scatter, grad_gather = (), (), ()
        grad_scatter = redistribute(la, grad_layout(la), shape, ITEMSIZE, "d" + x)
        local = la.local_shape(shape)
    else:
        ra, rb = Layout.replicated(la.mesh, len(shape)), Layout.replicated(lb.mesh, len(shape))
        gather = redistribute(la, ra, shape, ITEMSIZE, x)
        scatter = redistribute(rb, lb, shape, ITEMSIZE, x)
        grad_gather = redistribute(lb, rb, shape, ITEMSIZE, "d" + x)
        grad_scatter = redistribute(ra, grad_layout(la), shape, ITEMSIZE, "d" + x)
        local = shape
    n = 1
    for d in local:
        n *= d
    return Boundary(x, sa, sb, shape, _same(la, lb), ITEMSIZE * n, needs, tuple(gather),
                    tuple(scatter), tuple(grad_gather), tuple(grad_scatter))
