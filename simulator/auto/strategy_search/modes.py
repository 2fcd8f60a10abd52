"""search(): run a search mode on a network's cost problem (problem.py) and report the choice.

    result = search(net, ctx)        # SearchResult: strategies, objective, cost, time
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field, replace

from ...errors import ParasimError
from ..context import AutoParallelContext
from ..graph import Network
from ..strategy import OpSharding
from .cost import Cost, OpCostModel
from .dp import solve_dp
from .problem import build_problem
from .rec import solve_recursive

SOLVERS = {"dynamic_programming": solve_dp, "recursive_programming": solve_recursive}


@dataclass(frozen=True)
class SearchResult:
    """The strategies a search chose, their objective and cost, and how long the search took."""

    mode: str
    strategies: dict  # operator label -> strategy tuple
    objective: float  # alpha*compute + beta*(comm + gamma*param_comm), seconds
    cost: Cost
    model: OpCostModel
    n_operators: int
    n_candidates: int  # candidate strategies over all operators
    search_time_s: float
    shardings: dict = field(repr=False, compare=False)  # node index -> OpSharding

    def to_dict(self) -> dict:
        """Plain data: mode, chosen strategies (lists), objective, the cost's fields, counts and
        search time (the shardings and cost model are left out; dataclasses.asdict keeps them)."""
        return {"mode": self.mode, "strategies": {k: [list(d) for d in v] for k, v in self.strategies.items()},
                "objective": self.objective, "cost": dataclasses.asdict(self.cost), "n_operators": self.n_operators,
                "n_candidates": self.n_candidates, "search_time_s": self.search_time_s}

    def __repr__(self) -> str:
        return (f"SearchResult({self.mode}: {self.n_operators} operators, {self.n_candidates} "
                f"candidates, objective {self.objective * 1e3:.6g} ms, "
                f"{self.cost.memory_bytes / 1e6:.4g} MB per device, {self.search_time_s:.3g} s)")


def search(net: Network, ctx: AutoParallelContext, model: OpCostModel | None = None,
           mode: str | None = None) -> SearchResult:
    """Run the context's search mode (or `mode`) with the context's cost model (or `model`)."""
    mode = mode or ctx.search_mode
    model = model or getattr(ctx, "cost_model", None) or OpCostModel()
    if not isinstance(model, OpCostModel):
        raise ParasimError(f"cost_model must be an OpCostModel, got {type(model).__name__}")
    model = replace(model, enable_alltoall=ctx.enable_alltoall,  # set_algo_parameters may turn it off
                    fully_use_devices=model.fully_use_devices and ctx.algo_parameters.fully_use_devices)
    solvers = SOLVERS
    if mode not in solvers:
        raise ParasimError(f"search mode {mode!r} is not one of {sorted(solvers)}")
    t0 = time.perf_counter()
    D = ctx.stage_devices
    prob = build_problem(net, D, model, None if mode == "dynamic_programming" else False)
    choice = solvers[mode](prob)
    elapsed = time.perf_counter() - t0
    sh = prob.shardings(choice)
    return SearchResult(mode, {net.nodes[v].label: sh[v].strategy for v in prob.order},
                        prob.objective(choice) + prob.const.objective(model), prob.evaluate(choice),
                        model, len(prob.order), sum(len(c) for c in prob.cands.values()), elapsed, sh)


def assign_searched(net: Network, ctx: AutoParallelContext) -> dict[int, OpSharding]:
    """The planner's hook for the dynamic_programming and recursive_programming modes."""
    return search(net, ctx).shardings
