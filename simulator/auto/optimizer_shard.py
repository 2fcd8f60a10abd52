"""MindSpore's parallel optimizer inside auto-parallel (enable_parallel_optimizer=True).

MindSpore docs "optimizer_parallel": when a parameter's slice (after its operator's strategy)
is repeated on several ranks -- its data-parallel "mirror" group -- and the slice's first
dimension divides by the number of repeats, the parameter is stored as the smaller slice: dim 0
is cut further over the repeated device-matrix axes. Then
- forward: an AllGather over those axes rebuilds the operator's slice before its use;
- backward: the gradient is ReduceScattered over them (instead of the mirror AllReduce), so
  each rank holds the gradient of its own slice and the optimizer updates only that slice
  (its optimizer states are split the same way);
- optimizer_level "level3": the parameter is gathered again before the backward pass (the
  forward gather is freed), a second AllGather.

parallel_optimizer_config (context_options.py): optimizer_weight_shard_size s cuts over the
fastest-varying repeated axes whose sizes multiply to s (-1: all of them; a parameter whose axes
cannot make s stays whole); parallel_optimizer_threshold: a slice smaller than that many KB
stays whole.

Memory (`model_state_bytes_per_rank`): the per-rank bytes of parameters, gradients and Adam
states (the fp64 recipe of simulator/model_states.py: 8 + 8 + 16 bytes per element). The
levels' memory effect is ZeRO's (MindSpore docs: the same effect as Megatron's sharding):
level1 splits the optimizer states (ZeRO-1), level2 also the gradients (ZeRO-2), level3 also
the parameters (ZeRO-3), each over the parameter's shard group.
"""

from __future__ import annotations

from math import prod

from ..layout import Layout
from ..model_states import recipe_bytes

RECIPE = "fp64"  # parasim's runs: float64 parameters and gradients, Adam m and v


def shard_axes(layout: Layout, shape, ctx) -> tuple[str, ...]:
    """The repeated axes the parallel optimizer cuts this parameter's dim 0 over (() if none)."""
    if not ctx.enable_parallel_optimizer or not shape or ctx.parallel_mode == "stand_alone":
        return ()
    cfg = ctx.parallel_optimizer_config
    mesh = layout.mesh
    rep = [a for a in layout.replicated_axes if mesh.axis_size(a) > 1]
    if cfg.optimizer_weight_shard_size != -1:
        suffix = next((rep[i:] for i in range(len(rep))
                       if prod(mesh.axis_size(a) for a in rep[i:]) == cfg.optimizer_weight_shard_size),
                      None)
        rep = suffix or []
    n = prod(mesh.axis_size(a) for a in rep)
    local = layout.local_shape(shape)
    if n <= 1 or local[0] % n or 8 * prod(local) < 1024 * cfg.parallel_optimizer_threshold:
        return ()
    return tuple(rep)


def sharded_layout(layout: Layout, axes: tuple[str, ...]) -> Layout:
    """`layout` with dim 0 cut further over `axes` (minor to its own cuts)."""
    return Layout(layout.mesh, [layout.dims[0] + axes] + list(layout.dims[1:]))


def model_state_bytes_per_rank(plan) -> dict:
    """Per-rank bytes {"parameters", "gradients", "optimizer_states"} of the plan's parameters
    (module docstring: the ZeRO stage is the optimizer level; without the parallel optimizer,
    stage 0). Counted from each parameter's slices: the operator's slice of N elements over a
    shard group of n ranks gives ZeRO's p N / n etc. for the sharded parts."""
    p, g, k = recipe_bytes(RECIPE)
    level = plan.ctx.parallel_optimizer_config.level if plan.ctx.enable_parallel_optimizer else 0
    out = {"parameters": 0.0, "gradients": 0.0, "optimizer_states": 0.0}
    for x, t in plan.net.tensors.items():
        if t.kind != "parameter" or x not in plan.stored:
            continue
        whole = prod(plan.gathered.get(x, plan.stored[x]).local_shape(t.shape))
        mine = prod(plan.stored[x].local_shape(t.shape))
        out["parameters"] += p * (mine if level >= 3 else whole)
        out["gradients"] += g * (mine if level >= 2 else whole)
        out["optimizer_states"] += k * (mine if level >= 1 else whole)
    return out
