"""Run an auto-parallel network on a runtime and gather the results back to global arrays.

    result = train(net, ctx, {"x": x, "labels": y}, runtime=init("local"), steps=2)
    result.losses, result.grads["w"], result.params["w"], result.output

`standalone(net, feeds)` runs the same network on one device (the oracle the parallel run must
match: float64, rtol 1e-9). Every gathered array is checked: replicas must agree.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .compile import compile_plan, local_name
from .context import AutoParallelContext
from .graph import Network
from .pipeline.plan import accumulation_context
from .pipeline.run import train_pipeline
from .plan import ParallelPlan
from .planner import build_plan
from .results import AutoRunResult, check_feeds, runtime_for


def train(net: Network, ctx: AutoParallelContext, feeds: Mapping[str, np.ndarray],
          runtime=None, steps: int = 1, train: bool = True) -> AutoRunResult:
    """Compile `net` under `ctx`, load the shards, run `steps` steps, gather the results.
    With pipeline_stages > 1 the pipelined program of auto/pipeline/compile.py runs instead."""
    feeds = check_feeds(net, feeds)
    if ctx.pipeline_stages > 1 or ctx.grad_accumulation_step > 1:
        return train_pipeline(net, accumulation_context(ctx), feeds, runtime=runtime, steps=steps,
                              train=train)
    plan = build_plan(net, ctx)
    program = compile_plan(plan, train=train)
    D = plan.device_num
    own = runtime is None
    runtime = runtime_for(runtime, D)
    try:
        runtime.clear()
        arrays = {r: {} for r in range(D)}
        values = dict(net.params) | feeds
        for x, lay in plan.stored.items():
            if x in values:
                for r, block in lay.shard(values[x]).items():
                    arrays[r][local_name(net, x)] = block
        runtime.load(arrays)
        losses, runs = [], []
        loss = plan.loss
        for _ in range(steps):
            runs.append(runtime.run(program))
            if loss is not None:
                losses.append(float(_gather(runtime, plan, loss, f"act/{loss}")))
        out = net.output.name
        used = [p for p in net.params if p in plan.stored]  # an unused parameter stays put
        grads = {p: _gather(runtime, plan, p, f"grad/{p}") for p in used
                 if train and loss is not None}
        params = {p: _gather(runtime, plan, p, f"param/{p}") if p in plan.stored
                  else net.params[p].copy() for p in net.params}
        output = _gather(runtime, plan, out, f"act/{out}")
    finally:
        if own:
            runtime.close()
    return AutoRunResult(tuple(losses), output, grads, params, program, plan, tuple(runs))


def _gather(runtime, plan: ParallelPlan, tensor: str, name: str) -> np.ndarray:
    blocks = {r: runtime.fetch(r, [name])[name] for r in range(plan.device_num)}
    return plan.stored[tensor].unshard(blocks)


def standalone(net: Network, feeds: Mapping[str, np.ndarray], steps: int = 1,
               learning_rate: float = 0.1, train_: bool = True) -> AutoRunResult:
    """The single-device run of the same network (stand_alone mode, one device)."""
    ctx = AutoParallelContext("stand_alone", 1, learning_rate=learning_rate)
    return train(net, ctx, feeds, steps=steps, train=train_)
