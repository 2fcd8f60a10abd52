"""Compile data x pipeline (x tensor) parallel training to one Program, and what a run needs with it.

The devices form a mesh (pp, dp, tp), tensor fastest, then data, then pipeline (Megatron's order):
rank = (s * dp + i) * tp + t for pipeline stage s of replica i and tensor rank t. How a layer is
placed on the tp ranks is a `placement` (WholeLayers here for tp = 1; tensor_parallel.py shards
layers Megatron-style). Each replica runs the pipeline schedule on its micro-batches;
each stage's ranks AllReduce their gradients over the data-parallel group; every rank then updates
the parameters it holds. Single device, data parallel, layer-wise model parallel and pipeline
parallel are all this compiler with different degrees and schedules (see their own modules).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..mesh import DeviceMesh
from ..models import SGD, Adam, build_model
from ..program import Program, ProgramBuilder
from ..vocabulary import DEFAULT_BUCKET_MB
from .config import TrainConfig
from .emit import Replica, Stages, grad, param, run_bidirectional
from .grad_sync import GradSync
from .layer_kernels import layer_of, optimizer_state_names
from .schedule_check import parse_schedule, validate
from .schedule_registry import make_schedule
from .schedules_dualpipe import dualpipe
from .zero import ShardedReader, ZeroGroups, ZeroStage23, emit_zero_optimizer, shard_state


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
        """Rows a:b of x or y; a sixth entry, when present, picks the token positions (context
        parallelism gives each rank its chunks of every sequence)."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for rank, name, a, b, which, *cols in self.feeds:
            rows = (x if which == "x" else y)[a:b]
            out.setdefault(rank, {})[name] = rows[:, list(cols[0])] if cols and cols[0] is not None else rows
        return out


def tokens_per_sample(model_config) -> int:
    return getattr(model_config, "seq_len", 1)


def emit_optimizer(b: ProgramBuilder, rank: int, layers, config, optimizer, shapes: Callable | None = None) -> None:
    """opt/step += 1, then an elementwise update of every parameter this rank holds; free grads."""
    b.compute(rank, "increment", ["opt/step"], ["opt/step"], phase="optimizer", label="step += 1")
    states = optimizer_state_names(optimizer)
    for li in layers:
        for n, shape in (shapes or (lambda i: layer_of(config, i).param_shapes()))(li).items():
            st = [f"opt/{li}/{n}/{s}" for s in states]
            size = int(np.prod(shape))
            b.compute(rank, "opt_update", [param(li, n), grad(li, n), "opt/step", *st], [param(li, n), *st],
                      attrs={"optimizer": optimizer}, nbytes=8 * size * (3 + 2 * len(states)), flops=10 * size,
                      phase="optimizer", label=f"update {li}/{n}")
            b.free(rank, grad(li, n))


def initial_state(config, layers, optimizer, seed: int, shard: Callable | None = None) -> dict[str, np.ndarray]:
    """Parameters (cut by `shard(layer, name, value)` when given) and fresh optimizer state."""
    params = build_model(config).init_params(seed)
    out: dict[str, np.ndarray] = {"opt/step": np.zeros((), dtype=np.int64)}
    for li in layers:
        for n, value in params[li].items():
            value = shard(li, n, value) if shard else value
            out[param(li, n)] = value
            for s, v in optimizer.init_state(value).items():
                out[f"opt/{li}/{n}/{s}"] = v
    return out


@dataclass(frozen=True)
class WholeLayers:
    """The placement for tp = 1: every rank of a pipeline stage holds whole layers.
    A placement says which Replica emits a (replica, tensor rank) lane, the local shape of each
    parameter, how a full parameter is cut for tensor rank t, and how shards are read back."""

    model: object

    def replica(self, builder, t, mbs, scale, c: int = 0) -> Replica:
        return Replica(builder, self.model, mbs, scale)

    def positions(self, c: int) -> tuple[int, ...] | None:
        """Token positions of context rank c (None: whole sequences)."""
        return None

    def shapes(self, li: int) -> dict:
        return layer_of(self.model, li).param_shapes()

    def shard(self, li: int, name: str, value: np.ndarray, t: int, rank: int = 0) -> np.ndarray:
        """Rank `rank`'s part of a full parameter (tensor rank t)."""
        return value

    def gather(self, homes: dict) -> Callable | None:
        return None


def pipeline_schedule(cfg: TrainConfig):
    """The configured schedule, or the user's hand-written one (`cfg.schedule_text`, one line per
    stage, e.g. "F0 F1 BW0 BW1"), validated: a broken dependency is refused by name."""
    if cfg.schedule_text is None and cfg.schedule == "dualpipe" and cfg.pp > 1:
        return dualpipe(cfg.pp, cfg.m)
    if cfg.schedule_text is None:
        return make_schedule(cfg.schedule if cfg.pp > 1 or cfg.virtual_stages > 1 else "1f1b", cfg.pp, cfg.m,
                             cfg.virtual_stages)
    sched = parse_schedule(cfg.schedule_text, v=cfg.virtual_stages)
    if (sched.p, sched.m) != (cfg.pp, cfg.m):
        raise ParasimError(f"the hand-written schedule has {sched.p} stages and {sched.m} micro-batches, "
                           f"the configuration {cfg.pp} stages and {cfg.m} micro-batches")
    validate(sched)
    return sched


def grad_groups(mesh: DeviceMesh, bidirectional: bool) -> dict[int, tuple[int, ...]]:
    """rank -> the ranks its gradients are reduced over: data and context ranks alike (Megatron
    reduces over dp x cp), and under DualPipe the two model copies too (device d and its mirror
    p-1-d hold the same stages)."""
    group_of = {r: g for g in mesh.groups(("dp", "cp")) for r in g}
    if bidirectional:
        pp = mesh.axes["pp"]
        mirror = {r: mesh.rank_at({**dict(zip(mesh.axis_names, mesh.coords(r))), "pp": pp - 1 - mesh.coord(r, "pp")}) for r in group_of}
        group_of = {r: tuple(sorted(set(g) | {mirror[x] for x in g})) for r, g in group_of.items()}
    return group_of


def parallelize(placement, builder: ProgramBuilder, t: int, c: int, mbs: int, scale: float, zero: int,
                zgroups: ZeroGroups, sync: GradSync):
    """The layer emitter of the lane (tensor rank t, context rank c), its transforms applied in a
    fixed order: the placement's lane (emit.Replica for whole layers, lane.ShardedLane for any
    tp x sp x cp: a layer with steps runs them through block_lane.lane_items' TP/SP then CP
    transforms), expert parallelism around it for MoE blocks (expert_parallel.ExpertLane: EP after
    TP and CP), then ZeRO-2/3 around each layer (zero.py). The pipeline stage split (emit.Stages)
    then drives it through the schedule."""
    lane = placement.replica(builder, t, mbs, scale, c=c)
    if zero >= 2:
        lane = ZeroStage23(lane, zero, zgroups, placement.shapes, sync)
    return lane


def compile_replicated(cfg: TrainConfig, placement=None) -> Compiled:
    cfg = cfg.resolved()
    dp, cp, pp, tp, m, v = cfg.dp, cfg.cp, cfg.pp, cfg.tp, cfg.m, cfg.virtual_stages
    placement = placement or WholeLayers(cfg.model)
    mesh = cfg.attention_mesh  # Megatron's order: tensor fastest (ep folded into dp)
    tps = (f" cp={cp}" if cp > 1 else "") + (f" tp={tp}" if tp > 1 else "")
    b = ProgramBuilder(cfg.devices, name=f"{cfg.strategy} dp={dp}{tps} pp={pp} m={m} {cfg.schedule if pp > 1 else ''}".strip())
    stages = split_layers(cfg.n_layers, pp * v)
    schedule = pipeline_schedule(cfg)
    optimizer = make_optimizer(cfg)
    group_of = grad_groups(mesh, schedule.bidirectional)
    # ZeRO over the data x context axes: stage 1 is Megatron's distributed optimizer; stages 2-3 (no
    # pipeline, TrainConfig refuses it) gather and scatter around every layer (zero.py)
    zero = cfg.zero_stage if dp * cp > 1 else 0
    if zero and cfg.grad_dtype != "float64":
        raise ParasimError(f"ZeRO-{zero} here reduce-scatters float64 gradients into the pieces its optimizer "
                           f"updates: drop --grad-dtype {cfg.grad_dtype}")
    zgroups = ZeroGroups(group_of, getattr(placement, "grad_group", None), cfg.gradients_mean)
    # buckets of bucket_mb reduced under the backward; without it the default size after the backward
    sync = GradSync(b, cfg.model, group_of, (cfg.bucket_mb or DEFAULT_BUCKET_MB) * 1e6,
                    cfg.bucket_mb is not None, cfg.grad_dtype, cfg.gradients_mean, shapes=placement.shapes,
                    grad_group=getattr(placement, "grad_group", None), zero=zero)
    # ZeRO-2/3 reduce at every micro-batch: the lane's transform hands the gradients over (zero.ZeroStage23)
    ready = (lambda rank, layer: None) if zero >= 2 else sync.ready
    mbs = cfg.micro_batch_size
    rows_per_replica = cfg.global_batch // dp
    count = rows_per_replica * tokens_per_sample(cfg.model)
    # each cp rank's loss is scaled by cp so that the mean over dp x cp ranks is the replica mean
    copies = 2 if schedule.bidirectional else 1
    scale = (cp * copies if cfg.gradients_mean else 1) / count
    feeds, loss_tensors, initial, param_home, homes = [], {}, {}, {}, {}
    lanes: list = []                   # every lane emitted (their `finish_step`)
    for i, c, t in itertools.product(range(dp), range(cp), range(tp)):
        # every tensor (and context) rank runs the same schedule: their collectives match
        ranks = tuple(mesh.rank_at({"pp": s, "dp": i, "ep": 0, "cp": c, "tp": t}) for s in range(pp))
        lane = parallelize(placement, b, t, c, mbs, scale, zero, zgroups, sync)
        lanes.append(lane)
        if schedule.bidirectional:  # DualPipe: a second model copy on the mirrored ranks
            mirror = parallelize(placement, b, t, c, mbs, scale, zero, zgroups, sync)
            lanes.append(mirror)
            run_bidirectional(schedule, Stages(lane, stages, ranks, ready), Stages(mirror, stages, ranks[::-1], ready))
        else:
            Stages(lane, stages, ranks, ready).run_schedule(schedule)
        cols = placement.positions(c)
        for j in range(m):
            # the first half of the micro-batches enters at ranks[0]; under DualPipe the rest at ranks[-1]
            up = schedule.bidirectional and j >= m // 2
            first, last = (ranks[-1], ranks[0]) if up else (ranks[0], ranks[schedule.stage_devices[-1]])
            a = i * rows_per_replica + j * mbs
            feeds.append((first, f"data/x/mb{j}", a, a + mbs, "x", cols))
            feeds.append((last, f"data/y/mb{j}", a, a + mbs, "y", cols))
            if t == 0:
                loss_tensors.setdefault(last, []).append(f"out/loss/mb{j}")
    for r in range(cfg.devices):
        _finish_grads(sync, lanes, r)
        s, t = mesh.coord(r, "pp"), mesh.coord(r, "tp")
        held = [li for k in sorted(set(schedule.stage_map[s])) for li in stages[k]]
        # the copy read back: DualPipe's first (device s holds stage s of both copies' stages s, p-1-s)
        home = list(stages[s]) if schedule.bidirectional else held
        initial[r] = initial_state(cfg.model, held, optimizer, cfg.seed,
                                   lambda li, n, value, t=t, r=r: placement.shard(li, n, value, t, r))
        if zero:
            emit_zero_optimizer(b, r, held, placement.shapes, optimizer, zgroups, zero)
            initial[r] = shard_state(initial[r], zero, lambda li, n, r=r: _part(zgroups.of(r, li, n)[0], r))
        else:
            emit_optimizer(b, r, held, cfg.model, optimizer, placement.shapes)
        if mesh.coord(r, "dp") == 0 and mesh.coord(r, "cp") == 0:
            for li in home:
                for n in layer_of(cfg.model, li).param_shapes():
                    homes.setdefault((li, n), []).append((r, param(li, n)))  # in tensor-rank order
                    if t == 0:
                        param_home[(li, n)] = (r, param(li, n))
    read = placement.gather(homes)
    if zero == 3:  # parameters live as shards: the read-back gathers them
        read = _sharded_read(read, param_home, zgroups, placement.shapes)
    return Compiled(cfg, b.build(), initial, feeds, param_home, loss_tensors, count * dp, mesh,
                    {"stages": stages, "schedule": schedule.name if pp > 1 or v > 1 else None, "zero": cfg.zero_stage,
                     "zero_groups": zgroups if zero else None}, read)


def _finish_grads(sync: GradSync, lanes: list, r: int) -> None:
    """Rank r's gradients after the schedule: the data-parallel synchronisation, then what each lane
    completes after it (sequence parallelism's partial gradients, `Replica.finish_step`). Under ZeRO
    the partial gradients are summed first, while they are whole: the reduce-scatter leaves only
    this rank's pieces (Megatron-LM sums them after it, in its full gradient buffer)."""
    if sync.zero:
        for lane in lanes:
            lane.finish_step(r)
    sync.finish(r)
    if not sync.zero:
        for lane in lanes:
            lane.finish_step(r)


def _part(group: tuple[int, ...], rank: int) -> tuple[int, int]:
    return len(group), group.index(rank)


def _sharded_read(read: Callable | None, param_home: dict, groups: ZeroGroups, shapes: Callable) -> Callable:
    """The placement's read-back (or param_home's) through a runtime whose fetch gathers stage-3 shards."""
    def gather(runtime) -> list[dict]:
        proxy = ShardedReader(runtime, groups, shapes)
        if read is not None:
            return read(proxy)
        out: list[dict] = [dict() for _ in range(1 + max(li for li, _ in param_home))]
        for (li, n), (rank, tensor) in param_home.items():
            out[li][n] = proxy.fetch(rank, [tensor])[tensor]
        return out

    return gather
