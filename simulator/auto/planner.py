"""build_plan(): choose every operator's sharding by the context's mode, then plan the moves.

stand_alone, data_parallel, semi_auto_parallel and auto_parallel with sharding_propagation are
assigned by propagate.py; auto_parallel with dynamic_programming or recursive_programming by the
searches of strategy_search/. plan.py turns the choice into the inserted moves.
"""

from __future__ import annotations

from ..errors import ParasimError
from .context import AutoParallelContext
from .graph import Network
from .plan import ParallelPlan, plan_from_shardings
from .propagate import assign
from .strategy import OpSharding
from .strategy_search import assign_searched


def assign_shardings(net: Network, ctx: AutoParallelContext) -> dict[int, OpSharding]:
    """node index -> OpSharding by the context's parallel and search modes."""
    if ctx.parallel_mode == "auto_parallel" and ctx.search_mode != "sharding_propagation":
        return assign_searched(net, ctx)
    return assign(net, ctx)


def build_plan(net: Network, ctx: AutoParallelContext) -> ParallelPlan:
    """The ParallelPlan of one pipeline stage's network (all of it without pipelining)."""
    if ctx.pipeline_stages > 1:
        raise ParasimError(f"build_plan plans one stage; with pipeline_stages="
                           f"{ctx.pipeline_stages} use auto.pipeline.build_pipeline_plan")
    return plan_from_shardings(net, ctx, assign_shardings(net, ctx))
