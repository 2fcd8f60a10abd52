"""Simulate a training step far beyond this machine: compile a scale program, run the clock, read it.

    res = simulate_at_scale("gpt3-175b", ParallelConfig(tp=8, pp=12, dp=16, global_batch=1536,
                         recompute="full"), "a100-80gb")
    res.step_time_s, res.mfu, res.bubble_fraction, res.exposed_comm_s
    res.trace.save_chrome("gpt3.json")          # both lanes of every simulated rank

The program (`scale_program.build_scale_program`) is one data-parallel replica; the clock
(`clock.simulate`) prices it on `scale_kernels.ScaleDeviceModel` built from a
`HardwareDeviceModel` of the whole cluster, which prices compute kernels by their matmul shapes
and the data-parallel collectives for their real groups. Memory is the closed-form peak of
`simulator.cost.memory` (Rajbhandari et al. 2020; Korthikanti et al. 2022): the closed form's
most loaded device (as `analytic`) and, per pipeline device, with the in-flight micro-batches of
the real schedule (`memory_per_device`).

Outputs (same definitions as `analytic.AnalyticResult`):
  tokens/s = B s / step;  model FLOP/s per GPU = B s (6N + 12 L h s) / step / GPUs and
  MFU = that / peak (PaLM, Chowdhery et al. 2022, App. B); hardware FLOP/s = FLOPs the simulated
  ranks executed (recomputation included) x d / step / GPUs (Narayanan et al. 2021 eq. 3 counts
  the same); bubble fraction = idle device-time / (ranks x step) (`Trace.bubble_fraction`:
  neither computing nor waiting on exposed communication); exposed communication = comm-lane
  time not hidden under compute, per device; time per collective kind and per purpose
  (tensor_parallel, pipeline_p2p, data_parallel, embedding_all_reduce) of the busiest device.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType

from simulator.cost.analytic import estimate
from simulator.cost.clock import simulate
from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.hardware import Hardware, get_hardware
from simulator.cost.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    logits_bytes,
    model_state_bytes_per_device,
)
from simulator.cost.memory_report import activation_widening, stage_params
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_kernels import ScaleDeviceModel, padded_vocab
from simulator.cost.scale_program import DEFAULT_BUCKET_NBYTES, build_scale_program
from simulator.program import no_gc
from simulator.trace import Trace, union_length


@dataclass(frozen=True, eq=False)
class ScaleResult:
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    tflops_per_gpu: float                 # hardware FLOP/s incl. recomputation
    hfu: float
    bubble_fraction: float
    comm_time_by_kind: MappingProxyType   # purpose -> seconds on the busiest device
    time_by_collective: MappingProxyType  # collective kind (and send) -> seconds on the busiest device
    comm_time_s: float                    # comm-lane busy time of the busiest device
    exposed_comm_s: float                 # max over devices of comm not hidden under compute
    compute_time_s: float                 # max over devices of compute-lane busy time
    memory: MemoryBreakdown               # closed form of the most loaded device (analytic._memory)
    memory_per_device_bytes: tuple        # per pipeline device, from the schedule's real in-flight counts
    gpus: int
    simulated_ranks: int
    instructions: int
    trace: Trace

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def oom(self) -> bool:
        return self.memory.oom or max(self.memory_per_device_bytes) > self.memory.capacity_bytes

    def to_dict(self) -> dict:
        """Plain data (JSON-able): every number of the result, tables as dicts."""
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("memory", "trace", "comm_time_by_kind", "time_by_collective")}
        d["comm_time_by_kind"] = dict(self.comm_time_by_kind)
        d["time_by_collective"] = dict(self.time_by_collective)
        d["memory_per_gpu_bytes"] = self.memory_per_gpu_bytes
        d["memory_per_device_bytes"] = list(self.memory_per_device_bytes)
        d["oom"] = self.oom
        return d

    as_dict = to_dict  # the older name

    def __repr__(self) -> str:
        return (f"ScaleResult(step {self.step_time_s:.4g} s, {self.tflops_per_gpu:.4g} TFLOP/s/GPU, MFU "
                f"{self.mfu:.1%}, bubble {self.bubble_fraction:.1%}, exposed comm {self.exposed_comm_s:.3g} s, "
                f"{self.simulated_ranks} ranks simulated for {self.gpus}, {self.memory!r})")


_PURPOSE = (("r", "pipeline_p2p"), ("bucket", "data_parallel"), ("emb", "data_parallel"),
            ("params", "data_parallel"), ("tied", "embedding_all_reduce"))


def _purpose(e) -> str:
    """What a comm event serves, from the tensor names of `scale_program` ("kind tensor")."""
    if e.kind in ("send", "recv"):
        return "pipeline_p2p"
    tensor = e.name.split(" ", 1)[-1]
    return next((p for prefix, p in _PURPOSE if tensor.startswith(prefix)), "tensor_parallel")


def trace_statistics(trace: Trace) -> dict:
    """One pass over the trace: per device compute and comm busy time (interval unions), exposed
    comm, idle; per-device seconds by purpose and by collective kind (recv counted on the send)."""
    comp = [[] for _ in range(trace.n_devices)]
    comm = [[] for _ in range(trace.n_devices)]
    by_purpose = [dict() for _ in range(trace.n_devices)]
    by_kind = [dict() for _ in range(trace.n_devices)]
    purposes: dict[tuple[str, str], str] = {}     # _purpose reads the kind and 6 characters of the tensor
    span = 0.0                                     # the makespan, in the same pass
    for e in trace.events:
        start, dur = e.start_s, e.duration_s
        end = start + dur                          # TraceEvent.end_s
        if end > span:
            span = end
        if e.lane == "compute":
            comp[e.device].append((start, end))
            continue
        comm[e.device].append((start, end))
        kind, name = e.kind, e.name
        key = (kind, name[:name.find(" ") + 7])
        pur = purposes.get(key)
        if pur is None:
            pur = purposes[key] = _purpose(e)
        mine = by_purpose[e.device]
        mine[pur] = mine.get(pur, 0.0) + dur
        if kind != "recv":
            mine = by_kind[e.device]
            mine[kind] = mine.get(kind, 0.0) + dur
    out = {"compute_s": [], "comm_s": [], "exposed_s": [], "idle_s": [], "by_purpose": by_purpose,
           "by_kind": by_kind, "span_s": span}
    for d in range(trace.n_devices):
        c, m = union_length(comp[d]), union_length(comm[d])
        exposed = union_length(comp[d] + comm[d]) - c
        out["compute_s"].append(c)
        out["comm_s"].append(m)
        out["exposed_s"].append(exposed)
        out["idle_s"].append(span - c - exposed)
    return out


def memory_per_device(model: ModelSpec, cfg: ParallelConfig, A: Assumptions | None = None) -> tuple[float, ...]:
    """Peak bytes on each pipeline device k (every TP rank of it alike): ZeRO model states of its
    parameters (Megatron-LM's 18 bytes, `memory_report.stage_params`) + Korthikanti activations per layer x its layers per chunk
    x the (micro-batch, chunk) activations the schedule really holds at once on k
    (`schedule_sim.peak_in_flight`), + one layer's full activations when recomputing, + the fp32
    logits on the device of the last stage."""
    from simulator.parallel.schedule_registry import make_schedule
    from simulator.parallel.schedule_sim import simulate_schedule
    A = (A or Assumptions()).resolved(model)
    s, b, h, a, t, p, v = model.seq / cfg.cp, cfg.micro_batch_size, model.hidden, model.heads, cfg.tp, cfg.pp, cfg.virtual_stages
    in_flight = simulate_schedule(make_schedule(cfg.schedule, p, cfg.microbatches, v)).peak_in_flight
    flash = "selective" if A.flash_attention else "none"     # FlashAttention keeps no s^2 scores
    f = model.ffn_hidden
    per_layer = activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel,
                                           flash if cfg.recompute == "none" else cfg.recompute, f,
                                           dropout=model.dropout)
    working = 0.0 if cfg.recompute == "none" else activation_bytes_per_layer(s, b, h, a, t, cfg.sequence_parallel,
                                                                             flash, f, dropout=model.dropout)
    widen = activation_widening(A.dtype)
    per_layer, working = per_layer * widen, working * widen
    chunks, V = cfg.chunk_layers(model.layers), padded_vocab(model, t)
    out = []
    for k in range(p):
        n = sum(chunks[c * p + k] for c in range(v))
        params = stage_params(model, t, n, k == 0, k == p - 1, cfg.ep)
        # in-flight counts are (micro-batch, chunk) units of a stage's mean chunk
        mem = (model_state_bytes_per_device(params, cfg.dp * cfg.cp, cfg.zero_stage, A.recipe)
               + per_layer * n / v * in_flight[k] + working)
        out.append(mem + (logits_bytes(s, b, V, t) if k == p - 1 else 0.0))
    return tuple(out)


def simulate_at_scale(model: ModelSpec | str, config: ParallelConfig, hardware: Hardware | str,
                   assumptions: Assumptions | None = None, *, fold_tp: bool = False,
                   bucket_nbytes: float = DEFAULT_BUCKET_NBYTES, overlap_grad_reduce: bool | None = None,
                   logits: bool = True, optimizer: bool = True) -> ScaleResult:
    """Build the scale program of `config`, run it on the clock, and summarise (module docstring).
    `overlap_grad_reduce` None: the assumptions' (one default, `simulator.vocabulary`)."""
    model, hw, cfg = get_model(model), get_hardware(hardware), config
    A = (assumptions or Assumptions()).resolved(model)
    if overlap_grad_reduce is None:
        overlap_grad_reduce = A.overlap_grad_reduce
    prog = build_scale_program(model, cfg, A, fold_tp=fold_tp, bucket_nbytes=bucket_nbytes,
                               overlap_grad_reduce=overlap_grad_reduce, logits=logits, optimizer=optimizer)
    dm = ScaleDeviceModel(HardwareDeviceModel(hw, cfg.gpus, A.matmul_dtype, link_efficiency=A.link_efficiency), cfg,
                          fold_tp=fold_tp, collective_algo=A.collective_algo, nvls=A.nvls)
    trace = simulate(prog, dm)
    with no_gc():       # a pass creating one tuple per event over a heap of a million events
        st = trace_statistics(trace)
    step = st["span_s"]
    n = trace.n_devices
    tokens = cfg.global_batch * model.seq
    executed = sum(e.flops for e in trace.events)           # one replica (times t if TP is folded)
    per_replica = executed * (cfg.tp if fold_tp else 1)
    hw_flops = per_replica * cfg.dp
    model_flops = tokens * model.model_flops_per_token()
    peak = hw.peak(A.dtype)
    busiest = max(range(n), key=lambda d: st["comm_s"][d])
    memory = estimate(model, cfg, hw, A).memory
    per_device = memory_per_device(model, cfg, A)
    return ScaleResult(
        step_time_s=step, tokens_per_s=tokens / step,
        model_tflops_per_gpu=model_flops / step / cfg.gpus / 1e12, mfu=model_flops / step / cfg.gpus / peak,
        tflops_per_gpu=hw_flops / step / cfg.gpus / 1e12, hfu=hw_flops / step / cfg.gpus / peak,
        bubble_fraction=sum(st["idle_s"]) / (n * step) if step > 0 else 0.0,
        comm_time_by_kind=MappingProxyType(st["by_purpose"][busiest]),
        time_by_collective=MappingProxyType(st["by_kind"][busiest]),
        comm_time_s=st["comm_s"][busiest], exposed_comm_s=max(st["exposed_s"]),
        compute_time_s=max(st["compute_s"]), memory=memory, memory_per_device_bytes=per_device, gpus=cfg.gpus, simulated_ranks=n,
        instructions=len(prog), trace=trace)
