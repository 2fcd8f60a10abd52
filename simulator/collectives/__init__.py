"""Collectives: numpy reference semantics, algorithms as plans, an in-memory plan executor."""

from .algorithms import DEFAULT_ALGO, algorithms, input_to_plan_nbytes, make_plan
from .execute import collective, run_plan
from .plan import Plan, PlanStep, Transfer
from .reference import KINDS, OPS, reference

__all__ = ["DEFAULT_ALGO", "KINDS", "OPS", "Plan", "PlanStep", "Transfer", "algorithms", "collective",
           "input_to_plan_nbytes", "make_plan", "reference", "run_plan"]
