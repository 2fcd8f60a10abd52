"""Compile data x pipeline parallel training (tp = 1) to one Program, and what a run needs with it.

The devices form a mesh (pp, dp), data fastest (Megatron's order with tp = 1): rank = s * dp + i
for pipeline stage s of replica i. Each replica runs the pipeline schedule on its micro-batches;
each stage's ranks AllReduce their gradients over the data-parallel group; every rank then updates
the parameters it holds. Single device, data parallel, layer-wise model parallel and pipeline
parallel are all this compiler with different degrees and schedules (see their own modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..mesh import DeviceMesh
from ..models import Adam, SGD, build_model
from ..program import Program, ProgramBuilder
from .config import TrainConfig
from .emit import Replica, grad, param
from .grad_sync import GradSync
from .kernels import layer_of, optimizer_state_names
from .schedules import make_schedule


def split_layers(n_layers: int, stages: int) -> tuple[tuple[int, ...], ...]:
    """Contiguous, as even as possible; the first `n_layers % stages` stages get one more."""
    q, r = divmod(n_layers, stages)
    out, start = [], 0
    for s in range(stages):
        size = q + (1 if s < r else 0)
        out.append(tuple(range(start, start + size)))
        start += size
    return tuple(out)


def make_optimizer(cfg: TrainConfig):
    return Adam(lr=cfg.lr) if cfg.optimizer == "adam" else SGD(lr=cfg.lr)


@dataclass
class Compiled:
    """A compiled training step: the Program plus where everything lives.

    initial: rank -> tensors to load once (parameters, optimizer state).
    feeds: (rank, name, row_start, row_stop, "x" | "y"): the batch rows each step loads.
    param_home: (layer, name) -> (rank, tensor) where the trained value is read back.
    loss_tensors: rank -> loss-sum tensors of the step; `count` tokens normalise them."""

    config: TrainConfig
    program: Program
    initial: dict[int, dict[str, np.ndarray]]
    feeds: list[tuple[int, str, int, int, str]]
    param_home: dict[tuple[int, str], tuple[int, str]]
    loss_tensors: dict[int, list[str]]
    count: int
    mesh: DeviceMesh | None = None
    notes: dict = field(default_factory=dict)
    gather: Callable | None = None  # runtime -> per-layer params, for strategies that shard them

    def feed(self, x: np.ndarray, y: np.ndarray) -> dict[int, dict[str, np.ndarray]]:
        out: dict[int, dict[str, np.ndarray]] = {}
        for rank, name, a, b, which in self.feeds:
            out.setdefault(rank, {})[name] = (x if which == "x" else y)[a:b]
        return out


def tokens_per_sample(model_config) -> int:
    return getattr(model_config, "seq_len", 1)


def emit_optimizer(b: ProgramBuilder, rank: int, layers, config, optimizer) -> None:
    """opt/step += 1, then an elementwise update of every parameter this rank holds; free grads."""
    b.compute(rank, "increment", ["opt/step"], ["opt/step"], phase="optimizer", label="step += 1")
    states = optimizer_state_names(optimizer)
    for li in layers:
        for n, shape in layer_of(config, li).param_shapes().items():
            st = [f"opt/{li}/{n}/{s}" for s in states]
            size = int(np.prod(shape))
            b.compute(rank, "opt_update", [param(li, n), grad(li, n), "opt/step", *st], [param(li, n), *st],
                      attrs={"optimizer": optimizer}, nbytes=8 * size * (3 + 2 * len(states)), flops=10 * size,
                      phase="optimizer", label=f"update {li}/{n}")
            b.free(rank, grad(li, n))


def initial_state(config, layers, optimizer, seed: int) -> dict[str, np.ndarray]:
    params = build_model(config).init_params(seed)
    out: dict[str, np.ndarray] = {"opt/step": np.zeros((), dtype=np.int64)}
    for li in layers:
        for n, value in params[li].items():
            out[param(li, n)] = value
            for s, v in optimizer.init_state(value).items():
                out[f"opt/{li}/{n}/{s}"] = v
    return out


def compile_replicated(cfg: TrainConfig) -> Compiled:
    cfg = cfg.resolved()
    dp, pp, m, v = cfg.dp, cfg.pp, cfg.m, cfg.virtual_stages
    mesh = DeviceMesh({"pp": pp, "dp": dp})
    b = ProgramBuilder(cfg.devices, name=f"{cfg.strategy} dp={dp} pp={pp} m={m} {cfg.schedule if pp > 1 else ''}".strip())
    stages = split_layers(cfg.n_layers, pp * v)
    schedule = make_schedule(cfg.schedule if pp > 1 or v > 1 else "1f1b", pp, m, v)
    optimizer = make_optimizer(cfg)
    group_of = {r: g for g in mesh.groups("dp") for r in g}
    sync = GradSync(b, cfg.model, group_of, None if cfg.bucket_mb is None else cfg.bucket_mb * 1e6,
                    cfg.grad_dtype, cfg.gradients_mean)
    mbs = cfg.microbatch_size
    rows_per_replica = cfg.batch_size // dp
    count = rows_per_replica * tokens_per_sample(cfg.model)
    feeds, loss_tensors, initial, param_home = [], {}, {}, {}
    for i in range(dp):
        ranks = tuple(mesh.group_of(mesh.rank_at({"pp": 0, "dp": i}), "pp"))
        Replica(b, cfg.model, stages, ranks, mbs, 1.0 / count, sync.ready).run_schedule(schedule)
        first, last = ranks[0], ranks[(len(stages) - 1) % pp]
        for j in range(m):
            a = i * rows_per_replica + j * mbs
            feeds.append((first, f"data/x/mb{j}", a, a + mbs, "x"))
            feeds.append((last, f"data/y/mb{j}", a, a + mbs, "y"))
        loss_tensors[last] = [f"out/loss/mb{j}" for j in range(m)]
    for r in range(cfg.devices):
        sync.finish(r)
        s = mesh.coord(r, "pp")
        held = [li for k in range(s, len(stages), pp) for li in stages[k]]
        emit_optimizer(b, r, held, cfg.model, optimizer)
        initial[r] = initial_state(cfg.model, held, optimizer, cfg.seed)
        if mesh.coord(r, "dp") == 0:
            for li in held:
                for n in layer_of(cfg.model, li).param_shapes():
                    param_home[(li, n)] = (r, param(li, n))
    return Compiled(cfg, b.build(), initial, feeds, param_home, loss_tensors, count * dp, mesh,
                    {"stages": stages, "schedule": schedule.name})
