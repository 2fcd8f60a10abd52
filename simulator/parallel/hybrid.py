"""Hybrid (3-D to 5-D) parallelism: data x (context x) tensor x pipeline (x expert) (Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", Sec. 2-3).

The devices form a mesh (pp, dp, tp) laid out row-major with tensor fastest, then data, then
pipeline (Megatron's rank order: tensor groups are neighbouring ranks, which share a node's fast
links), so rank = (s * dp + i) * tp + t:

    8 devices, pp=2, dp=2, tp=2:   stage 0: replica 0 -> ranks 0 1, replica 1 -> ranks 2 3
                                   stage 1: replica 0 -> ranks 4 5, replica 1 -> ranks 6 7
    tensor groups (0,1) (2,3) (4,5) (6,7); data groups (0,2) (1,3) (4,6) (5,7);
    pipeline groups (0,4) (1,5) (2,6) (3,7)

Each (replica, tensor rank) lane runs the pipeline schedule; the tensor ranks of a stage AllReduce
inside every layer, the stages exchange activations point to point along the pipeline groups, and
after backward every rank AllReduces its gradient shards over its data group. Every collective
instruction carries its group, so the trace shows which axis it runs on. Any dp x tp x pp whose
product is the device count works; sequence parallelism is the "sp" strategy with the same degrees.

With cp > 1 the mesh gains its context axis between data and tensor (Megatron's "tp-cp-ep-dp-pp",
DeviceMesh.megatron): rank = ((s * dp + i) * cp + c) * tp + t, each sequence split over the c
ranks (context_parallel.py), gradients reduced over data x context groups. A mixture-of-experts
model spreads its experts over ep ranks carved out of the data x context ranks (the expert layers'
view of the same devices, DeviceMesh.megatron_experts; expert_parallel.py).
"""

from __future__ import annotations

from dataclasses import replace

from ..mesh import DeviceMesh
from .config import TrainConfig
from .context_parallel import compile_context_parallel
from .expert_parallel import compile_experts
from .experts import MoEGPTConfig
from .replicated import Compiled
from .tensor_parallel import compile_tensor_parallel


def hybrid_mesh(cfg: TrainConfig) -> DeviceMesh:
    """The (pp, dp, ep, cp, tp) mesh of a resolved config in Megatron's order, tensor fastest."""
    cfg = cfg.resolved()
    return cfg.attention_mesh  # ep=1: the experts' view is DeviceMesh.megatron_experts


def axis_groups(cfg: TrainConfig) -> dict[str, list[tuple[int, ...]]]:
    """{axis: its communicator groups} for the axes of degree > 1 (and always pp, dp, tp); with
    ep > 1 also the expert groups ("ep") and the expert-data groups ("edp")."""
    cfg = cfg.resolved()
    mesh = hybrid_mesh(cfg)
    out = {axis: mesh.groups(axis) for axis in ("pp", "dp", "cp", "tp") if axis != "cp" or cfg.cp > 1}
    if cfg.ep > 1:
        experts = DeviceMesh.megatron_experts(tp=cfg.tp, cp=cfg.cp, ep=cfg.ep, dp=cfg.dp, pp=cfg.pp)
        out.update(ep=experts.groups("ep"), edp=experts.groups("edp"))
    return out


def compile_hybrid(cfg: TrainConfig) -> Compiled:
    cfg = replace(cfg, strategy="hybrid").resolved()
    if isinstance(cfg.model, MoEGPTConfig) and max(cfg.ep, cfg.cp, cfg.tp) > 1:
        return compile_experts(cfg)
    if cfg.cp > 1:
        return compile_context_parallel(cfg)
    return compile_tensor_parallel(cfg)
