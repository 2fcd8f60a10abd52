"""Pipeline schedules: published bubble and memory facts (Huang et al. 2019; Narayanan et al. 2021; Korthikanti et al. 2022; Qi et al. 2023),
dependency validation, hand-written schedules, and the timing engine against an independent oracle."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ParasimError
from simulator.parallel.schedule_check import format_schedule, parse_schedule, validate
from simulator.parallel.schedule_registry import flush_formulas, make_schedule
from simulator.parallel.schedule_sim import simulate_schedule
from simulator.parallel.schedules import (
    Action,
    Schedule,
    gpipe,
    greedy_order,
    one_f_one_b,
    zb_h1,
    zb_h2,
    zb_h2_makespan,
)
from simulator.parallel.schedules_interleaved import interleaved

GRID = [(p, m) for p in (1, 2, 3, 4, 5, 8) for m in (1, 2, 3, 4, 7, 8, 16)]
TIMES = [(1.0, 1.0, 1.0), (1.0, 2.0, 0.0), (2.0, 3.0, 1.0), (0.7, 1.3, 0.4)]


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------- value objects and bad input

def test_action_repr_is_the_notation():
    assert repr(Action("F", 3)) == "F3"
    assert repr(Action("B", 3, 1)) == "B3.1"
    assert repr(Action("BW", 0)) == "BW0"
    assert repr(gpipe(2, 3)) == "Schedule(gpipe, p=2, m=3, v=1)"
    with pytest.raises(ParasimError, match="kind 'X'"):
        Action("X", 0)
    with pytest.raises(ParasimError, match="phase"):
        Action("F", 0, 0, "middle")


@pytest.mark.parametrize("call, words", [
    (lambda: gpipe(0, 4), "p=0"),
    (lambda: one_f_one_b(4, 0), "m=0"),
    (lambda: interleaved(3, 7, 2), "m = 7 with p = 3 is not a multiple of 2"),
    (lambda: interleaved(4, 8, 0), "v=0"),
    (lambda: zb_h1(-1, 4), "p=-1"),
    (lambda: make_schedule("pipedream", 2, 2), "unknown schedule 'pipedream'"),
    (lambda: make_schedule("1f1b", 2, 2, v=2), "v=2"),
])
def test_bad_input_is_refused_with_numbers(call, words):
    with pytest.raises(ParasimError, match=words):
        call()


def test_schedule_checks_its_own_shape():
    with pytest.raises(ParasimError, match="1 action lists for p=2"):
        Schedule("x", 2, 1, 1, ((Action("F", 0),),))
    with pytest.raises(ParasimError, match="m=1 micro-batches"):
        Schedule("x", 1, 1, 1, ((Action("F", 1),),))


def test_phases_of_1f1b_follow_the_warmup_formula():
    s = one_f_one_b(4, 6)
    for r, row in enumerate(s.actions):
        warm = [a for a in row if a.phase == "warmup"]
        assert len(warm) == min(4 - r - 1, 6) and all(a.kind == "F" for a in warm)
        assert all(a.kind == "BW" for a in row if a.phase == "cooldown")


def test_interleaved_warmup_formula():
    p, m, v = 4, 8, 3
    s = interleaved(p, m, v)
    for r, row in enumerate(s.actions):
        assert sum(a.phase == "warmup" for a in row) == min((p - r - 1) * 2 + (v - 1) * p, m * v)


# ---------------------------------------------------------------- published bubble facts

@pytest.mark.parametrize("p, m", GRID)
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_fraction_of_step(name, p, m):
    """(p-1)/(m+p-1) of the step, bubble (p-1)(t_f+t_b) per stage, with BW = t_b + t_w: the closed
    forms (`flush_formulas`) are what the simulator measures; the Playbook's ratio is (p-1)/m."""
    for t_f, t_b, t_w in TIMES:
        r = simulate_schedule(make_schedule(name, p, m), t_f, t_b, t_w)
        f = flush_formulas(name, p, m, t_f, t_b + t_w)
        assert close(r.bubble_fraction, f["bubble_fraction"]) and close(f["bubble_fraction"], (p - 1) / (m + p - 1))
        assert close(f["bubble_ratio"], (p - 1) / m) and r.peak_in_flight == f["peak_in_flight"]
        for b in r.bubble_time:
            assert close(b, f["bubble_time"]) and close(b, (p - 1) * (t_f + t_b + t_w))


@pytest.mark.parametrize("p, m", GRID)
def test_peak_in_flight_1f1b_vs_gpipe(p, m):
    assert simulate_schedule(one_f_one_b(p, m)).peak_in_flight == tuple(min(p - r, m) for r in range(p))
    assert simulate_schedule(gpipe(p, m)).peak_in_flight == (m,) * p


@pytest.mark.parametrize("p, v", [(2, 2), (2, 3), (3, 2), (4, 2), (4, 4), (5, 3), (8, 2)])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_interleaved_bubble_is_p_minus_1_over_vm_of_ideal(p, v, groups):
    """Each chunk costs t/v; idle per device / ideal compute m(t_f+t_b) = (p-1)/(v m)."""
    m = groups * p
    for t_f, t_b in [(1.0, 2.0), (1.0, 1.0)]:
        r = simulate_schedule(interleaved(p, m, v), t_f / v, t_b / v, 0.0)
        ideal = m * (t_f + t_b)
        for b, busy in zip(r.bubble_time, r.busy_time):
            assert close(busy, ideal)
            assert close(b / ideal, (p - 1) / (v * m))
        # and v = 1 is 1F1B
    assert interleaved(p, m, 1).actions == one_f_one_b(p, m).actions


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3), (8, 4)])
def test_interleaved_first_stage_memory(p, v):
    """Korthikanti et al. 2022 (activation memory of the interleaved schedule): interleaving multiplies stage 0's p micro-batches
    of activations by (1 + (p-1)/(p v)); a chunk holds 1/v of them."""
    r = simulate_schedule(interleaved(p, 4 * p, v))
    assert close(r.peak_in_flight[0] / v, p * (1 + (p - 1) / (p * v)))


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("extra", [0, 1, 5, 13])
def test_zb_h1_is_a_third_of_1f1b_with_equal_times(p, extra):
    m = p + extra
    zb = simulate_schedule(zb_h1(p, m))
    base = simulate_schedule(one_f_one_b(p, m))
    for b_zb, b_base in zip(zb.bubble_time, base.bubble_time):
        assert close(b_zb, (p - 1) * (1 + 1 - 1))
        assert close(b_base, (p - 1) * (1 + 1 + 1))
        assert close(3 * b_zb, b_base)
    # same peak memory as 1F1B: p micro-batches at most, on every stage
    assert max(zb.peak_in_flight) == max(base.peak_in_flight) == p


@pytest.mark.parametrize("p, m", [(2, 5), (4, 4), (4, 9), (5, 12), (8, 16)])
@pytest.mark.parametrize("times", [(2.0, 2.0, 1.0), (1.0, 2.0, 1.0), (2.0, 3.0, 0.5)])
def test_zb_h1_formula_for_unequal_times(p, m, times):
    t_f, t_b, t_w = times
    r = simulate_schedule(zb_h1(p, m), t_f, t_b, t_w)
    assert close(r.makespan - m * (t_f + t_b + t_w), (p - 1) * (t_f + t_b - t_w))


@pytest.mark.parametrize("p, m", [(2, 3), (3, 5), (4, 7), (4, 12), (6, 11), (8, 20)])
def test_zb_h2_smaller_still(p, m):
    # T_B = 2 T_W: Qi et al. 2023's (p-1)(T_F+T_B-2T_W), below ZB-H1's (p-1)(T_F+T_B-T_W)
    t_f, t_b, t_w = 2.0, 2.0, 1.0
    h1 = simulate_schedule(zb_h1(p, m), t_f, t_b, t_w)
    h2 = simulate_schedule(zb_h2(p, m, t_f, t_b, t_w), t_f, t_b, t_w)
    assert close(h2.makespan - m * (t_f + t_b + t_w), (p - 1) * (t_f + t_b - 2 * t_w))
    assert h2.bubble_fraction < h1.bubble_fraction
    assert max(h2.peak_in_flight) == 2 * p - 1 > max(h1.peak_in_flight) == p
    # equal times: no idle inside any stage's span (zero bubble without an end-of-step sync),
    # and the synchronised step meets the lower bound (p-1) T_F that no schedule can beat
    eq = simulate_schedule(zb_h2(p, m))
    assert all(close(b, 0.0) for b in eq.span_bubble_time)
    assert close(eq.makespan, 3 * m + (p - 1))
    assert sum(simulate_schedule(zb_h1(p, m)).span_bubble_time) > 0


@pytest.mark.parametrize("p, m", [(1, 3), (2, 5), (3, 3), (4, 7), (4, 33), (8, 16), (8, 100)])
@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0), (2.0, 2.0, 1.0), (1.0, 1.37, 0.61), (0.3, 2.9, 1.7),
                                   (1.1, 0.4, 2.3)])
def test_zb_h2_play_is_the_executed_timing_start_by_start(p, m, times):
    # the greedy's own start times are those schedule_check.execute gives its order, so a search may
    # read ZB-H2's makespan off the play (`zb_h2_makespan`, `executed_bubble`). Equal up to the
    # rounding of sums taken in another order (the play reads a time off another device's clock)
    order, starts, makespan = greedy_order("zb-h2", p, m, [2 * p - 1] * p, *times)
    sched = zb_h2(p, m, *times)
    r = simulate_schedule(sched, *times)
    lo = r.offsets.tolist()
    assert [[(a.kind, a.microbatch) for a in row] for row in sched.actions] == order
    for d in range(p):
        executed = r.starts[lo[d]:lo[d + 1]].tolist()
        assert len(executed) == len(starts[d]) == 3 * m
        assert all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) for x, y in zip(executed, starts[d])), d
    assert zb_h2_makespan(p, m, *times) == makespan
    assert math.isclose(makespan, r.makespan, rel_tol=1e-12)


def test_gpipe_with_communication_time():
    """Every hop adds t_comm on the forward and on the backward chain."""
    p, m, c = 4, 6, 0.25
    r = simulate_schedule(gpipe(p, m), 1.0, 2.0, 0.0, t_comm=c)
    assert close(r.makespan, m * 3.0 + (p - 1) * (3.0 + 2 * c))


# ---------------------------------------------------------------- every schedule validates

def _oracle(schedule, result, t_f, t_b, t_w, t_comm):
    """Independent re-check of a timeline: order, durations, dependencies, earliest start."""
    p, S = schedule.p, schedule.n_stages
    dur = {"F": t_f, "B": t_b, "W": t_w, "BW": t_b + t_w}
    end = {}
    for d, row in enumerate(result.timeline):
        for a, s, e in row:
            k = a.chunk * p + d
            end[("F" if a.kind == "F" else "G" if a.kind in ("B", "BW") else "W", k, a.microbatch)] = (e, d)
    for d, row in enumerate(result.timeline):
        free = 0.0
        for a, s, e in row:
            assert close(e - s, dur[a.kind])
            k, i = a.chunk * p + d, a.microbatch
            deps = []
            if a.kind == "F" and k > 0:
                deps.append(("F", k - 1, i))
            if a.kind in ("B", "BW"):
                deps.append(("F", k, i))
                if k < S - 1:
                    deps.append(("G", k + 1, i))
            if a.kind == "W":
                deps.append(("G", k, i))
            ready = free
            for dep in deps:
                e_dep, d_dep = end[dep]
                ready = max(ready, e_dep + (t_comm if d_dep != d else 0.0))
            assert close(s, ready), (d, a, s, ready)  # starts exactly when it may
            free = e


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"]),
       p=st.integers(1, 7), groups=st.integers(1, 4), extra=st.integers(0, 6), v=st.integers(1, 4),
       t_f=st.floats(0.1, 3.0), t_b=st.floats(0.1, 3.0), t_w=st.floats(0.0, 2.0), t_comm=st.floats(0.0, 1.0))
def test_every_generated_schedule_validates(name, p, groups, extra, v, t_f, t_b, t_w, t_comm):
    if name == "interleaved":
        m = groups * p
    else:
        m, v = groups + extra, 1
    s = make_schedule(name, p, m, v)
    validate(s)
    assert sum(a.kind == "F" for row in s.actions for a in row) == m * p * v
    r = simulate_schedule(s, t_f, t_b, t_w, t_comm)
    _oracle(s, r, t_f, t_b, t_w, t_comm)
    work = m * v * (t_f + t_b + t_w)
    for b in r.bubble_time:
        assert b >= -1e-9
    assert close(r.makespan * p - sum(r.bubble_time), p * work)


# ---------------------------------------------------------------- hand-written schedules

@pytest.mark.parametrize("text, words", [
    ("F0 BW0\nBW0 F0", "stage 1 runs BW0 before its own F0 (it comes later in its own list)"),
    ("F0 W0 B0", "stage 0 runs W0 before its own B0"),
    ("F0 BW0 F1 BW1\nF1 F0 BW0 BW1",
     "deadlock: stage 0 runs BW0 before stage 1 has produced its gradient for micro-batch 0; "
     "stage 1 runs F1 before stage 0 has produced its activation for micro-batch 1"),
    ("F0 F1 BW0\nF0 BW0 F1 BW1", "stage 0 never runs the backward of micro-batch 1"),
    ("F0 F0 BW0", "stage 0 runs F0 2 times"),
    ("F0 BW0 B0 W0", "stage 0 runs both BW0 and a split B/W"),
    ("F0 B0", "stage 0 runs B0 but no W0"),
])
def test_wrong_schedules_are_refused_naming_the_dependency(text, words):
    with pytest.raises(ParasimError) as err:
        validate(parse_schedule(text))
    assert words in str(err.value)
    with pytest.raises(ParasimError):
        simulate_schedule(parse_schedule(text))


def test_the_brief_example_stage_2_before_stage_3_gradient():
    rows = format_schedule(one_f_one_b(4, 6)).splitlines()
    assert rows[2].endswith("F5 BW4 BW5") and rows[3].endswith("F4 BW4 F5 BW5")
    rows[2] = rows[2].replace("F5 BW4", "BW4 F5")          # stage 2 backs micro-batch 4 before F5
    rows[3] = rows[3].replace("F4 BW4 F5", "F4 F5 BW4")    # stage 3 wants F5 before BW4
    with pytest.raises(ParasimError, match="stage 2 runs BW4 before stage 3 has produced its "
                                           "gradient for micro-batch 4"):
        validate(parse_schedule("\n".join(rows)))


def test_interleaved_hand_schedule_names_the_chunk():
    text = "F0 F0.1 BW0.1 BW0\nF0 BW0.1 F0.1 BW0"
    with pytest.raises(ParasimError, match="stage 1 runs BW0.1 before its own F0.1"):
        validate(parse_schedule(text, v=2))
    validate(parse_schedule("F0 F0.1 BW0.1 BW0\nF0 F0.1 BW0.1 BW0", v=2))


def test_hand_written_schedule_is_accepted_and_timed():
    s = parse_schedule("""
        # a 2-stage 1F1B by hand
        F0 F1 BW0 BW1
        F0 BW0 F1 BW1
    """)
    validate(s)
    assert (s.p, s.m, s.v) == (2, 2, 1)
    assert format_schedule(s) == format_schedule(one_f_one_b(2, 2))
    assert close(simulate_schedule(s, 1, 1, 0).makespan, 2 * 2 + 1 * 2)


@pytest.mark.parametrize("name, p, m, v", [("gpipe", 3, 4, 1), ("1f1b", 4, 6, 1), ("interleaved", 4, 8, 3),
                                           ("zb-h1", 4, 6, 1), ("zb-h2", 3, 7, 1), ("1f1b", 1, 1, 1)])
def test_parse_format_round_trip(name, p, m, v):
    s = make_schedule(name, p, m, v)
    again = parse_schedule(format_schedule(s, phases=True), v=v, name=name)
    assert again == s  # kinds, micro-batches, chunks and phases
    plain = format_schedule(s)
    assert format_schedule(parse_schedule(plain, v=v)) == plain


@pytest.mark.parametrize("text, words", [("F0 X1", "'X1'"), ("F0 F", "'F'"), ("F1.2.3", "'F1.2.3'"),
                                         ("F0 | BW0", "exactly two"), ("", "no stage lines")])
def test_parse_errors(text, words):
    with pytest.raises(ParasimError, match=words):
        parse_schedule(text)
