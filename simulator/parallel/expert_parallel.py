"""Expert parallelism inside the 5-D mesh: dp x cp x tp x pp with the experts of every MoE block
spread over ep ranks carved from the dp x cp ranks (Megatron-LM's MoE parallel folding: the
attention layers see the mesh (pp, dp, cp, tp), the expert layers the same devices as
(pp, edp, ep, tp) with edp = dp cp / ep; DeviceMesh.megatron_experts).

    8 devices, dp=2, cp=2, tp=2, ep=2:  context groups (0,2) (1,3) (4,6) (5,7)
                                        expert groups  (0,2) (1,3) (4,6) (5,7)   AllToAll dispatch/combine
                                        expert-data groups (0,4) (1,5) (2,6) (3,7)  expert gradients
                                        data x context groups (0,2,4,6) (1,3,5,7)   every other gradient

Rank r holds experts [e E/ep, (e+1) E/ep) of every MoE block, e = its coordinate on the ep axis.
Gradients: the dense parameters are averaged over data x context as without experts; an expert's
gradient already sums the tokens of its whole expert group (the AllToAll brought them), so it is
summed over the expert-data group only, then divided by the data x context size (the mean over
replicas). The strategy "ep" is this compiler with dp = devices by default (GShard's layout:
every device a data-parallel rank, consecutive blocks of ep ranks sharing the experts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..mesh import DeviceMesh
from .block_lane import emit_backward, emit_forward, lane_items
from .bw_split import SplitBackward
from .config import TrainConfig
from .context_parallel import ContextParallel, ContextTensorParallel
from .emit import param
from .experts import EXPERT_PARAMS, MoEBlock, MoEGPTConfig
from .layer_kernels import layer_of, optimizer_state_names
from .replicated import Compiled, WholeLayers, compile_replicated, make_optimizer
from .tensor_parallel import TensorParallel, check_tensor_parallel


class ExpertLane(SplitBackward):
    """The expert-parallel transform of a lane's layer emitter (as zero.ZeroStage23 is ZeRO's): a
    MoE block runs as its steps (models/moe_steps.moe_block) through the lane's transforms in their
    fixed order (block_lane.lane_items: TP, CP, then EP's dispatch / combine all-to-all over
    `ep_group_of[rank]`) by block_lane's one emitter, and its routing counts are added into
    out/moe/{layer}; every other layer is the inner lane's. Under zero-bubble schedules the block's
    B and W split as every block's (bw_split.py), in one queue with the inner lane's (the context-
    parallel attention's kernels), so W runs in B's order."""

    def __init__(self, inner, ep_group_of: dict, ep: int):
        self.inner, self.ep_group_of, self.ep = inner, ep_group_of, ep
        self.__dict__["_deferred"] = inner.__dict__.setdefault("_deferred", {})

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _names(self, li, j):
        names = getattr(self.inner, "_names", None)
        return names(li, j) if names else (f"act/cache/{li}/mb{j}", f"act/tp/{li}/mb{j}")

    def _items(self, lyr) -> tuple:
        lane, cp = self.inner, getattr(self.inner, "cp", 1)
        local = lyr.group_capacity if cp > 1 and lyr.routing_groups == cp else 0    # a group per rank
        routing = (sum(lane.positions, ()), tuple(lane.positions[lane.c]), lane.config.seq_len // cp) \
            if cp > 1 and not local else ()
        return lane_items(lyr.steps, getattr(lane, "tp", 1), getattr(lane, "sp", False),
                          getattr(lane, "cp_attention", False), self.ep, routing, local_capacity=local)

    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, MoEBlock):
            return self.inner.emit_layer_forward(r, li, x, y, j)
        stats = f"act/moe/{li}/mb{j}/stats"
        emit_forward(self, r, li, lyr, self._items(lyr), {"x": x}, {"y": y, "stats": stats}, j)
        self.builder.compute(r, "add", [f"out/moe/{li}", stats], [f"out/moe/{li}"], phase="other", label="count")
        self.builder.free(r, stats)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        lyr = layer_of(self.config, li)
        if not isinstance(lyr, MoEBlock):
            return self.inner.emit_layer_backward(r, li, dy, dx, j, accumulate)
        out = dx or f"act/moe/{li}/mb{j}/dx"
        emit_backward(self, r, li, lyr, self._items(lyr), {"y": dy}, {"x": out}, j, accumulate)
        self.builder.free(r, *([] if dx else [out]))

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        if not isinstance(layer_of(self.config, li), MoEBlock):
            return self.inner.emit_layer_backward_input(r, li, dy, dx, j)
        self.inner._splitting = True  # the context-parallel attention's kernels split too
        try:
            self.split_backward_input(r, li, dy, dx, j)
        finally:
            self.inner._splitting = False

    def emit_layer_backward_weight(self, r, li, j, accumulate):
        if not isinstance(layer_of(self.config, li), MoEBlock):
            return self.inner.emit_layer_backward_weight(r, li, j, accumulate)
        self.split_backward_weight(r, li, j, accumulate)


def is_moe(config, li: int) -> bool:
    return isinstance(layer_of(config, li), MoEBlock)


def is_expert(config, li: int, name: str) -> bool:
    return name in EXPERT_PARAMS and is_moe(config, li)


class ExpertRows:
    """The block of an expert tensor (experts along dim 0) a rank holds: experts [e E/ep, (e+1) E/ep)
    with e = index_of[rank] (its coordinate on the ep axis)."""

    def __init__(self, ep: int, index_of: dict[int, int]):
        self.ep, self.index_of = ep, index_of

    def block_slices(self, rank: int, global_shape) -> tuple[slice, ...]:
        e, c = global_shape[0] // self.ep, self.index_of[rank]
        return (slice(c * e, (c + 1) * e),) + tuple(slice(0, n) for n in global_shape[1:])


@dataclass(frozen=True)
class Experts:
    """A placement (replicated.WholeLayers' interface) wrapping the attention layers' placement
    `inner`: MoE blocks emit through ExpertLane, expert tensors are cut over the ep axis."""

    inner: object
    cfg: TrainConfig  # resolved

    @property
    def mesh(self) -> DeviceMesh:
        c = self.cfg
        return DeviceMesh.megatron_experts(tp=c.tp, cp=c.cp, ep=c.ep, dp=c.dp, pp=c.pp)

    @property
    def ep_group_of(self) -> dict[int, tuple[int, ...]]:
        return {r: g for g in self.mesh.groups("ep") for r in g}

    @property
    def index_of(self) -> dict[int, int]:
        mesh = self.mesh
        return {r: mesh.coord(r, "ep") for r in mesh.ranks}

    def replica(self, builder, t, mbs, scale, c: int = 0) -> ExpertLane:
        return ExpertLane(self.inner.replica(builder, t, mbs, scale, c=c), self.ep_group_of, self.cfg.ep)

    def positions(self, c: int):
        return self.inner.positions(c)

    def shapes(self, li: int) -> dict:
        out = dict(self.inner.shapes(li))
        for n, s in layer_of(self.cfg.model, li).param_shapes().items():
            if is_expert(self.cfg.model, li, n):
                out[n] = (s[0] // self.cfg.ep,) + tuple(s[1:])
        return out

    def shard(self, li: int, name: str, value: np.ndarray, t: int, rank: int = 0) -> np.ndarray:
        """An expert tensor's experts [e E/ep, (e+1) E/ep), e = the rank's ep coordinate; the rest as
        the inner placement cuts them."""
        if not is_expert(self.cfg.model, li, name):
            return self.inner.shard(li, name, value, t, rank)
        e_loc = value.shape[0] // self.cfg.ep
        return value[self.index_of[rank] * e_loc:(self.index_of[rank] + 1) * e_loc].copy()

    def gather(self, homes: dict):
        """Dense tensors as the inner placement reads them; experts concatenated over the ep axis."""
        model, mesh = self.cfg.model, self.mesh
        dense = {k: v for k, v in homes.items() if not is_expert(model, *k)}
        inner = self.inner.gather(dense)

        def read(runtime) -> list[dict]:
            out = inner(runtime) if inner else [dict() for _ in range(1 + max(li for li, _ in homes))]
            for (li, n), places in homes.items():
                if inner is None and not is_expert(model, li, n):
                    out[li][n] = runtime.fetch(places[0][0], [places[0][1]])[places[0][1]]
                elif is_expert(model, li, n):
                    s = mesh.coord(places[0][0], "pp")
                    owners = [mesh.rank_at({"pp": s, "edp": 0, "ep": e, "tp": 0}) for e in range(self.cfg.ep)]
                    out[li][n] = np.concatenate([runtime.fetch(o, [param(li, n)])[param(li, n)] for o in owners])
            return out

        return read

    def grad_group(self, rank: int, tensor: str, dense: tuple[int, ...]):
        """(group, factor) for an expert gradient: summed over the ranks of `dense` (data x context,
        and DualPipe's mirror copies) that hold the same experts, then scaled by 1/len(dense) when
        averaging; None for every other gradient (averaged over `dense`)."""
        _, li, name = tensor.split("/")[:3]
        if not is_expert(self.cfg.model, int(li), name):
            return None
        index = self.index_of
        group = tuple(x for x in dense if index[x] == index[rank])
        return group, (1.0 / len(dense) if self.cfg.gradients_mean else 1.0)


def expert_bytes_per_step(model: MoEGPTConfig, microbatch: int, microbatches: int, ep: int, cp: int = 1) -> dict:
    """Bytes one rank sends per training step for the MoE blocks it holds, per collective (float64).

    AllToAll: per MoE block and micro-batch, dispatch and combine forward and both again backward,
    each of the (E, B C, h) slot buffer (GShard, Lepikhin et al. 2020, Sec. 2.2 and Algorithm 2:
    dispatch and combine AllToAlls of the (E, C, M) tensor), of which (ep - 1)/ep leaves the rank:
    4 x 8 E B C h (ep - 1)/ep, i.e. about 32 cf k h (ep - 1)/ep bytes per token per layer
    (E C = cf k s). Every cp rank of a sequence sends the whole slot buffer (its own tokens' slots
    filled) so that the capacity slots are those of one device: the per-token cost grows by cp.
    AllGather (cp > 1): the k expert choices of the rank's s/cp tokens, (cp - 1) x 8 B (s/cp) k."""
    blocks = sum(1 for lyr in model.build_layers() if isinstance(lyr, MoEBlock))
    lyr = next(lyr for lyr in model.build_layers() if isinstance(lyr, MoEBlock))
    buf = 8 * lyr.experts * microbatch * lyr.capacity * lyr.hidden
    out = {"all_to_all": blocks * microbatches * 4 * buf * (ep - 1) // ep}
    if cp > 1:
        out["all_gather"] = blocks * microbatches * (cp - 1) * 8 * microbatch * (model.seq_len // cp) * lyr.top_k
    return out


def _inner_placement(cfg: TrainConfig):
    if cfg.tp > 1:
        check_tensor_parallel(cfg, sp=False)
        return ContextTensorParallel(cfg) if cfg.cp > 1 else TensorParallel(cfg)
    return ContextParallel(cfg.model, cfg) if cfg.cp > 1 else WholeLayers(cfg.model)


def compile_experts(cfg: TrainConfig) -> Compiled:
    """A mixture-of-experts model on the 5-D mesh (any dp, cp, tp, pp; ep | experts and ep | dp cp)."""
    cfg = cfg.resolved()
    model = cfg.model
    if not isinstance(model, MoEGPTConfig):
        raise ParasimError(f"expert parallelism needs a mixture-of-experts model (MoEGPTConfig), got {model!r}")
    placement = Experts(_inner_placement(cfg), cfg)
    compiled = compile_replicated(cfg, placement)
    ep, index = cfg.ep, placement.index_of
    states = ["", *(f"/{s}" for s in optimizer_state_names(make_optimizer(cfg)))]
    moe_layers = [li for li in range(cfg.n_layers) if is_moe(model, li)]
    expert_tensors = {f"{'param' if not st else 'opt'}/{li}/{n}{st}": li for li in moe_layers for n in EXPERT_PARAMS
                      for st in states}
    for held in compiled.initial.values():
        for li in {int(k.split("/")[1]) for k in held if k.startswith("param/")} & set(moe_layers):
            held[f"out/moe/{li}"] = np.zeros(model.experts + 1)
    compiled.notes.update(ep=ep, layouts={n: ExpertRows(ep, index) for n in expert_tensors} if ep > 1 else {})
    compiled.gather = _with_routing_counts(compiled, moe_layers)
    return compiled


def _with_routing_counts(compiled: Compiled, moe_layers: list[int]):
    """The parameter reader, also writing the routing counts (summed over the tensor-rank-0 holders
    of every MoE block, over all steps) into notes["moe"]."""
    read, notes = compiled.gather, compiled.notes

    def gather(runtime) -> list[dict]:
        out = read(runtime)
        model, mesh = compiled.config.model, compiled.mesh
        moe = {}
        for li in moe_layers:
            lyr, name = layer_of(model, li), f"out/moe/{li}"
            # every token is routed once on the tensor rank 0 of its (replica, context rank, model copy)
            holders = [r for r, held in compiled.initial.items() if name in held and mesh.coord(r, "tp") == 0]
            total = sum(runtime.fetch(r, [name])[name] for r in holders)
            moe[lyr.name] = {"tokens_per_expert": [int(v) for v in total[:-1]], "dropped": int(total[-1]),
                             "capacity_per_sequence": lyr.capacity}
        notes["moe"] = moe
        return out

    return gather


def compile_expert_parallel(cfg: TrainConfig) -> Compiled:
    return compile_experts(cfg)
