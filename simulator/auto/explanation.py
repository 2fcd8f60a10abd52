"""What explain() reports: every operator's parallel form and every move inserted, with reasons.

    e = explain(net, ctx)              # or explain(MatMul().shard(...), ctx, shapes=[...])
    print(e.to_text()); e.to_dict(); e.to_json()

Each communication entry: kind (AllReduce, ReduceScatter, AllGather, AllToAll), phase
("forward", "backward", "parameter_gradient"), the operator and tensor, the exact rank groups,
the bytes each rank contributes, and a one-line reason. Local moves (split, pad, zero) are listed
separately: they cost no communication.

Backward convention (MindSpore's, REFERENCES §1): the backward of each forward move is its
adjoint -- AllReduce <- AllReduce, AllGather <- ReduceScatter, ReduceScatter <- AllGather -- and
a gradient may stay a pending sum over the ranks where its tensor is replicated until something
needs it whole (plan.py). PyTorch DTensor and GSPMD/XLA differ on one case: a Shard -> Replicate
redistribution (an AllGather) has a backward that only slices the replicated gradient, with no
communication, because they keep gradients of replicated tensors whole rather than pending sums.
So the same layouts can show different backward bytes: MindSpore pays a ReduceScatter where
DTensor pays nothing. Megatron's hand-written tensor parallelism places its
AllReduce at the column-parallel input (f) where MindSpore's sits at the adjoint of the
row-parallel output (g): the same count and bytes per block (tests/test_auto_gpt.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from math import prod

import numpy as np

from ..errors import ParasimError
from ..units import fmt_bytes
from .context import AutoParallelContext
from .graph import Network
from .optimizer_shard import model_state_bytes_per_rank
from .plan import ParallelPlan
from .redistribution import Step

KIND_NAMES = {"all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter",
              "all_gather": "AllGather", "all_to_all": "AllToAll",
              "collective_permute": "CollectivePermute", "split": "Split (local)",
              "pad": "Pad (local)", "zero": "Zero copies (local)", "send": "Send/Recv"}
PHASES = ("forward", "backward", "parameter_gradient", "pipeline")


@dataclass(frozen=True)
class Move:
    phase: str
    op: str
    tensor: str
    kind: str
    groups: tuple[tuple[int, ...], ...]
    bytes_per_rank: int
    reason: str
    local: bool

    def to_dict(self) -> dict:
        return {"op": KIND_NAMES[self.kind], "kind": self.kind, "operator": self.op,
                "tensor": self.tensor, "phase": self.phase,
                "groups": [list(g) for g in self.groups], "bytes_per_rank": self.bytes_per_rank,
                "reason": self.reason}


@dataclass(frozen=True)
class Explanation:
    ctx: AutoParallelContext
    operators: tuple[dict, ...]
    moves: tuple[Move, ...]
    plan: ParallelPlan = field(repr=False, compare=False)

    def phase(self, name: str) -> list[Move]:
        return [m for m in self.moves if m.phase == name and not m.local]

    def to_dict(self) -> dict:
        out = {"parallel_mode": self.ctx.parallel_mode, "device_num": self.ctx.device_num,
               "operators": [dict(o) for o in self.operators]}
        if len(self.operators) == 1:  # a single operator: its form at the top level too
            out.update({k: self.operators[0][k] for k in
                        ("device_matrix", "tensor_maps", "strategy", "output_strategy")})
        if self.ctx.pipeline_stages > 1:
            out.update(pipeline_stages=self.ctx.pipeline_stages, micro_size=self.ctx.micro_size,
                       pipeline_scheduler=self.ctx.pipeline_scheduler,
                       stage_ranks=[list(self.plan.ranks(k)) for k in range(self.plan.n_stages)])
        if isinstance(self.plan, ParallelPlan):  # the slices rank global_rank holds
            r = self.ctx.global_rank
            out["model_state_bytes_per_rank"] = model_state_bytes_per_rank(self.plan)
            out["global_rank"] = r
            out["rank_slices"] = {x: {"block": list(lay.block_index(r)),
                                      "shape": list(lay.local_shape(self.plan.net.tensors[x].shape))}
                                  for x, lay in self.plan.stored.items()
                                  if self.plan.net.tensors[x].kind == "parameter"}
        for ph in PHASES[:3] + (PHASES[3:] if self.ctx.pipeline_stages > 1 else ()):
            out[ph] = [m.to_dict() for m in self.phase(ph)]
        out["local"] = [m.to_dict() for m in self.moves if m.local]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_text(self) -> str:
        lines = [f"{self.ctx!r}"]
        for o in self.operators:
            where = f"[stage {o['stage']}, ranks {o['ranks'][0]}-{o['ranks'][-1]}] " if "stage" in o else ""
            lines.append(f"{where}{o['op']}: strategy {o['strategy']}, device matrix {o['device_matrix']}, "
                         f"tensor maps {o['tensor_maps']}, output {o['output']}")
        for ph in PHASES[:3] + (PHASES[3:] if self.ctx.pipeline_stages > 1 else ()):
            moves = [m for m in self.moves if m.phase == ph]
            lines.append(f"{ph}:" + (" nothing inserted" if not moves else ""))
            for m in moves:
                groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in m.groups)
                size = "" if m.local else f", {fmt_bytes(m.bytes_per_rank)} per rank"
                lines.append(f"  {KIND_NAMES[m.kind]} [{m.op}, {m.tensor}] groups {groups}{size}")
                lines.append(f"    because {m.reason}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def single_op_network(op, shapes) -> Network:
    """x (an input that wants its gradient) and parameters w1.. of the given shapes -> op."""
    if not shapes:
        raise ParasimError(f"explain({op.name}) needs the input shapes, e.g. shapes=[(64, 32), (32, 16)]")
    net = Network(op.name.lower())
    ins = [net.input("x", shapes[0], requires_grad=True)]
    ins += [net.parameter(f"w{i}" if len(shapes) > 2 else "w", np.zeros(tuple(s)))
            for i, s in enumerate(shapes[1:], start=1)]
    op(*ins)
    return net


def operator_entry(plan: ParallelPlan, np_) -> dict:
    s = np_.sharding
    return {"op": np_.node.label, "strategy": [list(t) for t in s.strategy],
            "device_matrix": list(s.device_matrix), "tensor_maps": _jsonable(s.tensor_maps),
            "output_strategy": list(s.out.splits), "output": s.out.notation(np_.node.output),
            "repeated_calculation": s.repeat, "user_set": s.user_set}


def _jsonable(maps) -> list:
    return [[list(e) if isinstance(e, tuple) else e for e in m] for m in maps]


def plan_moves(plan: ParallelPlan):
    net = plan.net
    for np_ in plan.nodes:
        node, s = np_.node, np_.sharding
        for i, (x, steps) in enumerate(zip(node.inputs, np_.in_steps)):
            need, have = s.inputs[i], plan.stored[x]
            on = (lambda lay: f" on {lay.mesh!r}") if need.mesh != have.mesh else (lambda lay: "")
            ctx = (f"{node.label} needs input {i} as {need.notation(x)}{on(need)} but it is stored as "
                   f"{have.notation(x)}{on(have)}")
            if x in plan.gathered:
                ctx = (f"{x} is stored split over its optimizer shard group (parallel optimizer); "
                       f"{node.label} needs it as {need.notation(x)}")
            yield from step_entries("forward", node.label, x, steps, ctx)
        yield from step_entries("forward", node.label, node.inputs[0], np_.inner_steps,
                                f"inside {node.label}")
        cut = {c.upper(): prod(s.mesh.axis_size(a) for a in axes)
               for c, axes in s.letter_axes.items() if set(axes) & set(s.raw.partial)}
        ctx = ", ".join(f"{c} is cut {n} ways" for c, n in cut.items() if n > 1)
        ctx = f"{ctx}, so each rank holds a partial sum of {node.output}" if ctx else \
            f"{node.label}'s output must become {s.out.notation(node.output)}"
        yield from step_entries("forward", node.label, node.output, np_.out_steps, ctx)
    for np_ in reversed(plan.nodes):
        node, s = np_.node, np_.sharding
        yield from step_entries("backward", node.label, "d" + node.output, np_.grad_out_steps,
                            f"backward of {node.label}'s forward communication (its adjoint)")
        yield from step_entries("backward", node.label, "d" + node.output, np_.inner_backward_steps,
                                f"inside {node.label}'s backward")
        for i, x in enumerate(node.inputs):
            if x in plan.regather and np_.in_steps[i]:
                yield from step_entries("backward", node.label, x, np_.in_steps[i],
                                        f"optimizer_level level3: {x} is gathered again for "
                                        f"{node.label}'s backward (the forward copy was freed)")
        for i, steps in np_.grad_in_steps.items():
            x = node.inputs[i]
            rep = [a for a in s.inputs[i].replicated_axes if s.mesh.axis_size(a) > 1]
            ctx = (f"the gradient of {node.label}'s input {i} is a partial sum over the ranks "
                   f"along {','.join(rep)} (where {x} is replicated)" if rep else
                   f"the gradient of {node.label}'s input {i} goes back to {x}'s layout")
            yield from step_entries("backward", node.label, "d" + x, steps, ctx)
    for x, steps in plan.mirrors.items():
        t = net.tensors[x]
        if t.kind == "parameter":
            g = steps[0].group_size if steps else 1
            mean = f", then divided by {g} (gradients_mean)" if plan.ctx.gradients_mean else ""
            ctx = (f"{x} is replicated on groups of {g} ranks holding the same slice (its mirror); "
                   f"their gradient contributions are summed{mean}")
            if x in plan.gathered:
                ctx = (f"parallel optimizer: {x}'s gradient is summed over its data-parallel copies "
                       f"and each rank keeps the part of its own slice{mean}")
            yield from step_entries("parameter_gradient", "mirror", "d" + x, steps, ctx)
        else:
            yield from step_entries("backward", "input", "d" + x, steps,
                                f"the gradient of input {x} is a partial sum over its copies")


def step_entries(phase: str, op: str, tensor: str, steps: tuple[Step, ...], ctx: str):
    for st in steps:
        yield Move(phase, op, tensor, st.kind, st.groups, st.nbytes, f"{ctx}; {st.reason}",
                   not st.is_comm)
