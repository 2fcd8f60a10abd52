"""build_plan(): choose every operator's sharding by the context's mode, then plan the moves.

stand_alone, data_parallel, semi_auto_parallel and auto_parallel with sharding_propagation are
assigned by propagate.py; auto_parallel with dynamic_programming or recursive_programming by the
searches of strategy_search/. plan.py turns the choice into the inserted moves.
strategy_ckpt_load_file gives the operators their saved strategies first and
strategy_ckpt_save_file writes the plan's (strategy_ckpt.py); elementwise_op_strategy_follow
(set_algo_parameters) lets unset elementwise operators follow their consumer (propagate.py).
"""

from __future__ import annotations

from ..errors import ParasimError
from .context import AutoParallelContext
from .graph import Network
from .plan import ParallelPlan, plan_from_shardings
from .propagate import assign, follow_elementwise
from .strategy import OpSharding
from .strategy_ckpt import apply_strategy, check_parameters, read_strategy, save_strategy
from .strategy_search import assign_searched


def assign_shardings(net: Network, ctx: AutoParallelContext) -> dict[int, OpSharding]:
    """node index -> OpSharding by the context's parallel and search modes."""
    if ctx.parallel_mode == "auto_parallel" and ctx.search_mode != "sharding_propagation":
        done = assign_searched(net, ctx)
    else:
        done = assign(net, ctx)
    if ctx.parallel_mode == "auto_parallel" and ctx.algo_parameters.elementwise_op_strategy_follow:
        done = follow_elementwise(net, ctx.stage_devices, done)
    return done


def build_plan(net: Network, ctx: AutoParallelContext) -> ParallelPlan:
    """The ParallelPlan of one pipeline stage's network (all of it without pipelining)."""
    if ctx.pipeline_stages > 1:
        raise ParasimError(f"build_plan plans one stage; with pipeline_stages="
                           f"{ctx.pipeline_stages} use auto.pipeline.build_pipeline_plan")
    load = ctx.strategy_ckpt_load_file
    doc = read_strategy(load) if load else None
    if doc is not None:
        net = apply_strategy(net, doc, load, ctx.stage_devices)
    plan = plan_from_shardings(net, ctx, assign_shardings(net, ctx))
    if doc is not None:
        check_parameters(plan, doc, load)
    if ctx.strategy_ckpt_save_file:
        save_strategy([plan], ctx.strategy_ckpt_save_file)
    return plan
