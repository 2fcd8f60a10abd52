"""The cost of an operator strategy, MindSpore's objective, priced on a hardware preset.

MindSpore's auto-parallel cost model (docs "auto_parallel", source `auto_parallel/
operator_costmodel.cc`, `costmodel_context.h`: costmodel_alpha, costmodel_beta,
costmodel_gamma, device_memory_capacity) scores a strategy by

    objective = alpha * compute + beta * (comm + gamma * param_comm)   subject to  memory <= limit

where `comm` is the communication of the forward and backward passes that does not touch a
parameter gradient (MindSpore's communication_without_parameter) and `param_comm` the parameter
gradient's mirror AllReduce (which overlaps with the backward pass, hence gamma to discount it).
MindSpore counts bytes; parasim counts seconds on a hardware preset, so alpha = beta = gamma = 1
makes the objective the serialised step time.

- compute: local shard only. MatMul/BatchMatMul: the roofline `matmul_time_s(m, n, k)` of
  simulator.cost.compute; other operators are memory-bound: (input + output bytes) /
  (HBM bandwidth x efficiency). A training step costs 3x the forward (backward = 2 forward;
  Narayanan et al. 2021, Sec. 3.5); inference 1x.
- comm: every Step of redistribution.py priced by `collective_time_s` on the preset's topology
  (groups run in parallel; the slowest counts). The nccl size S is the whole array, so an
  AllGather of an nbytes buffer over n ranks has S = n x nbytes; a CollectivePermute is its
  slowest sender's point-to-point transfers (alpha + S / B each); local moves (split, pad,
  zero) are free.
- memory per device: each parameter's stored shard twice (value and gradient) plus each
  operator's output shard (kept for the backward pass). Reshape outputs are views.

`plan_cost(plan, model)` prices a built ParallelPlan step by step; the search (problem.py)
prices the same terms per operator and per edge, and the two agree (tests/test_auto_search.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod
from typing import Sequence

from ...cost.comm import collective_time_s
from ...cost.compute import matmul_time_s, memory_time_s
from ...cost.hardware import DTYPE_NBYTES, Hardware, get_hardware
from ...errors import ParasimError
from ...layout import Layout
from ...topology import Topology
from ..ops import BatchMatMul, MatMul, Reshape
from ..plan import ITEMSIZE, ParallelPlan, grad_layout
from ..redistribution import Step, redistribute

BACKWARD_FACTOR = 3.0  # forward + backward = 3 x forward (Narayanan et al. 2021)
STATE_COPIES = 2  # a parameter shard and its gradient


@dataclass(frozen=True)
class OpCostModel:
    """The knobs of the search: hardware preset, dtype, alpha/beta/gamma, memory limit.

    fully_use_devices (MindSpore's `fully_use_device`, default True there): only strategies
    whose cuts multiply to exactly D; False also admits repeated calculation (product < D)."""

    hardware: str | Hardware = "a100-80gb"
    dtype: str = "bf16"
    alpha: float = 1.0  # weight of compute
    beta: float = 1.0  # weight of communication
    gamma: float = 1.0  # weight of the parameter-gradient part of communication
    memory_limit_bytes: float | None = None  # None: the preset's memory
    fully_use_devices: bool = True
    enable_alltoall: bool = False  # search() copies the context's
    train: bool = True

    def __post_init__(self):
        if self.dtype not in DTYPE_NBYTES:
            raise ParasimError(f"dtype {self.dtype!r} is not one of {sorted(DTYPE_NBYTES)}")
        for name in ("alpha", "beta", "gamma"):
            if not getattr(self, name) >= 0:
                raise ParasimError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.memory_limit_bytes is not None and not self.memory_limit_bytes > 0:
            raise ParasimError(f"memory_limit_bytes must be > 0, got {self.memory_limit_bytes!r}")
        object.__setattr__(self, "hardware", get_hardware(self.hardware))
        self.hardware.peak(self.dtype)  # refuses a dtype the preset cannot compute

    @property
    def itemsize(self) -> int:
        return DTYPE_NBYTES[self.dtype]

    @property
    def limit_bytes(self) -> float:
        return self.hardware.memory_bytes if self.memory_limit_bytes is None else self.memory_limit_bytes

    def topology(self, D: int) -> Topology:
        return self.hardware.topology(D)

    def __repr__(self) -> str:
        return (f"OpCostModel({self.hardware.name}, {self.dtype}, alpha={self.alpha}, "
                f"beta={self.beta}, gamma={self.gamma}, limit={self.limit_bytes / 1e9:.4g} GB)")


@dataclass(frozen=True)
class Cost:
    """Seconds and bytes of one part of a plan (per device). `*_bytes`: the per-rank buffers
    of the collectives, as explain() reports them (bytes_per_rank)."""

    compute_s: float = 0.0
    comm_s: float = 0.0
    param_comm_s: float = 0.0
    memory_bytes: float = 0.0
    comm_bytes: float = 0.0
    param_comm_bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[float, ...]:
        return (self.compute_s, self.comm_s, self.param_comm_s, self.memory_bytes,
                self.comm_bytes, self.param_comm_bytes)

    def objective(self, model: OpCostModel) -> float:
        """alpha * compute + beta * (comm + gamma * param_comm)  (MindSpore's objective);
        infinite for a move that cannot be made (INFEASIBLE), whatever the weights."""
        if self.comm_s == math.inf:
            return math.inf
        return model.alpha * self.compute_s + model.beta * (self.comm_s + model.gamma * self.param_comm_s)

    def as_param(self) -> "Cost":
        """The same communication counted as parameter-gradient communication."""
        return Cost(self.compute_s, 0.0, self.param_comm_s + self.comm_s, self.memory_bytes,
                    0.0, self.param_comm_bytes + self.comm_bytes)

    def __repr__(self) -> str:
        return (f"Cost(compute {self.compute_s * 1e3:.4g} ms, comm {self.comm_s * 1e3:.4g} ms, "
                f"param comm {self.param_comm_s * 1e3:.4g} ms, memory {self.memory_bytes / 1e6:.4g} MB)")


ZERO = Cost()
INFEASIBLE = Cost(comm_s=math.inf)  # a redistribution that redistribute() refuses


def step_time_s(step: Step, topology: Topology, scale: float = 1.0) -> float:
    """Time of one redistribution step: the slowest of its groups (they run at once).
    `scale` converts the Step's bytes (computed at one itemsize) to the model's dtype."""
    if not step.is_comm or step.group_size < 2:
        return 0.0
    if step.kind == "collective_permute":  # point-to-point: the slowest rank's sends, one link each
        return max(sum(_p2p_s(step.nbytes * scale, s, d, topology) for s2, d in step.groups if s2 == s)
                   for s, _ in step.groups)
    S = step.nbytes * scale * (step.group_size if step.kind == "all_gather" else 1)
    return max(collective_time_s(step.kind, S, g, topology) for g in step.groups)


def _p2p_s(nbytes: float, src: int, dst: int, topology: Topology) -> float:
    link = topology.intra if len(topology.nodes_of([src, dst])) == 1 else topology.inter
    return link.latency_s + nbytes / link.bandwidth_Bps


def steps_cost(steps: Sequence[Step], topology: Topology, scale: float = 1.0) -> Cost:
    comm = [s for s in steps if s.is_comm and s.group_size > 1]
    return Cost(comm_s=sum(step_time_s(s, topology, scale) for s in comm),
                comm_bytes=sum(s.nbytes * scale for s in comm))


@lru_cache(maxsize=1 << 16)
def move_cost(src: Layout, dst: Layout, shape: tuple, itemsize: int, alltoall: bool,
              topology: Topology) -> Cost:
    """The Steps of one redistribution priced (cached: the searches price the same move for many
    operator pairs, forward and as part of its adjoint)."""
    return steps_cost(redistribute(src, dst, shape, itemsize, alltoall=alltoall), topology)


def transfer_cost(src: Layout, dst: Layout, shape, backward: bool, model: OpCostModel,
                  topology: Topology) -> Cost:
    """Moving a tensor from where it is stored (src) to where an operator needs it (dst), and,
    when its gradient flows back, the adjoint move of the gradient (plan.py's grad_in_steps)."""
    it, a2a, shape = model.itemsize, model.enable_alltoall, tuple(shape)
    cost = move_cost(src, dst, shape, it, a2a, topology)
    if backward and model.train:
        cost = cost + move_cost(grad_layout(dst), grad_layout(src), shape, it, a2a, topology)
    return cost


def output_cost(raw: Layout, out: Layout, shape, backward: bool, model: OpCostModel,
                topology: Topology) -> Cost:
    """The forward communication resolving partial sums (raw -> out) and its backward adjoint."""
    it, a2a, shape = model.itemsize, model.enable_alltoall, tuple(shape)
    cost = move_cost(raw, out, shape, it, a2a, topology)
    if backward and model.train:
        raw_grad = Layout(raw.mesh, raw.dims, raw.replicated_axes)
        cost = cost + move_cost(grad_layout(out), raw_grad, shape, it, a2a, topology)
    return cost


def inner_cost(inner, model: OpCostModel, topology: Topology) -> Cost:
    """The collectives inside an operator ((kernel, Step or None, op) triples)."""
    return steps_cost([st for _, st, _ in inner if st is not None], topology, model.itemsize / ITEMSIZE)


def mirror_cost(stored: Layout, shape, model: OpCostModel, topology: Topology) -> Cost:
    """A parameter's mirror: its gradient AllReduced over the ranks holding the same slice."""
    if not model.train:
        return ZERO
    steps = redistribute(grad_layout(stored), stored, shape, model.itemsize, alltoall=model.enable_alltoall)
    return steps_cost(steps, topology).as_param()


def compute_cost(op, in_layouts: Sequence[Layout], out_layout: Layout, shapes, out_shape,
                 model: OpCostModel) -> Cost:
    """Local compute time of one operator (module docstring) and its output activation bytes."""
    if isinstance(op, Reshape):
        return ZERO
    it, hw = model.itemsize, model.hardware
    local_in = [lay.local_shape(s) for lay, s in zip(in_layouts, shapes)]
    local_out = out_layout.local_shape(out_shape) if out_shape else ()
    factor = BACKWARD_FACTOR if model.train else 1.0
    if isinstance(op, (MatMul, BatchMatMul)):
        # out (..., m, n) = (..., m, k) @ (k, n): k from the operator's own FLOP count
        flops = op.flops(local_in, local_out)
        m, n = local_out[-2], local_out[-1]
        batch = prod(local_out[:-2]) if len(local_out) > 2 else 1
        k = flops / (2.0 * m * n * batch)
        t = matmul_time_s(m, n, k, hw, model.dtype, batch)
    else:
        nbytes = it * (sum(prod(s) for s in local_in) + prod(local_out))
        t = memory_time_s(nbytes, hw)
    return Cost(compute_s=factor * t, memory_bytes=it * prod(local_out))


def param_memory(stored: Layout, shape, model: OpCostModel) -> Cost:
    return Cost(memory_bytes=STATE_COPIES * model.itemsize * prod(stored.local_shape(shape)))


@dataclass(frozen=True)
class PlanCost:
    """The cost of a whole plan: per-operator parts and the total."""

    model: OpCostModel
    total: Cost
    per_node: dict = field(repr=False, compare=False)  # label -> Cost

    @property
    def objective(self) -> float:
        return self.total.objective(self.model)

    @property
    def memory_bytes(self) -> float:
        return self.total.memory_bytes

    def __repr__(self) -> str:
        return f"PlanCost(objective {self.objective * 1e3:.6g} ms, {self.total!r})"


def plan_cost(plan: ParallelPlan, model: OpCostModel | None = None) -> PlanCost:
    """Price a built ParallelPlan from its own Steps (the ground truth for the search)."""
    model = model or OpCostModel()
    topo = model.topology(plan.device_num)
    scale = model.itemsize / ITEMSIZE
    net, per = plan.net, {}
    seen: set[str] = set()
    for np_ in plan.nodes:
        node, s = np_.node, np_.sharding
        shapes = [net.tensors[x].shape for x in node.inputs]
        c = compute_cost(node.op, s.inputs, s.out, shapes, net.tensors[node.output].shape, model)
        for x in node.inputs:
            t = net.tensors[x]
            if t.kind == "parameter" and x not in seen:
                c = c + param_memory(plan.stored[x], t.shape, model)
            seen.add(x)
        steps = [st for ss in np_.in_steps for st in ss] + list(np_.inner_steps) + list(np_.out_steps)
        if model.train:
            steps += list(np_.grad_out_steps) + list(np_.inner_backward_steps)
            steps += [st for ss in np_.grad_in_steps.values() for st in ss]
        per[node.label] = c + steps_cost(steps, topo, scale)
    for x, steps in plan.mirrors.items():
        if model.train:
            c = steps_cost(steps, topo, scale)
            per[f"mirror {x}"] = c.as_param() if net.tensors[x].kind == "parameter" else c
    total = sum(per.values(), ZERO)
    return PlanCost(model, total, per)
