"""parasim: see how parallel strategies train large models.

The curated public API. app/ and lessons/ import only from here (and `simulator.viz` for figures).

    from simulator import DeviceMesh, Layout, TrainConfig, GPTConfig, train
    result = train(TrainConfig(GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32),
                               strategy="pp", devices=4, microbatches=8, schedule="1f1b"))
    result.max_rel_weight_diff_vs_single   # < 1e-9: parallelism does not change the math

A name is imported from its module when it is first used (PEP 562), so `from simulator import
make_schedule` loads the schedules and not the whole library: the app's home page, which needs
only a schedule and its timeline, imports a sixth of the modules (docs/app-performance.md).
`_API` below is the one list of the public names (tests/test_public_api.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

# module (under simulator.) -> the public names it defines, exported under the same name
_API = {
    "auto": (
        "AutoParallelContext", "Explanation", "MsLayout", "Network", "OpCostModel", "explain",
        "get_auto_parallel_context", "init", "plan_cost", "reset_auto_parallel_context",
        "set_auto_parallel_context"),
    "collectives": (
        "DEFAULT_ALGO", "Plan", "PlanStep", "Transfer", "algorithms", "collective", "make_plan", "reference",
        "run_plan"),
    "cost.analytic": ("AnalyticResult", "estimate"),
    "cost.assumptions": ("assumptions_of", "format_assumptions"),
    "cost.clock": ("SimpleDeviceModel", "simulate"),
    "cost.comm": ("bus_bandwidth_factor", "collective_time_s", "plan_time"),
    "cost.deepspeed_memory": ("deepspeed_estimates",),
    "cost.device_model": ("HardwareDeviceModel", "run_device_model"),
    "cost.goodput": (
        "FailureModel", "Goodput", "checkpoint_nbytes", "daly_interval_s", "goodput", "goodput_curve",
        "young_interval_s"),
    "cost.hardware": ("RUN_HARDWARE", "Hardware", "get_hardware", "hardware_names"),
    "cost.megatron_args": ("MegatronRun", "megatron_run", "parse_megatron_args"),
    "cost.memory": (
        "MemoryBreakdown", "activation_bytes_per_layer", "in_flight_microbatches",
        "model_state_bytes_per_device"),
    "cost.memory_report": ("memory_report",),
    "cost.model_presets": ("ModelSpec", "get_model", "model_names"),
    "cost.parallel_config": ("Assumptions", "ParallelConfig"),
    "cost.scale_sim": ("ScaleResult", "simulate_at_scale"),
    "cost.search": ("ConfigSearchResult", "search_configs", "search_training"),
    "errors": ("DeviceFailure", "ParasimError", "ProgramError"),
    "faults": (
        "Checkpoint", "Fault", "ResilientResult", "convert_checkpoint", "latest_checkpoint", "parse_faults",
        "random_faults", "restore", "save_checkpoint", "train_resilient"),
    "grading": (
        "Limits", "get_lesson", "grade_source", "lesson_prediction", "list_lessons", "notebook_code",
        "run_check"),
    "layout": ("Layout",),
    "layout_convert": ("P", "Partial", "PartitionSpec", "Replicate", "Shard"),
    "mesh": ("DeviceMesh",),
    "models": (
        "SGD", "Adam", "GPTConfig", "MLPConfig", "Model", "build_model", "get_batch", "gpt_iteration_flops",
        "gpt_param_count"),
    "models.attention": ("attention_forward",),
    "parallel.config": ("SCHEDULES", "STRATEGIES", "TrainConfig"),
    "parallel.cp_split": ("attention_bytes_per_step", "block_activation_bytes", "chunk_positions", "ring_steps"),
    "parallel.experts": ("MoEGPTConfig",),
    "parallel.schedule_check": ("format_schedule", "parse_schedule"),
    "parallel.schedule_registry": (
        "PRICED_SCHEDULES", "SEARCHED_SCHEDULES", "SCHEDULE_SPECS", "ScheduleSpec", "make_schedule", "schedule_spec",
        "time_schedule"),
    "parallel.schedule_sim": ("DEFAULT_TIMES", "SimResult", "simulate_schedule"),
    "parallel.schedules": ("Action", "Schedule", "gpipe", "one_f_one_b", "stage_placement", "zb_h1", "zb_h2"),
    "parallel.schedules_dualpipe": ("dualpipe", "dualpipev"),
    "parallel.schedules_interleaved": ("interleaved", "interleaved_zero_bubble", "looped_bfs", "zb_v"),
    "parallel.strategies": ("compile_strategy",),
    "program": ("Collective", "Compute", "Free", "Program", "ProgramBuilder", "Recv", "Send"),
    "runtime": ("LocalRuntime", "RunResult", "Runtime", "make_runtime"),
    "runtime.ray_runtime": ("ensure_ray",),
    "sweep": ("SweepTable", "sweep"),
    "topology": ("Link", "Topology"),
    "trace": ("MemorySample", "Trace", "TraceEvent"),
    "training": ("TrainResult", "price_training", "reference_train", "train"),
}
# public name -> (module, its name there): names exported under another name
_RENAMED = {
    "auto_search": ("auto", "search"),
    "auto_train": ("auto", "train"),
    "COLLECTIVE_KINDS": ("collectives", "KINDS"),
    "PRICED_ALGOS": ("cost.comm", "ALGOS"),
    "validate_schedule": ("parallel.schedule_check", "validate"),
}
_SUBMODULES = ("auto", "vocabulary")  # modules that are part of the public API themselves
_WHERE = {name: (module, name) for module, names in _API.items() for name in names} | _RENAMED

__version__ = "0.1.0"
__all__ = sorted([*_WHERE, *_SUBMODULES, "__version__"])


def __getattr__(name: str):
    """A public name, imported from its module on first use (then kept in this module's globals);
    any other submodule by its name (`simulator.cost`), as when this file imported everything."""
    if name in _WHERE:
        module, attr = _WHERE[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names and the subpackages they come from (attributes too, as `simulator.cost`)."""
    packages = {module.split(".")[0] for module, _name in _WHERE.values()}
    return sorted({*__all__, *packages})


class _Package(types.ModuleType):
    """The package's module: importing the submodule `simulator.sweep` (Python then binds it on the
    package under its name) leaves `simulator.sweep` the public function of that name."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _WHERE:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
