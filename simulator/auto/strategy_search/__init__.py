"""Operator-level strategy search (MindSpore's auto_parallel search modes).

cost.py prices a strategy (MindSpore's objective), problem.py builds the cost graph every
mode solves, dp.py (dynamic_programming) and rec.py (recursive_programming) minimise it, and
modes.py runs a mode and reports the choice.
"""

from .cost import OpCostModel, PlanCost, plan_cost
from .modes import SOLVERS, SearchResult, assign_searched, search
from .problem import Problem, build_problem, power_of_two_strategies

__all__ = ["OpCostModel", "PlanCost", "Problem", "SOLVERS", "SearchResult", "assign_searched",
           "build_problem", "plan_cost", "power_of_two_strategies", "search"]
