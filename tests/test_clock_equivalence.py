"""The vectorised clock (`clock_columns`, a measured optimisation: bench/bench_clock.py) gives
exactly the trace of the definition, the object clock of `clock.py` (its rules:
tests/test_clock_rules.py), on the instruction objects of the same program: same events, same
times (same bits), same flows.

The vectorised clock lists each device's events in program order: every event is compared after
sorting both traces the same way, and flows are compared as the pairs of events they join."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cost.clock import SimpleDeviceModel, simulate
from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_device import ScaleDeviceModel
from simulator.cost.scale_program import build_scale_program
from simulator.cost.timeline_program import schedule_program
from simulator.errors import ProgramError
from simulator.parallel.schedule_registry import make_schedule
from simulator.program import Collective, Compute, Program
from simulator.program_columns import ColumnarProgram
from simulator.trace_columns import ColumnTrace

SMALL = ModelSpec("small", layers=8, hidden=1024, heads=16, seq=512, vocab=8192)
MOE = ModelSpec("moe", layers=4, hidden=512, heads=8, seq=256, vocab=4096, num_experts=8)


def objects(prog: Program) -> Program:
    """The same instructions as objects (a columnar program's row views): priced by the object clock."""
    return Program(prog.n_devices, prog.code, prog.name)


def _key(e):
    return (e.device, e.lane, e.start_s, e.kind, e.name, e.microbatch, e.duration_s)


def assert_same_events(new, old):
    """Every field of every event equal (exact floats), in any order; flows join the same pairs."""
    a, b = sorted(new.events, key=_key), sorted(old.events, key=_key)
    assert len(a) == len(b) > 0
    assert [replace(e, flow=None) for e in a] == [replace(e, flow=None) for e in b]
    pairs = []
    for events in (a, b):
        by_flow: dict = {}
        for e in events:
            if e.flow is not None:
                by_flow.setdefault(e.flow, []).append(_key(e))
        pairs.append(sorted(sorted(v) for v in by_flow.values()))
    assert pairs[0] == pairs[1] and all(len(p) == 2 for p in pairs[0])
    assert new.makespan_s == old.makespan_s
    assert [e.flow is None for e in a] == [e.flow is None for e in b]


def assert_same_columnar(prog, model, **kw):
    """A columnar program priced vectorised vs its instruction objects on the frozen clock."""
    assert isinstance(prog, ColumnarProgram)
    objs = objects(prog)
    assert len(objs) == len(prog) and not isinstance(objs, ColumnarProgram)
    new, old = simulate(prog, model, **kw), simulate(objs, model, **kw)
    assert not isinstance(old, ColumnTrace)
    assert isinstance(new, ColumnTrace) and new.makespan_s == old.makespan_s   # read from the columns
    assert_same_events(new, old)
    # each device's events in its program order: the send/recv pairs and computes of its code
    for d in range(prog.n_devices):
        kinds = [e.kind for e in new.events if e.device == d]
        assert kinds == [i.op if isinstance(i, Compute) else i.kind if isinstance(i, Collective)
                         else type(i).__name__.lower() for i in objs.code[d]]


@pytest.mark.parametrize("name,p,m,v", [("1f1b", 8, 16, 1), ("gpipe", 4, 8, 1), ("1f1b", 1, 4, 1),
                                        ("1f1b", 16, 3, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1),
                                        ("zb-h2", 4, 6, 1)])
def test_schedule_timeline(name, p, m, v):
    sched = make_schedule(name, p, m, v)
    prog = schedule_program(sched)
    assert_same_columnar(prog, SimpleDeviceModel(latency_s=1e-5, bandwidth_Bps=1e9), step=2)


def test_columnar_trace_builds_its_events_only_when_a_consumer_reads_them():
    prog = schedule_program(make_schedule("1f1b", 4, 8))
    model = SimpleDeviceModel(latency_s=1e-5, bandwidth_Bps=1e9)
    new = simulate(prog, model, name="t")
    old = simulate(objects(prog), model, name="t")
    assert new.makespan_s == old.makespan_s and new._events is None      # read from the columns
    assert new.step_breakdown() == pytest.approx(old.step_breakdown(), rel=1e-12)
    assert new._events is not None
    chrome = [sorted(map(str, t.to_chrome()["traceEvents"])) for t in (new, old)]
    assert len(chrome[0]) == len(chrome[1])
    two = new.append(simulate(prog, model))                                # Trace.append still works
    assert len(two.events) == 2 * len(old.events) and two.makespan_s == 2 * old.makespan_s


def test_schedule_timeline_that_cannot_finish_is_refused_by_the_walk():
    """DualPipe's actions are not a one-direction pipeline: its timeline program deadlocks, and the
    columnar clock refuses it with the walk's message, as the instruction clock does."""
    prog = schedule_program(make_schedule("dualpipe", 4, 8))
    with pytest.raises(ProgramError) as old:
        simulate(objects(prog), SimpleDeviceModel())
    with pytest.raises(ProgramError) as new:
        simulate(schedule_program(make_schedule("dualpipe", 4, 8)), SimpleDeviceModel())
    assert str(new.value) == str(old.value) and "deadlock" in str(new.value)


SCALE_CASES = [
    (SMALL, ParallelConfig(tp=2, pp=4, dp=2, global_batch=16), Assumptions(), False),
    (SMALL, ParallelConfig(tp=4, pp=2, dp=2, global_batch=8, sequence_parallel=True, recompute="full"),
     Assumptions(overlap_grad_reduce=True), True),
    (SMALL, ParallelConfig(tp=2, pp=4, dp=2, global_batch=16, schedule="interleaved", virtual_stages=2),
     Assumptions(overlap_grad_reduce=True), False),
    (SMALL, ParallelConfig(tp=1, pp=1, dp=4, global_batch=8, zero_stage=3), Assumptions(overlap_param_gather=True),
     False),
    (SMALL, ParallelConfig(tp=1, pp=2, dp=4, global_batch=8, zero_stage=1), Assumptions(overlap_param_gather=True),
     False),
    (SMALL, ParallelConfig(tp=2, pp=2, dp=2, cp=2, global_batch=8), Assumptions(), False),
    (SMALL, ParallelConfig(tp=2, pp=2, dp=2, cp=2, global_batch=8, cp_comm_type="a2a"), Assumptions(), True),
    (MOE, ParallelConfig(tp=1, pp=2, dp=4, ep=2, global_batch=8), Assumptions(overlap_grad_reduce=True), False),
    # --overlap-moe-expert-parallel-comm: merged pairs, non-blocking MoE collectives (cost/moe_overlap.py)
    (MOE, ParallelConfig(tp=2, pp=2, dp=4, ep=4, etp=1, global_batch=16, sequence_parallel=True,
                         schedule="interleaved", virtual_stages=2), Assumptions(overlap_moe_comm=True), False),
    (MOE.with_overrides(moe_shared_expert_hidden=512), ParallelConfig(tp=1, pp=2, dp=4, ep=4, global_batch=8),
     Assumptions(shared_expert_overlap=True), False),
    (SMALL, ParallelConfig(tp=2, pp=4, dp=2, global_batch=16, schedule="zb-h1"), Assumptions(), True),
    (SMALL, ParallelConfig(tp=2, pp=2, dp=2, global_batch=8, zero_stage=1), Assumptions(overlap_grad_reduce=True),
     True),
]


@pytest.mark.parametrize("model,cfg,A,fold", SCALE_CASES)
def test_scale_programs(model, cfg, A, fold):
    prog = build_scale_program(model, cfg, A, fold_tp=fold)
    dm = ScaleDeviceModel(HardwareDeviceModel("a100-80gb", cfg.gpus, A.matmul_dtype), cfg, fold_tp=fold)
    assert isinstance(prog, ColumnarProgram)
    assert_same_columnar(prog, dm, step=1)   # its columns on the vectorised clock vs its objects
