"""Pipeline parallelism for auto-parallel networks (MindSpore pipeline_stages / micro_size).

plan.py splits a network into stages and plans each stage and boundary; compile.py lowers the
plan under a GPipe or 1F1B schedule; explain.py and run.py explain and run it.
"""

from .compile import compile_pipeline
from .explain import explain_pipeline
from .plan import Boundary, PipelinePlan, assign_stages, build_pipeline_plan
from .run import train_pipeline

__all__ = ["Boundary", "PipelinePlan", "assign_stages", "build_pipeline_plan", "compile_pipeline",
           "explain_pipeline", "train_pipeline"]
