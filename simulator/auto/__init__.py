"""MindSpore-style auto-parallel: shard() strategies, redistribution, explain, compile, run.

    from simulator.auto import ops, Network, set_auto_parallel_context, init, train, explain
"""

from . import ops
from .compile import compile_plan, redistribution_program
from .context import (
                      AutoParallelContext,
                      get_auto_parallel_context,
                      init,
                      reset_auto_parallel_context,
                      set_auto_parallel_context,
)
from .cost_ops import OpCostModel, plan_cost
from .explain import Explanation, explain
from .graph import Network, Tensor
from .pipeline import PipelinePlan, build_pipeline_plan
from .pipeline_compile import compile_pipeline
from .plan import ParallelPlan, build_plan
from .redistribution import Step, redistribute, unify
from .run import AutoRunResult, standalone, train
from .search_nets import mlp_network, transformer_network
from .search_ops import SearchResult, search
from .strategy import MsLayout, OpSharding

Layout = MsLayout  # MindSpore's name: Layout((2, 4), ("dp", "mp")); parasim's own is simulator.Layout

__all__ = ["AutoParallelContext", "AutoRunResult", "OpCostModel", "SearchResult", "mlp_network", "plan_cost",
           "search", "transformer_network", "Explanation", "Layout", "MsLayout", "Network",
           "OpSharding", "ParallelPlan", "PipelinePlan", "build_pipeline_plan", "compile_pipeline", "Step", "Tensor", "build_plan", "compile_plan", "explain",
           "get_auto_parallel_context", "init", "ops", "redistribute", "redistribution_program",
           "reset_auto_parallel_context", "set_auto_parallel_context", "standalone", "train", "unify"]
