"""Compile a PipelinePlan into one Program over all D ranks, under a GPipe or 1F1B schedule.

Each stage runs its action list from simulator.parallel.schedules (GPipe: every forward, then
every backward; 1F1B: min(S-k-1, m) warmup forwards, then forward/backward pairs). An action is
the stage's own compiled forward or backward (compile.py) for one micro-batch, with:

    F(k, j): Recv boundary inputs (+ local cut) -> forward -> gather (if needed) + Send outputs
    B(k, j): seed 1/(D/S m) at the loss, or Recv output gradients (+ zero extra copies)
             -> backward -> sum boundary-input gradients over their copies, gather, Send back
    after all actions: parameter gradients summed over micro-batches -> mirror -> SGD

Names on a device: the stage's names (compile.py) with `~mb<j>` appended for micro-batch j,
except `param/<p>` and the final `grad/<p>`. Local rank i of stage k is global rank k D/S + i.
"""

from __future__ import annotations

from ...parallel.schedules import gpipe, one_f_one_b
from ...program import Program, ProgramBuilder, Recv, Send
from ..compile import Emitter, backward_pass, forward_pass, resolve_grad, sgd
from .plan import PipelinePlan


class StageBuilder:
    """What Emitter needs of a ProgramBuilder, for one stage block and micro-batch: local rank
    r -> offset + r, every name but param/* suffixed with `~mb<j>` (none when mb is None)."""

    def __init__(self, b: ProgramBuilder, offset: int, mb: int | None):
        self.b, self.offset, self.mb = b, offset, mb

    def name(self, x: str) -> str:
        return x if self.mb is None or x.startswith("param/") else f"{x}~mb{self.mb}"

    def compute(self, rank: int, op: str, inputs, outputs, **kw) -> None:
        self.b.compute(self.offset + rank, op, [self.name(x) for x in inputs],
                       [self.name(x) for x in outputs], microbatch=self.mb, **kw)

    def collective(self, kind: str, group, tensor: str, out: str | None = None, **kw) -> None:
        self.b.collective(kind, [self.offset + r for r in group], self.name(tensor),
                          self.name(out or tensor), microbatch=self.mb, **kw)

    def free(self, rank: int, *tensors: str) -> None:
        self.b.free(self.offset + rank, *(self.name(x) for x in tensors))


def schedule_of(pplan: PipelinePlan):
    S, m = pplan.n_stages, pplan.micro_size
    return (gpipe if pplan.ctx.pipeline_scheduler == "gpipe" else one_f_one_b)(S, m)


def compile_pipeline(pplan: PipelinePlan, train: bool = True) -> Program:
    """The Program of one step on all D ranks (see the module docstring)."""
    D, Ds, m = pplan.device_num, pplan.stage_devices, pplan.micro_size
    b = ProgramBuilder(D, name=f"auto-parallel {pplan.net.name} on {D} devices, "
                               f"{pplan.n_stages} pipeline stages x {Ds}, micro_size {m}")
    backward = train and pplan.loss is not None
    sched = schedule_of(pplan)
    for k, sub in enumerate(pplan.stages):
        off = k * Ds
        ems, op_inputs, param_grads = {}, {}, {p: [] for p in sub.net.params}
        for act in sched.actions[k]:
            j = act.microbatch
            if act.kind == "F":
                ems[j], op_inputs[j] = _forward(b, pplan, sub, k, j)
            elif backward:
                grad = _backward(b, pplan, sub, k, j, ems[j], op_inputs[j])
                for p in param_grads:
                    if p in grad:
                        param_grads[p].append(ems[j].b.name(grad[p]))
        if backward:
            _update(b, sub, off, param_grads)
    return b.build()


def _forward(b: ProgramBuilder, pplan: PipelinePlan, sub, k: int, j: int):
    """Micro-batch j's forward on stage k: receive its inputs, compute, send what later stages read.
    Returns (its Emitter, the operators' inputs the backward needs)."""
    em = Emitter(sub)
    em.b = StageBuilder(b, k * pplan.stage_devices, j)
    for bd in pplan.boundaries:
        if bd.dst == k:
            _recv(b, em, bd, pplan, j, forward=True)
    op_inputs = forward_pass(em, sub)
    sent = {}
    for bd in pplan.boundaries:
        if bd.src == k:
            if bd.tensor not in sent:
                sent[bd.tensor] = em.steps(f"act/{bd.tensor}", bd.gather, "forward")
            _send(b, em, bd, pplan, j, sent[bd.tensor], forward=True)
    return em, op_inputs


def _backward(b: ProgramBuilder, pplan: PipelinePlan, sub, k: int, j: int, em, op_inputs) -> dict:
    """Micro-batch j's backward on stage k: seed the loss (its stage) or receive the output
    gradients, run the backward, send the input gradients back. Returns tensor -> gradient name."""
    seeds = {}
    loss = pplan.loss
    if pplan.loss_stage == k:
        seeds[loss] = f"grad/{loss}"
        em.compute("fill", [], [seeds[loss]], dict(shape=(), value=1.0 / (pplan.stage_devices * pplan.micro_size)),
                   phase="backward", label="seed 1/(D m)")
    for bd in pplan.boundaries:
        if bd.src == k and bd.needs_grad:
            g = _recv(b, em, bd, pplan, j, forward=False)
            if bd.tensor in seeds:
                acc = em.fresh(f"grad/{bd.tensor}")
                em.compute("add", [seeds[bd.tensor], g], [acc], phase="backward",
                           label=f"accumulate d{bd.tensor}")
                g = acc
            seeds[bd.tensor] = g
    grad = backward_pass(em, sub, op_inputs, seeds)
    for bd in pplan.boundaries:
        if bd.dst == k and bd.needs_grad:
            x = bd.tensor
            if x not in grad:  # read only where no gradient flows (e.g. labels)
                shape = sub.stored[x].local_shape(bd.shape)
                grad[x] = em.fresh(f"grad/{x}")
                em.compute("fill", [], [grad[x]], dict(shape=shape, value=0.0),
                           phase="backward", label=f"d{x} = 0")
            g = resolve_grad(em, sub, x, grad[x])
            g = em.steps(g, bd.grad_gather, "backward")
            _send(b, em, bd, pplan, j, g, forward=False)
    return grad


def _update(b: ProgramBuilder, sub, off: int, param_grads: dict) -> None:
    """Sum each parameter's micro-batch gradients, then its mirror, then SGD (stage ranks)."""
    em = Emitter(sub)
    em.b = StageBuilder(b, off, None)
    for p, names in param_grads.items():
        if not names:
            continue
        acc = names[0]
        for g in names[1:]:
            out = em.fresh(f"grad/{p}")
            em.compute("add", [acc, g], [out], phase="backward", label=f"accumulate d{p}")
            acc = out
        resolve_grad(em, sub, p, acc)
    for p, names in param_grads.items():
        if names:
            sgd(em, sub, p)


def _peer(pplan: PipelinePlan, bd, forward: bool) -> tuple[int, int]:
    """(my stage offset, peer stage offset) for the side that sends."""
    Ds = pplan.stage_devices
    return (bd.src * Ds, bd.dst * Ds) if forward else (bd.dst * Ds, bd.src * Ds)


def _tag(bd, j: int, forward: bool) -> str:
    return f"{'' if forward else 'd'}{bd.tensor}/mb{j}"


def _send(b: ProgramBuilder, em: Emitter, bd, pplan: PipelinePlan, j: int, name: str,
          forward: bool) -> None:
    me, peer = _peer(pplan, bd, forward)
    for i in range(pplan.stage_devices):
        b.add(me + i, Send(em.b.name(name), peer + i, _tag(bd, j, forward), bd.nbytes, j))


def _recv(b: ProgramBuilder, em: Emitter, bd, pplan: PipelinePlan, j: int, forward: bool) -> str:
    """Receive the boundary tensor (forward) or its gradient (backward); returns the stage-local
    name of the result in the layout the stage needs."""
    peer, me = _peer(pplan, bd, forward)
    x = bd.tensor
    steps = bd.scatter if forward else bd.grad_scatter
    final = f"act/{x}" if forward else None
    got = final if (forward and not steps) else em.fresh(f"act/{x}" if forward else f"grad/{x}")
    for i in range(pplan.stage_devices):
        b.add(me + i, Recv(em.b.name(got), peer + i, _tag(bd, j, forward), bd.nbytes, j))
    return em.steps(got, steps, "forward" if forward else "backward", final=final)
