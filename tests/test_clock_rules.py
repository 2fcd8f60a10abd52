"""The event clock's timing rules (simulator/cost/clock.py docstring) on programs small enough to
price by hand: one device model with compute = flops / 1e12 s, every link 1 us + nbytes / 1e9 s.
The readable object clock is the definition; tests/test_clock_equivalence.py holds the columnar
clock to it event for event."""

from __future__ import annotations

import pytest

from simulator.cost.clock import SimpleDeviceModel, simulate
from simulator.program import Collective, Compute, Program, Recv, Send

MODEL = SimpleDeviceModel(flops_per_s=1e12, memory_bandwidth_Bps=1e30, latency_s=1e-6, bandwidth_Bps=1e9)
US = 1e-6


def events(code, n=None):
    trace = simulate(Program(n or len(code), code), MODEL)
    return {(e.device, e.kind if e.lane == "comm" else e.name): e for e in trace.events}, trace


def test_compute_waits_for_its_lane_and_its_inputs():
    ev, trace = events([[Compute("a", (), ("x",), flops=3e6), Compute("b", ("x",), ("y",), flops=2e6, label="b")]])
    assert ev[(0, "a")].start_s == 0 and ev[(0, "a")].duration_s == pytest.approx(3 * US)
    assert ev[(0, "b")].start_s == pytest.approx(3 * US) and trace.makespan_s == pytest.approx(5 * US)


def test_a_transfer_starts_when_the_tensor_is_ready_and_the_receiver_waits_only_to_use_it():
    # device 0 computes x (4 us), sends 2000 bytes (1 us + 2 us); device 1 computes 1 us, then uses x
    ev, trace = events([[Compute("a", (), ("x",), flops=4e6), Send("x", 1, nbytes=2000)],
                        [Compute("c", (), ("z",), flops=1e6), Recv("x", 0), Compute("d", ("x",), ("w",), flops=1e6)]])
    assert ev[(0, "send")].start_s == pytest.approx(4 * US) and ev[(1, "recv")].duration_s == pytest.approx(3 * US)
    assert ev[(1, "d")].start_s == pytest.approx(7 * US)       # the recv's end
    assert ev[(0, "send")].flow == ev[(1, "recv")].flow is not None
    assert trace.makespan_s == pytest.approx(8 * US)


def test_a_sender_lane_is_reserved_in_its_own_program_order():
    # two sends back to back from device 0: the second waits for the first on device 0's comm lane
    code = [[Compute("a", (), ("x",), flops=1e6), Send("x", 1, nbytes=1000), Send("x", 2, nbytes=1000)],
            [Recv("x", 0)], [Recv("x", 0)]]
    ev, _ = events(code)
    assert ev[(1, "recv")].start_s == pytest.approx(1 * US)
    assert ev[(2, "recv")].start_s == pytest.approx(3 * US)    # 1 us compute + (1 us + 1 us) first send


def test_a_blocking_collective_waits_for_every_member_and_holds_the_compute_lane():
    g = (0, 1)
    ar = dict(kind="all_reduce", tensor="x", out="y", group=g, nbytes=1000, algo="ring")
    code = [[Compute("a", (), ("x",), flops=5e6), Collective(**ar), Compute("b", (), ("z",), flops=1e6)],
            [Compute("a", (), ("x",), flops=1e6), Collective(**ar), Compute("b", (), ("z",), flops=1e6)]]
    ev, _ = events(code)
    c0, c1 = ev[(0, "all_reduce")], ev[(1, "all_reduce")]
    assert c0.start_s == c1.start_s == pytest.approx(5 * US)   # the slower member's input
    # ring all-reduce of 1000 B over 2: 2 steps of 500 B, each 1 us + 0.5 us
    assert c0.duration_s == pytest.approx(3 * US)
    assert ev[(1, "b")].start_s == pytest.approx(8 * US)       # blocking: compute waits for it


def test_a_non_blocking_collective_overlaps_compute_until_its_output_is_used():
    g = (0, 1)
    ar = dict(kind="all_reduce", tensor="x", out="y", group=g, nbytes=1000, algo="ring", blocking=False)
    dev = [Compute("a", (), ("x",), flops=1e6), Collective(**ar), Compute("b", (), ("z",), flops=10e6),
           Compute("c", ("y", "z"), ("w",), flops=1e6)]
    ev, trace = events([list(dev), list(dev)])
    assert ev[(0, "b")].start_s == pytest.approx(1 * US)       # not held by the collective (1 -> 4 us)
    assert ev[(0, "all_reduce")].start_s == pytest.approx(1 * US)
    assert ev[(0, "c")].start_s == pytest.approx(11 * US)      # b's end; y was ready at 4 us
    assert trace.makespan_s == pytest.approx(12 * US)


def test_non_blocking_collectives_queue_on_their_own_stream_not_the_comm_lane():
    g = (0, 1)
    slow = dict(kind="all_reduce", tensor="x", out="y", group=g, nbytes=100_000, algo="ring", blocking=False)
    fast = dict(kind="all_reduce", tensor="u", out="v", group=g, nbytes=1000, algo="ring")
    dev = [Compute("a", (), ("x", "u"), flops=1e6), Collective(**slow), Collective(**fast),
           Compute("c", ("y", "v"), ("w",), flops=1e6)]
    # the blocking one is not queued behind the non-blocking one: both start when their input is ready
    starts = sorted(e.start_s for e in simulate(Program(2, [list(dev), list(dev)]), MODEL).events
                    if e.device == 0 and e.kind == "all_reduce")
    assert starts == pytest.approx([1 * US, 1 * US])


def test_memory_samples_sit_at_their_instructions_simulated_end():
    code = [[Compute("a", (), ("x",), flops=2e6), Send("x", 1, nbytes=1000)], [Recv("x", 0)]]
    memory = {(0, 0): {"act": 8}, (0, 1): {"act": 16}, (1, 0): {"act": 24}}
    trace = simulate(Program(2, code), MODEL, memory=memory)
    at = {(s.device, s.total_bytes): s.time_s for s in trace.memory}
    assert at[(0, 8)] == pytest.approx(2 * US)              # the compute's end
    assert at[(0, 16)] == at[(1, 24)] == pytest.approx(4 * US)   # the transfer's end, at both ends
