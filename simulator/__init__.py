"""parasim: see how parallel strategies train large models.

The curated public API. app/ and lessons/ import only from here (and `simulator.viz` for figures).

    from simulator import DeviceMesh, Layout, TrainConfig, GPTConfig, train
    result = train(TrainConfig(GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32),
                               strategy="pp", devices=4, microbatches=8, schedule="1f1b"))
    result.max_rel_weight_diff_vs_single   # < 1e-9: parallelism does not change the math
"""

from . import auto, vocabulary
from .auto import (
                   AutoParallelContext,
                   Explanation,
                   MsLayout,
                   Network,
                   OpCostModel,
                   explain,
                   get_auto_parallel_context,
                   init,
                   plan_cost,
                   reset_auto_parallel_context,
                   set_auto_parallel_context,
)
from .auto import search as auto_search
from .auto import train as auto_train
from .collectives import DEFAULT_ALGO, Plan, PlanStep, Transfer, algorithms, collective, make_plan, reference, run_plan
from .collectives import KINDS as COLLECTIVE_KINDS
from .cost.analytic import AnalyticResult, estimate
from .cost.assumptions import assumptions_of, format_assumptions
from .cost.clock import SimpleDeviceModel, simulate
from .cost.comm import ALGOS as PRICED_ALGOS
from .cost.comm import bus_bandwidth_factor, collective_time_s, plan_time
from .cost.deepspeed_memory import deepspeed_estimates
from .cost.device_model import HardwareDeviceModel, run_device_model
from .cost.goodput import (
                   FailureModel,
                   Goodput,
                   checkpoint_nbytes,
                   daly_interval_s,
                   goodput,
                   goodput_curve,
                   young_interval_s,
)
from .cost.hardware import RUN_HARDWARE, Hardware, get_hardware, hardware_names
from .cost.megatron_args import MegatronRun, megatron_run, parse_megatron_args
from .cost.memory import (
                   MemoryBreakdown,
                   activation_bytes_per_layer,
                   in_flight_microbatches,
                   model_state_bytes_per_device,
)
from .cost.memory_report import memory_report
from .cost.model_presets import ModelSpec, get_model, model_names
from .cost.parallel_config import Assumptions, ParallelConfig
from .cost.scale_sim import ScaleResult, simulate_at_scale
from .cost.search import ConfigSearchResult, search_configs, search_training
from .errors import DeviceFailure, ParasimError, ProgramError
from .faults import (
                   Checkpoint,
                   Fault,
                   ResilientResult,
                   convert_checkpoint,
                   latest_checkpoint,
                   parse_faults,
                   random_faults,
                   restore,
                   save_checkpoint,
                   train_resilient,
)
from .grading import Limits, get_lesson, grade_source, lesson_prediction, list_lessons, notebook_code, run_check
from .layout import Layout
from .layout_convert import P, Partial, PartitionSpec, Replicate, Shard
from .mesh import DeviceMesh
from .models import SGD, Adam, GPTConfig, MLPConfig, Model, build_model, get_batch, gpt_iteration_flops, gpt_param_count
from .models.attention import attention_forward
from .parallel.config import SCHEDULES, STRATEGIES, TrainConfig
from .parallel.cp_split import attention_bytes_per_step, block_activation_bytes, chunk_positions, ring_steps
from .parallel.experts import MoEGPTConfig
from .parallel.schedule_check import format_schedule, parse_schedule
from .parallel.schedule_check import validate as validate_schedule
from .parallel.schedule_registry import (
    PRICED_SCHEDULES,
    SCHEDULE_SPECS,
    ScheduleSpec,
    make_schedule,
    schedule_spec,
    time_schedule,
)
from .parallel.schedule_sim import DEFAULT_TIMES, SimResult, simulate_schedule
from .parallel.schedules import Action, Schedule, gpipe, one_f_one_b, stage_placement, zb_h1, zb_h2
from .parallel.schedules_dualpipe import dualpipe, dualpipev
from .parallel.schedules_interleaved import interleaved, interleaved_zero_bubble, looped_bfs, zb_v
from .parallel.strategies import compile_strategy
from .program import Collective, Compute, Free, Program, ProgramBuilder, Recv, Send
from .runtime import LocalRuntime, RunResult, Runtime, make_runtime
from .runtime.ray_runtime import ensure_ray
from .sweep import SweepTable, sweep
from .topology import Link, Topology
from .trace import MemorySample, Trace, TraceEvent
from .training import TrainResult, price_training, reference_train, train

__version__ = "0.1.0"

__all__ = [name for name in dir() if not name.startswith("_")]
