"""Run a pipelined auto-parallel network and gather its results (called by run.train).

Loading: stage k's parameter shards go to its ranks k D/S + i; every network input is cut into
micro_size slices along dim 0 and each slice is sharded on the stages that read it. Results:
the loss is the mean of the micro-batch losses (each a mean over its rows), a non-scalar output
the micro-batch outputs concatenated along dim 0; gradients and weights come from the stage that
owns the parameter. Replicas are checked to agree, as in run.py.
"""

from __future__ import annotations

import numpy as np

from ..compile import local_name
from ..results import AutoRunResult, runtime_for
from .compile import compile_pipeline
from .plan import PipelinePlan, build_pipeline_plan


def train_pipeline(net, ctx, feeds: dict, runtime=None, steps: int = 1, train: bool = True):
    pplan = build_pipeline_plan(net, ctx)
    program = compile_pipeline(pplan, train=train)
    D, m = pplan.device_num, pplan.micro_size
    own = runtime is None
    runtime = runtime_for(runtime, D)
    try:
        runtime.clear()
        runtime.load(_initial_arrays(pplan, feeds))
        losses, runs = [], []
        loss, last = pplan.loss, pplan.loss_stage
        for _ in range(steps):
            runs.append(runtime.run(program))
            if loss is not None:
                losses.append(float(np.mean([_gather(runtime, pplan, last, loss, f"act/{loss}~mb{j}")
                                             for j in range(m)])))
        out = net.output.name
        outs = [_gather(runtime, pplan, last, out, f"act/{out}~mb{j}") for j in range(m)]
        output = np.mean(outs) if loss is not None else np.concatenate(outs, axis=0)
        params, grads = _read_weights(runtime, pplan, net, train and loss is not None)
    finally:
        if own:
            runtime.close()
    return AutoRunResult(tuple(losses), output, grads, params, program, pplan, tuple(runs))


def _initial_arrays(pplan: PipelinePlan, feeds: dict) -> dict[int, dict]:
    """rank -> its parameter shards and its slices of every micro-batch of the inputs it reads."""
    Ds, m = pplan.stage_devices, pplan.micro_size
    arrays = {r: {} for r in range(pplan.device_num)}
    for k, sub in enumerate(pplan.stages):
        off = k * Ds
        for p, value in sub.net.params.items():
            if p in sub.stored:
                for r, block in sub.stored[p].shard(value).items():
                    arrays[off + r][f"param/{p}"] = block
        for t in sub.net.inputs:
            if t.name not in feeds:  # received from an earlier stage
                continue
            n = t.shape[0]
            for j in range(m):
                part = feeds[t.name][j * n:(j + 1) * n]
                for r, block in sub.stored[t.name].shard(part).items():
                    arrays[off + r][f"{local_name(sub.net, t.name)}~mb{j}"] = block
    return arrays


def _read_weights(runtime, pplan: PipelinePlan, net, with_grads: bool) -> tuple[dict, dict]:
    """(parameters, gradients) read back from the stage that owns each parameter."""
    grads, params = {}, {p: v.copy() for p, v in net.params.items()}
    for k, sub in enumerate(pplan.stages):
        for p in sub.net.params:
            if p in sub.stored:
                params[p] = _gather(runtime, pplan, k, p, f"param/{p}")
                if with_grads:
                    grads[p] = _gather(runtime, pplan, k, p, f"grad/{p}")
    return params, grads


def _gather(runtime, pplan: PipelinePlan, k: int, tensor: str, name: str) -> np.ndarray:
    off = k * pplan.stage_devices
    blocks = {r: runtime.fetch(off + r, [name])[name] for r in range(pplan.stage_devices)}
    return pplan.stages[k].stored[tensor].unshard(blocks)
