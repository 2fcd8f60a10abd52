"""explain(): every operator's parallel form and every move the compiler inserts, with reasons.

    e = explain(net, ctx)              # or explain(MatMul().shard(...), ctx, shapes=[...])
    print(e.to_text()); e.to_dict(); e.to_json()

What an Explanation holds is described in explanation.py; a pipelined network's in
pipeline/explain.py.
"""

from __future__ import annotations

from ..errors import ParasimError
from .context import AutoParallelContext
from .explanation import Explanation, operator_entry, plan_moves, single_op_network
from .graph import Network
from .ops import Primitive
from .pipeline.explain import explain_pipeline
from .pipeline.plan import accumulation_context
from .planner import build_plan


def explain(target, ctx: AutoParallelContext, shapes=None) -> Explanation:
    """Explain a Network, or a single sharded operator given its input shapes."""
    if isinstance(target, Primitive):
        target = single_op_network(target, shapes)
    elif not isinstance(target, Network):
        raise ParasimError(f"explain() takes a Network or an operator, got {type(target).__name__}")
    if ctx.pipeline_stages > 1 or ctx.grad_accumulation_step > 1:
        return explain_pipeline(target, accumulation_context(ctx))
    plan = build_plan(target, ctx)
    return Explanation(ctx, tuple(operator_entry(plan, np_) for np_ in plan.nodes),
                       tuple(plan_moves(plan)), plan)
