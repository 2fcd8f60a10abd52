"""ZeRO stages 1-3, the one ZeRO compiler (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", Sec. 5 and 7): Megatron-LM's distributed optimizer
(stage 1) and DeepSpeed's stages 2 and 3, on the lanes of any data / pipeline / tensor / context /
expert run (strategies zero1-3 are this with one stage and one tensor rank).

Every gradient is sharded over the ranks that hold the same (tensor-parallel shard of the)
parameter and see different tokens: the data x context group of its rank for a dense parameter,
and, in a mixture-of-experts model, the expert-data group (dp x cp / ep ranks holding the same
experts) for an expert parameter, whose gradient is summed there and scaled by 1 / (dp x cp) as
without ZeRO (Megatron-Core's distributed optimizer keeps separate buffers for the dense and the
expert parameters, each sharded over its own data-parallel group). Rank i of a group of N owns the
elements np.array_split(flat, N)[i] of the flattened tensor (uneven sizes: the first size % N
ranks hold one more).

Collectives cover a bucket or a layer, not a tensor (one plan with the scale program, tests/
test_one_compiler.py): a gradient bucket of `grad_sync.GradSync` is ReduceScattered in one
coalesced collective (`scatter_bucket`; its `counts` give each rank its piece of every tensor,
DeepSpeed's reduce_scatter_coalesced without the padding), parameters are AllGathered the same way
(`gather_params`).

  stage 1 (P_os):   after backward each bucket is ReduceScattered, rank i updates its pieces with
                    its pieces of the optimizer state, and the pieces are AllGathered in one
                    collective (2 Psi moved).
  stage 2 (P_os+g): as 1, but the buckets are ReduceScattered at every micro-batch (DeepSpeed),
                    the open one when the micro-batch's backward ends; only the pieces are kept.
  stage 3 (P_os+g+p): parameters are kept as pieces (param/{layer}/{name}/own); a layer's are
                    AllGathered before its forward and again before its backward, and freed after
                    (3 Psi moved: two AllGathers + one ReduceScatter).

Model-state bytes per device with Psi parameters (paper, Fig. 1: 2 + 2 + K with K = 12 in mixed
precision). Here everything is float64 and the optimizer is Adam: 8 (param) + 8 (grad) + K = 16
(m and v), so stage 0: 32 Psi; 1: 16 Psi + 16 Psi/N_d; 2: 8 Psi + 24 Psi/N_d; 3: 32 Psi/N_d
(`simulator.model_states.model_state_bytes(Psi, N_d, stage, "fp64")`, the formula's one home).
The ring sends exactly (N_d - 1)/N_d of the volumes above. DeepSpeed refuses ZeRO-2/3 with
pipeline parallelism (its PipelineEngine asserts stage < 2): so does TrainConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..model_states import model_state_bytes
from ..models import build_model
from ..ops import kernel
from ..program import Collective, ProgramBuilder
from .emit import grad, param
from .layer_kernels import layer_of, optimizer_state_names

F64 = 8




def shard_sizes(size: int, parts: int) -> list[int]:
    """Element counts of np.array_split(range(size), parts)."""
    q, r = divmod(size, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def own(tensor: str) -> str:
    """Stage 3: the name under which a rank keeps its shard of a parameter."""
    return f"{tensor}/own"


@dataclass(frozen=True)
class ZeroGroups:
    """The group (and reduction) of every gradient: `group_of[rank]` (data x context) for dense
    parameters; `expert_group(rank, grad tensor, dense group)` -> (group, factor) for expert ones."""

    group_of: dict
    expert_group: Callable | None = None
    mean: bool = True

    def of(self, r: int, li: int, n: str) -> tuple[tuple[int, ...], str, float]:
        """(group, reduce op, factor applied after the reduction)."""
        dense = self.group_of[r]
        other = self.expert_group and self.expert_group(r, grad(li, n), dense)
        if other:
            return other[0], "sum", other[1]
        return dense, "mean" if self.mean else "sum", 1.0


def coalesced_counts(sizes, parts: int) -> tuple[int, ...]:
    """Elements member i keeps of a coalesced reduce-scatter (or sends in a coalesced all-gather) of
    tensors of `sizes` elements, each split over `parts` members on its own."""
    return tuple(sum(shard_sizes(n, parts)[i] for n in sizes) for i in range(parts))


def scatter_bucket(b: ProgramBuilder, r: int, name: str, entries: list, group_factor: tuple, mean: bool,
                   blocking: bool, stage: int, accumulate: bool) -> None:
    """ReduceScatter one gradient bucket (`grad_sync.GradSync`'s (tensor, shape) entries) over its group
    in one coalesced collective: `shard_pack` orders the elements member by member, each tensor split
    on its own, so the collective's `counts` hand every member its `shard_sizes` piece of every tensor.
    Dense gradients (factor None) are averaged (summed when not `mean`); expert ones are summed over
    their expert-data group, then scaled. Stage 1 keeps each piece flat under the gradient's own name;
    stages 2-3 under `{grad}/shard`, adding a later micro-batch's (`accumulate`)."""
    group, factor = group_factor
    n, me = len(group), group.index(r)
    tensors = [t for t, _ in entries]
    sizes = [int(np.prod(s)) for _, s in entries]
    b.compute(r, "shard_pack", tensors, [name], attrs={"parts": n}, phase="other", label=f"pack {name}")
    b.free(r, *tensors)
    if n > 1:
        op = "sum" if factor is not None or not mean else "mean"
        b.add(r, Collective("reduce_scatter", name, name, group, op=op, axis=None, nbytes=F64 * sum(sizes),
                            blocking=blocking, tag=name, counts=coalesced_counts(sizes, n)))
    if factor not in (None, 1.0):
        b.compute(r, "scale", [name], [name], attrs={"factor": factor}, phase="other", label=f"{name} x {factor:.4g}")
    keep = tensors if stage == 1 else [f"{t}/{'mb' if accumulate else 'shard'}" for t in tensors]
    b.compute(r, "unflatten", [name], keep, attrs={"shapes": tuple((shard_sizes(k, n)[me],) for k in sizes)},
              phase="other", label=f"unpack {name}")
    b.free(r, name)
    if stage >= 2 and accumulate:
        for t, mb in zip(tensors, keep):
            b.compute(r, "add", [f"{t}/shard", mb], [f"{t}/shard"], phase="other", label=f"acc {t}")
            b.free(r, mb)


def gather_params(b: ProgramBuilder, r: int, groups: "ZeroGroups", items: list, src: Callable, tag: str,
                  microbatch: int | None = None) -> None:
    """AllGather parameters from their pieces `src(name)` in one coalesced collective per group
    (dense, then each expert-data group): the pieces concatenated, gathered member by member, and
    put back in place by `shard_unpack`. items: (layer, name, shape)."""
    by_group: dict = {}
    for li, n, shape in items:
        by_group.setdefault(groups.of(r, li, n)[0], []).append((param(li, n), shape))
    for k, (group, ents) in enumerate(by_group.items()):
        names, shapes = [p for p, _ in ents], tuple(tuple(s) for _, s in ents)
        flat = f"{tag}/gather{k}"
        b.compute(r, "flatten", [src(p) for p in names], [flat], phase="other", label=f"pack {flat}")
        if len(group) > 1:
            mine = coalesced_counts([int(np.prod(s)) for s in shapes], len(group))[group.index(r)]
            b.add(r, Collective("all_gather", flat, flat, group, nbytes=F64 * mine, tag=tag, microbatch=microbatch))
        b.compute(r, "shard_unpack", [flat], names, attrs={"shapes": shapes, "parts": len(group)}, phase="other",
                  label=f"unpack {flat}")
        b.free(r, flat)


def emit_zero_optimizer(b: ProgramBuilder, rank: int, layers, shapes: Callable, optimizer, groups: ZeroGroups,
                        stage: int) -> None:
    """The optimizer step of one rank, on its gradient pieces (`scatter_bucket`): stages 1-2 update
    this rank's piece of every full parameter, then AllGather the pieces (one coalesced collective
    per group, as the scale program's one parameter gather); stage 3 updates its parameter shard
    in place."""
    b.compute(rank, "increment", ["opt/step"], ["opt/step"], phase="optimizer", label="step += 1")
    states = optimizer_state_names(optimizer)
    items = [(li, n, shape) for li in reversed(list(layers)) for n, shape in shapes(li).items()]
    for li, n, shape in items:
        size = int(np.prod(shape))
        group, _, _ = groups.of(rank, li, n)
        i, n_d = group.index(rank), len(group)
        mine = shard_sizes(size, n_d)[i]
        g, st = grad(li, n), [f"opt/{li}/{n}/{s}" for s in states]
        flat = g if stage == 1 else f"{g}/shard"
        kw = dict(nbytes=F64 * mine * (3 + 2 * len(st)), flops=10 * mine, phase="optimizer")
        if stage == 3:
            b.compute(rank, "opt_update", [own(param(li, n)), flat, "opt/step", *st], [own(param(li, n)), *st],
                      attrs={"optimizer": optimizer}, label=f"update {li}/{n} shard", **kw)
            b.free(rank, flat)
            continue
        b.compute(rank, "zero_shard_update", [param(li, n), flat, "opt/step", *st], [slice_of(param(li, n)), *st],
                  attrs={"optimizer": optimizer, "parts": n_d, "index": i}, label=f"update {li}/{n} slice", **kw)
        b.free(rank, flat)
    if stage < 3:
        gather_params(b, rank, groups, items, slice_of, "zag")
        b.free(rank, *(slice_of(param(li, n)) for li, n, _ in items))


def slice_of(tensor: str) -> str:
    """Stages 1-2: the name of a rank's updated piece of a parameter, before the gather."""
    return f"{tensor}/slice"


def shard_state(state: dict[str, np.ndarray], stage: int, part_of: Callable) -> dict[str, np.ndarray]:
    """This rank's flat slice of every optimizer-state array (and, stage 3, of every parameter, kept
    under `own(name)`); part_of(layer, name) -> (parts, index)."""
    out = {}
    for k, v in state.items():
        if k == "opt/step" or not k.startswith(("opt/", "param/")) or (k.startswith("param/") and stage < 3):
            out[k] = v
            continue
        _, li, n = k.split("/")[:3]
        parts, index = part_of(int(li), n)
        out[own(k) if k.startswith("param/") else k] = np.array_split(np.ravel(v), parts)[index].copy()
    return out


class ShardedReader:
    """A runtime seen through stage-3 shards: fetch(rank, [param names]) AllGathers each from its
    group's `own` shards (what the placements' read-back asks for)."""

    def __init__(self, runtime, groups: ZeroGroups, shapes: Callable):
        self.runtime, self.groups, self.shapes = runtime, groups, shapes

    def fetch(self, rank: int, names) -> dict:
        out = {}
        for name in names:
            _, li, n = name.split("/")[:3]
            group, _, _ = self.groups.of(rank, int(li), n)
            parts = [self.runtime.fetch(m, [own(name)])[own(name)] for m in group]
            out[name] = np.concatenate(parts).reshape(self.shapes(int(li))[n])
        return out


class ZeroStage23:
    """The ZeRO-2/3 transform of a lane's layer emitter (pipelines are refused): stage 3 gathers a
    layer's parameters around its forward and its backward (one coalesced collective per group,
    `gather_params`) and frees them after; stages 2-3 hand each micro-batch's gradients to the
    bucket plan (`grad_sync.GradSync`, zero mode) as the layer's backward produces them, which
    reduce-scatters a bucket when it is full and the rest when the micro-batch's backward ends
    (layer 0, the embedding). Everything else is the inner emitter's."""

    def __init__(self, inner, stage: int, groups: ZeroGroups, shapes: Callable, sync):
        self.inner, self.stage, self.groups, self.shapes, self.sync = inner, stage, groups, shapes, sync

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _gather_params(self, r: int, li: int, tag: str, j: int) -> None:
        if self.stage == 3:
            items = [(li, n, shape) for n, shape in self.shapes(li).items()]
            gather_params(self.inner.builder, r, self.groups, items, own, f"{tag}:{li}", j)

    def _release_params(self, r: int, li: int) -> None:
        if self.stage == 3:
            self.inner.builder.free(r, *(param(li, n) for n in self.shapes(li)))

    def emit_layer_forward(self, r, li, x, y, j):
        self._gather_params(r, li, f"zagf{j}", j)
        self.inner.emit_layer_forward(r, li, x, y, j)
        self._release_params(r, li)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        self._gather_params(r, li, f"zagb{j}", j)
        self.inner.emit_layer_backward(r, li, dy, dx, j, False)
        self._release_params(r, li)
        self.sync.ready(r, li)
        if li == 0:          # the micro-batch's backward ends with the embedding
            self.sync.microbatch_done(r, accumulate=True)

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        raise ParasimError(f"ZeRO-{self.stage} scatters each layer's gradients as its backward produces them; a "
                           f"schedule that splits backward into B and W (zero-bubble) cannot run with it")

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        self.emit_layer_backward_input(r, li, None, None, j)


@kernel("zero_shard_update")
def zero_shard_update(param, grad_shard, step, *state, optimizer, parts: int, index: int):
    """Stages 1 and 2: (full flat param, grad shard, step, state shards...) -> (param shard, states...).
    Updates only this rank's 1/N_d of the elements (Adam and SGD are elementwise)."""
    shard = np.array_split(np.ravel(param), parts)[index]
    names = sorted(optimizer.init_state(np.zeros(1)))
    new_p, new_state = optimizer.update(shard, grad_shard, dict(zip(names, state)), int(step))
    return (new_p,) + tuple(new_state[n] for n in names)


@kernel("shard_pack")
def shard_pack(*arrays, parts: int):
    """The elements of `arrays` member by member: for i < parts, np.array_split(ravel(a), parts)[i]
    of every array in turn (the input of a coalesced reduce-scatter, `scatter_bucket`)."""
    pieces = [np.array_split(np.ravel(a), parts) for a in arrays]
    return np.concatenate([p[i] for i in range(parts) for p in pieces])


@kernel("shard_unpack")
def shard_unpack(flat, shapes: tuple, parts: int):
    """The inverse of `shard_pack`: a coalesced all-gather's result (each member's pieces of every
    tensor, member by member) put back into the tensors of `shapes`."""
    sizes = [int(np.prod(s)) for s in shapes]
    counts = [shard_sizes(n, parts) for n in sizes]
    flat, pieces, at = np.ravel(flat), [[] for _ in shapes], 0
    for i in range(parts):
        for t, c in enumerate(counts):
            pieces[t].append(flat[at:at + c[i]])
            at += c[i]
    return tuple(np.concatenate(p).reshape(s) for p, s in zip(pieces, shapes))


def model_state_formula_bytes(psi: float, dp: int, stage: int, p: int = 8, g: int = 8, k: int = 16) -> float:
    """ZeRO per-device model states (paper, Sec. 5): stage 0 (p+g+k) Psi; 1 (p+g) Psi + k Psi/N_d;
    2 p Psi + (g+k) Psi/N_d; 3 (p+g+k) Psi/N_d. Defaults: float64 Adam, 8 + 8 + 16
    (`simulator.model_states`, the one home of the formula)."""
    return model_state_bytes(psi, dp, stage, (p, g, k))


def expected_model_state_bytes(config, dp: int, stage: int, rank: int, state_arrays: int = 2) -> dict[str, int]:
    """Exact bytes rank `rank` should hold, with this module's np.array_split shards:
    param 8 x (Psi or own shard from stage 3), grad 8 x (Psi, or own shard from stage 2),
    opt 8 x state_arrays x (Psi, or own shard from stage 1) + 8 (the int64 step counter)."""
    sizes = [int(np.prod(s)) for li in range(len(build_model(config).layers)) for s in layer_of(config, li).param_shapes().values()]
    psi, own = sum(sizes), sum(shard_sizes(n, dp)[rank] for n in sizes)
    return {"param": F64 * (psi if stage < 3 else own), "grad": F64 * (psi if stage < 2 else own),
            "opt": F64 * state_arrays * (psi if stage < 1 else own) + 8}


def model_state_report(program, memory) -> list[dict[str, int]]:
    """Measured model states per rank from a real run's samples (memory[rank][index] = {category:
    bytes}, RunResult.memory): param and opt at the end of the step (between steps), grad_peak the
    most gradient bytes at any moment, grad_at_update the gradient bytes when the optimizer starts."""
    out = []
    for r, samples in enumerate(memory):
        last = samples[max(samples)]
        start = next(i for i, ins in enumerate(program.code[r]) if getattr(ins, "op", None) == "increment")
        out.append({"param": last["param"], "opt": last["opt"], "grad_end": last["grad"],
                    "grad_peak": max(s["grad"] for s in samples.values()), "grad_at_update": samples[start]["grad"]})
    return out
