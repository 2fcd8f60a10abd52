"""Compile a ParallelPlan into a Program: one instruction list per device.

For every operator, in network order: the input redistributions, the local shard kernel
(Compute), the forward communication (Collective). Then, for a scalar loss, the backward pass in
reverse order (seed 1/D on every copy of the loss, see plan.py), the parameter mirrors, and an
SGD step on each rank's parameter shard; every tensor the step creates is freed after its last
use (liveness.py), so the measured peak memory is the live set's. Every move of redistribution.py lowers to:
split/pad/zero -> one Compute per rank (its own index); AllReduce/AllGather/ReduceScatter -> one
Collective per group; AllToAll -> pack, a Collective all_to_all on axis 0, unpack;
CollectivePermute -> a Send/Recv per (sender, receiver) pair (all Sends first: they are buffered,
so no cycle of ranks can deadlock) and a local copy on the ranks that keep their block.

Tensor names on a device: `param/<p>`, `grad/<p>`, `act/<x>`, intermediates `<...>@<n>`.
"""

from __future__ import annotations

from math import prod

from ..program import Program, ProgramBuilder, Recv, Send
from . import op_kernels, op_kernels_nn  # noqa: F401  (register the auto.* kernels emitted here)
from .liveness import free_dead
from .ops import Reshape
from .plan import ITEMSIZE, ParallelPlan
from .redistribution import Step


def local_name(net, x: str) -> str:
    return f"param/{x}" if net.tensors[x].kind == "parameter" else f"act/{x}"


class Emitter:
    """Emits a plan's instructions into a ProgramBuilder (also used by pipeline/compile.py)."""

    def __init__(self, plan: ParallelPlan | None, D: int | None = None):
        self.plan, self.D = plan, plan.device_num if plan else D
        name = f"auto-parallel {plan.net.name} on {self.D} devices" if plan else "redistribution"
        self.b = ProgramBuilder(self.D, name=name)
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base.split('@')[0]}@{self.count}"

    def compute(self, op, ins, outs, attrs_of=None, **kw) -> None:
        for r in range(self.D):
            attrs = attrs_of(r) if callable(attrs_of) else dict(attrs_of or {})
            self.b.compute(r, op, ins, outs, attrs=attrs, **kw)

    def steps(self, name: str, steps, phase: str, final: str | None = None, op: str = "sum") -> str:
        for k, st in enumerate(steps):
            out = final if (final and k == len(steps) - 1) else self.fresh(name)
            self.step(st, name, out, phase, op)
            name = out
        return name

    def step(self, st: Step, src: str, out: str, phase: str, op: str) -> None:
        mesh = st.before.mesh
        n = prod(mesh.axis_size(a) for a in st.axes)

        def index(r: int) -> int:
            i = 0
            for a in st.axes:
                i = i * mesh.axis_size(a) + mesh.coord(r, a)
            return i

        if st.kind == "split":
            self.compute("split", [src], [out], lambda r: dict(parts=n, index=index(r), axis=st.dim),
                         phase=phase, label="split")
        elif st.kind == "pad":
            self.compute("auto.pad", [src], [out], lambda r: dict(parts=n, index=index(r), axis=st.dim),
                         phase=phase, label="pad")
        elif st.kind == "zero":
            self.compute("scale", [src], [out], lambda r: dict(factor=1.0 if index(r) == 0 else 0.0),
                         phase=phase, label="zero copies")
        elif st.kind == "all_to_all":
            packed, moved = self.fresh(src), self.fresh(src)
            self.compute("auto.a2a_pack", [src], [packed], dict(parts=n, axis=st.dim_to),
                         phase=phase, label="a2a pack")
            for g in st.groups:
                self.b.collective("all_to_all", g, packed, moved, axis=0, nbytes=st.nbytes)
            self.compute("auto.a2a_unpack", [moved], [out], dict(axis=st.dim), phase=phase,
                         label="a2a unpack")
        elif st.kind == "collective_permute":
            tag = f"permute {out}"
            for s, d in st.groups:
                self.b.add(s, Send(src, d, tag, st.nbytes))
            for s, d in st.groups:
                self.b.add(d, Recv(out, s, tag, st.nbytes))
            receivers = {d for _, d in st.groups}
            for r in range(self.D):
                if r not in receivers:
                    self.b.compute(r, "copy", [src], [out], phase=phase, label="permute keep")
        else:
            for g in st.groups:
                self.b.collective(st.kind, g, src, out, axis=st.dim or 0, nbytes=st.nbytes,
                                  op=op if st.kind == "all_reduce" else "sum")


def compile_plan(plan: ParallelPlan, train: bool = True) -> Program:
    """The Program of one step: forward, and with `train` and a scalar loss, backward + SGD."""
    em = Emitter(plan)
    op_inputs = forward_pass(em, plan)
    loss = plan.loss
    if train and loss is not None:
        _backward(em, plan, op_inputs, loss)
    net = plan.net
    free_dead(em.b, {f"act/{net.output.name}"} | {f"grad/{p}" for p in net.params})
    return em.b.build()


def forward_pass(em: Emitter, plan: ParallelPlan) -> dict:
    """Emit every operator's input moves, kernel and output moves; node index -> input names."""
    net = plan.net
    cur = {x: local_name(net, x) for x, t in net.tensors.items() if t.kind != "activation"}
    op_inputs = {}
    for np_ in plan.nodes:
        op_inputs[np_.node.index] = emit_node(em, plan, np_, cur, final=f"act/{np_.node.output}")
    return op_inputs


def emit_node(em: Emitter, plan: ParallelPlan, np_, cur: dict, final: str,
              phase: str = "forward", tag: str = "") -> list[str]:
    """One operator: its input moves, inner collectives, kernel and output moves, reading the
    tensors named in `cur` and writing its output to `final` (recorded in `cur`); returns the
    names its backward reads. tag prefixes the labels (a recomputation)."""
    net = plan.net
    node, s = np_.node, np_.sharding
    names = [em.steps(cur[x], st, phase) for x, st in zip(node.inputs, np_.in_steps)]
    shapes = [net.tensors[x].shape for x in node.inputs]
    local_in = [lay.local_shape(sh) for lay, sh in zip(s.inputs, shapes)]
    local_out = s.raw.local_shape(net.tensors[node.output].shape)
    attrs = kernel_attrs(np_, shapes, local_out)
    for kern, st, op in np_.inner:  # the operator's own collectives (fused cross-entropy)
        part = em.fresh(f"act/{node.output}")
        em.compute(kern, names, [part], attrs, phase=phase, label=f"{tag}{node.label} {kern}")
        names = names + [em.steps(part, (st,), phase, op=op) if st is not None else part]
    raw = final if not np_.out_steps else em.fresh(f"act/{node.output}")
    em.compute(node.op.fwd, names, [raw], attrs, phase=phase, label=f"{tag}{node.label}",
               flops=node.op.flops(local_in, local_out),
               nbytes=ITEMSIZE * sum(prod(sh) for sh in local_in))
    cur[node.output] = em.steps(raw, np_.out_steps, phase, final=final)
    return names


def recompute(em: Emitter, plan: ParallelPlan, segment: int, op_inputs: dict) -> None:
    """cell.recompute(): emit the forward of the segment's operators again in the backward
    phase (their input moves included, as MindSpore re-runs them) and point their backward at
    the recomputed values."""
    net = plan.net
    cur = {x: local_name(net, x) if t.kind != "activation" else f"act/{x}"
           for x, t in net.tensors.items()}
    for np_ in plan.nodes:
        if np_.node.recompute == segment:
            op_inputs[np_.node.index] = emit_node(em, plan, np_, cur, em.fresh(f"act/{np_.node.output}"),
                                                  phase="backward", tag="recompute ")


def kernel_attrs(np_, shapes, local_out):
    """The operator's kernel attributes: global ones, plus per-rank ones (offsets) as a function
    of the rank when the operator has them."""
    node = np_.node
    if isinstance(node.op, Reshape) or node.op.fwd == "auto.reshape":
        return {"shape": local_out}
    attrs = node.op.attrs(shapes)
    per_rank = node.op.rank_attrs(np_.sharding, shapes)
    return attrs if per_rank is None else (lambda r: dict(attrs, **per_rank(r)))


def _backward(em: Emitter, plan: ParallelPlan, op_inputs: dict, loss: str) -> None:
    net, D = plan.net, plan.device_num
    em.compute("fill", [], [f"grad/{loss}"], dict(shape=(), value=1.0 / D), phase="backward",
               label="seed 1/D")
    grad = backward_pass(em, plan, op_inputs, {loss: f"grad/{loss}"})
    for x in plan.mirrors:
        if x in grad:
            resolve_grad(em, plan, x, grad[x])
    for p in net.params:
        if p in grad:
            sgd(em, plan, p)


def backward_pass(em: Emitter, plan: ParallelPlan, op_inputs: dict, grad: dict) -> dict:
    """Reverse-mode pass from the seeded gradients `grad` (tensor -> local name, in the grad
    layout); returns tensor -> local gradient name (replicated axes still pending sums)."""
    net, D = plan.net, plan.device_num
    grad = dict(grad)
    op_inputs, redone = dict(op_inputs), set()
    for np_ in reversed(plan.nodes):
        node = np_.node
        if not plan.needs[node.output] or node.output not in grad:
            continue
        if node.recompute is not None and node.recompute not in redone:
            redone.add(node.recompute)
            recompute(em, plan, node.recompute, op_inputs)
        dy = em.steps(grad[node.output], np_.grad_out_steps, "backward")
        shapes = [net.tensors[x].shape for x in node.inputs]
        attrs = kernel_attrs(np_, shapes, np_.sharding.raw.local_shape(net.tensors[node.output].shape))
        outs = [em.fresh(f"grad/{node.inputs[i]}") for i in node.op.grad_inputs]
        ins = list(op_inputs[node.index])
        for i, x in enumerate(node.inputs):  # optimizer_level level3: gather the parameter again
            if x in plan.regather and plan.regather[x] and np_.in_steps[i]:
                ins[i] = em.steps(f"param/{x}", np_.in_steps[i], "backward")
        ins = [dy] + ins
        for kern, st, op in np_.inner_bwd:  # the backward's own collectives (a cut softmax axis)
            part = em.fresh(f"grad/{node.output}")
            em.compute(kern, ins, [part], attrs, phase="backward", label=f"{node.label} {kern}")
            ins = ins + [em.steps(part, (st,), "backward", op=op) if st is not None else part]
        em.compute(node.op.bwd, ins, outs, attrs, phase="backward",
                   label=f"{node.label} backward")
        for i, g in zip(node.op.grad_inputs, outs):
            x = node.inputs[i]
            if i not in np_.grad_in_steps:
                for r in range(D):
                    em.b.free(r, g)
                continue
            g = em.steps(g, np_.grad_in_steps[i], "backward")
            if x in grad:
                acc = em.fresh(f"grad/{x}")
                em.compute("add", [grad[x], g], [acc], phase="backward", label=f"accumulate d{x}")
                g = acc
            grad[x] = g
    return grad


def resolve_grad(em: Emitter, plan: ParallelPlan, x: str, src: str) -> str:
    """The mirror of parameter/input `x`: its gradient summed over the ranks holding the same
    slice (mean with gradients_mean, parameters only), written to `grad/<x>`."""
    steps, op = plan.mirrors[x], "sum"
    reduce = [s for s in steps if s.kind == "all_reduce"]
    if plan.ctx.gradients_mean and plan.net.tensors[x].kind == "parameter" and reduce:
        g = reduce[0].group_size
        scaled = em.fresh(f"grad/{x}")
        em.compute("scale", [src], [scaled], dict(factor=float(g)), phase="backward",
                   label=f"d{x} x {g} (gradients_mean)")
        src, op = scaled, "mean"
    final = f"grad/{x}"
    if steps:
        em.steps(src, steps, "backward", final=final, op=op)
    elif src != final:
        em.compute("copy", [src], [final], phase="backward", label=f"d{x}")
    return final


def sgd(em: Emitter, plan: ParallelPlan, p: str) -> None:
    em.compute("auto.sgd", [f"param/{p}", f"grad/{p}"], [f"param/{p}"],
               dict(lr=plan.ctx.learning_rate), phase="optimizer", label=f"sgd {p}")


def redistribution_program(steps, device_num: int, src: str = "act/x", dst: str = "act/y",
                           phase: str = "forward") -> Program:
    """A Program performing just these redistribution steps: `src` on every rank -> `dst`."""
    em = Emitter(None, device_num)
    out = em.steps(src, steps, phase, final=dst)
    if out != dst:
        em.compute("copy", [out], [dst], phase=phase, label="copy")
    return em.b.build()
