"""MindSpore-style auto-parallel: shard() strategies, redistribution, explain, compile, run.

    from simulator.auto import ops, Network, set_auto_parallel_context, init, train, explain

Inside: context, graph, ops (+ op_kernels), strategy, redistribution (the base); propagate,
plan, planner (which strategy each operator gets, and the moves); strategy_search/ (the
cost-model searches); compile, explanation/explain, results/run; pipeline/ (stages).
"""

from . import ops
from .cell import Cell, shard
from .compile import compile_plan, redistribution_program
from .context import (
    AutoParallelContext,
    get_auto_parallel_context,
    init,
    reset_auto_parallel_context,
    set_auto_parallel_context,
)
from .explain import explain
from .explanation import Explanation
from .graph import Network, Tensor
from .nets import mlp_network, tiny_lm_network, transformer_network
from .pipeline import PipelinePlan, build_pipeline_plan, compile_pipeline
from .plan import ParallelPlan
from .planner import build_plan
from .redistribution import Step, redistribute, unify
from .results import AutoRunResult
from .run import standalone, train
from .strategy import MsLayout, OpSharding
from .strategy_search import OpCostModel, SearchResult, plan_cost, search

Layout = MsLayout  # MindSpore's spelling (`mindspore.Layout`); the top-level `simulator.Layout` is parasim's own

__all__ = ["AutoParallelContext", "AutoRunResult", "Cell", "shard", "OpCostModel", "SearchResult", "mlp_network", "plan_cost",
           "search", "tiny_lm_network", "transformer_network", "Explanation", "Layout", "MsLayout", "Network",
           "OpSharding", "ParallelPlan", "PipelinePlan", "build_pipeline_plan", "compile_pipeline", "Step",
           "Tensor", "build_plan", "compile_plan", "explain",
           "get_auto_parallel_context", "init", "ops", "redistribute", "redistribution_program",
           "reset_auto_parallel_context", "set_auto_parallel_context", "standalone", "train", "unify"]
