"""Statistics and drawing read a scale trace's columns (simulator/trace_columns.py,
simulator/trace_runs.py) and agree with the definitions on its events (`Trace`)."""

from __future__ import annotations

import pytest

from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_sim import simulate_at_scale, trace_statistics
from simulator.trace import Trace, TraceEvent
from simulator.trace_columns import ColumnTrace
from simulator.trace_runs import aggregate_runs

CASES = [("gpt3-175b", ParallelConfig(tp=8, pp=4, dp=8, global_batch=64), True),
         ("gpt3-175b", ParallelConfig(tp=8, pp=4, dp=8, global_batch=64, schedule="interleaved", virtual_stages=2),
          False)]


@pytest.fixture(scope="module", params=CASES, ids=["1f1b-folded", "interleaved"])
def scale_trace(request):
    name, cfg, fold = request.param
    res = simulate_at_scale(name, cfg, "a100-80gb", Assumptions(overlap_grad_reduce=True), fold_tp=fold)
    assert isinstance(res.trace, ColumnTrace) and res.trace._events is None
    return res.trace


def test_statistics_from_columns_equal_the_interval_unions_of_the_events(scale_trace):
    st = trace_statistics(scale_trace)
    assert scale_trace._events is None                        # no event objects were built
    for d in range(scale_trace.n_devices):
        assert st["compute_s"][d] == scale_trace.lane_busy_s(d, "compute")      # the same floats
        assert st["comm_s"][d] == scale_trace.lane_busy_s(d, "comm")
        assert st["idle_s"][d] == pytest.approx(scale_trace.device_stats()[d]["idle_s"], rel=1e-12, abs=1e-15)
    kinds: dict[str, float] = {}
    for per_device in st["by_kind"]:
        for k, v in per_device.items():
            kinds[k] = kinds.get(k, 0.0) + v
    assert kinds == pytest.approx(scale_trace.time_by_collective(), rel=1e-12)
    assert st["span_s"] == max(e.end_s for e in scale_trace.events)


def test_runs_drawn_from_columns_equal_the_runs_of_the_events(scale_trace):
    bars, note = aggregate_runs(scale_trace, 500)
    plain = Trace(scale_trace.n_devices, list(scale_trace.events), name=scale_trace.name)
    again, note2 = aggregate_runs(plain, 500)                  # the events laid out as columns again
    assert note == note2 and "drawn as" in note
    assert bars.events == again.events and 0 < len(bars.events) <= 500 + scale_trace.n_devices * 2


def test_a_run_spans_its_events_and_sums_their_bytes_and_flops():
    ev = [TraceEvent(0, "compute", f"F{i // 3} s0 L{i % 3} mlp", float(i), 1.0, "forward", "matmul", 0, 10.0, i // 3)
          for i in range(6)]
    ev += [TraceEvent(0, "comm", "all_reduce a0.0", 0.5, 0.25, "comm", "all_reduce", 100, 0.0, 0),
           TraceEvent(0, "comm", "send x to 1", 0.75, 0.5, "comm", "send", 50, 0.0, 0)]
    bars, note = aggregate_runs(Trace(1, ev), 3)
    got = sorted((e.lane, e.microbatch, e.start_s, e.end_s, e.flops, e.nbytes, e.kind) for e in bars.events)
    assert got == [("comm", 0, 0.5, 1.25, 0.0, 150, "mixed"), ("compute", 0, 0.0, 3.0, 30.0, 0, "matmul"),
                   ("compute", 1, 3.0, 6.0, 30.0, 0, "matmul")]
    names = {e.lane + str(e.microbatch): e.name for e in bars.events}
    assert names["comm0"] == "comm x2 ops (all_reduce, send), busy 750 ms"
    assert "8 events drawn as 3" in note
