"""Autograder of lesson 02: the student's ring against parasim's plans, runtime and reference."""

import numpy as np

from simulator import make_plan, plan_time, reference
from simulator.collectives.algorithms import max_transfers
from simulator.grading import (
    compare,
    each_case,
    expect,
    explanation_item,
    hidden_random,
    ok,
    own_plot_item,
    prediction_item,
    type_name,
)
from simulator.limits import MAX_TRANSFERS

LESSON = {
    "title": "Collectives by hand: ring all-reduce",
    "goals": ["predict the steps, bytes and alpha-beta time of a ring all-reduce",
              "write a ring all-reduce as a Program of Send/Recv + Compute and run it on emulated devices",
              "check it against the reference sum and the 2(n-1)/n x S byte count"],
    "app_pages": ["Collectives"],
    "requires": ["ProgramBuilder", "make_plan", "make_runtime", "plan_time"],
    "minutes": 60,
    "prerequisites": [1],
    # parasim's plans answer these: they raise while your function runs
    "withhold": {"predicted_ring_bytes": ["simulator.collectives.algorithms:make_plan"],
                 "why_ring_bytes_flat": ["simulator.collectives.algorithms:make_plan"],
                 "plot_my_ring": ["simulator.collectives.algorithms:make_plan"]},
}


def prediction():
    """Predict, then reveal (the app's Lessons page): the answer is parasim's ring plan."""
    n, size = 8, 1_000_000
    sent = make_plan("all_reduce", "ring", n, size).bytes_sent_per_rank()[0]
    return {"question": f"A ring all-reduce of S = {size:,} bytes on n = {n} ranks: how many bytes does each rank "
                        "send in total?",
            "answer": float(sent), "rel_tol": 0.01, "unit": "bytes",
            "explain": "2(n-1) steps, each sending one chunk of S/n: 2(n-1)/n x S = 1.75 S on 8 ranks, "
                       "almost twice the data, whatever n is (nccl-tests' bus bandwidth factor)."}


def check_steps(s):
    "ring_steps(n) equals the number of steps of parasim's ring plan"
    for n in (2, 3, 4, 5, 8):
        want = len(make_plan("all_reduce", "ring", n, 1024).steps)
        if s.ring_steps(n) != want:
            return compare(want, s.ring_steps(n), f"n={n}: reduce-scatter then all-gather, each n-1 steps")
    return ok()


def check_bytes_formula(s):
    "ring_bytes_per_rank equals the plan's bytes per rank, 2(n-1)/n x S"
    return each_case([(2, 1024), (4, 1024), (8, 4096), (5, 1000)], lambda n, S: (
        make_plan("all_reduce", "ring", n, S).bytes_sent_per_rank()[0], s.ring_bytes_per_rank(n, S),
        f"n={n}, S={S}: each of 2(n-1) steps sends one chunk of S/n"))


def check_time(s):
    "ring_time_s equals parasim's alpha-beta price of the plan"
    return each_case([(4, 2**20, 5e-6, 100e9), (8, 2**24, 2e-6, 25e9), (3, 3000, 1e-5, 1e9)], lambda n, S, a, B: (
        plan_time(make_plan("all_reduce", "ring", n, S), lambda x, y: (a, B)), s.ring_time_s(n, S, a, B),
        f"n={n}, S={S}: 2(n-1) steps of (alpha + S/(n B))"))


def _run(s, n, size, seed=0):
    """Your Program, run on parasim's local runtime in a sandbox of its own (never in the grader,
    never in your file's process), under the same limits."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(size) for _ in range(n)]
    program = s.ring_all_reduce_program(n, size)
    ran = s.run_in_sandbox("run_program", program, {r: {"act/x": xs[r]} for r in range(n)}, "act/y")
    return xs, ran["outputs"], ran["bytes_sent"], program


def check_program_correct(s):
    "your ring program gives every rank the reference all-reduce (n = 2, 3, 4)"
    for n, size in [(2, 4), (3, 6), (4, 8)]:
        xs, ys, _, _ = _run(s, n, size, seed=n)
        want = reference("all_reduce", xs)
        for r in range(n):
            if np.shape(ys[r]) != np.shape(want[r]) or not np.allclose(ys[r], want[r], rtol=1e-9):
                return compare(want[r], ys[r], f"n={n}: rank {r} must end with the sum of all inputs")
    return ok()


def check_program_bytes(s):
    "your ring sends 2(n-1)/n x S bytes per rank, like parasim's ring plan"
    for n, size in [(2, 4), (4, 8), (4, 64)]:
        _, _, sent, _ = _run(s, n, size)
        want = make_plan("all_reduce", "ring", n, size * 8).bytes_sent_per_rank()
        if sent != want:
            return compare(want, sent, f"n={n}, {size} float64: send one chunk per step, never the whole array")
    return ok()


def check_program_messages(s):
    "your ring sends 2(n-1) messages per rank (no shortcuts through one device)"
    n, size = 4, 8
    program = s.ring_all_reduce_program(n, size)
    sends = [sum(type_name(i) == "Send" for i in program.code[r]) for r in range(n)]
    return expect(sends == [2 * (n - 1)] * n, f"{[2 * (n - 1)] * n} Sends", sends,
                  "each rank sends exactly one chunk to its right neighbour per step")


def ring_case() -> tuple[int, int]:
    """n ranks and an array of S bytes drawn when grading (S a multiple of 8 n: whole float64 chunks)."""
    rng = hidden_random()
    n = rng.randint(3, 32)
    return n, 8 * n * rng.randint(1_000, 100_000)


check_prediction = prediction_item(
    "prediction: the bytes one rank sends in a ring all-reduce of S bytes over n ranks, both drawn when grading (within 2 %)",
    answer=lambda n, size: float(make_plan("all_reduce", "ring", n, size).bytes_sent_per_rank()[0]),
    ask="predicted_ring_bytes", case=ring_case,
    hint=lambda n, size: f"n={n}, S={size}: reduce-scatter then all-gather, one S/n chunk per step")

# the ranks the explanation is asked for: up to 1024, as far as a ring all-reduce plan may hold
# (`limits.MAX_TRANSFERS`; the answer is counted from parasim's plan)
EXPLAIN_RANKS = (3, max(n for n in range(3, 1025) if max_transfers("all_reduce", "ring", n) <= MAX_TRANSFERS))

check_explanation = explanation_item(
    "explanation: why the ring's bytes per rank hardly grow with n (a choice, and its number on an n drawn when grading)",
    ask="why_ring_bytes_flat", right="b", case=lambda: (hidden_random().randint(*EXPLAIN_RANKS),),
    answer=lambda n: make_plan("all_reduce", "ring", n, 8 * n).bytes_sent_per_rank()[0] / (8 * n),
    reason=lambda n: f"n={n}: 2(n-1) chunks of S/n each, over S",
    hints={"a": "nothing is compressed: every chunk is S/n bytes of float64",
           "c": "every rank sends, every step (bytes_sent_per_rank is the same for all)",
           "d": "each rank sends 2(n-1) chunks of S/n, not the whole tensor"})


def small_ring() -> tuple[int, int]:
    """A ring drawn when grading, small enough to draw: 2 to 6 ranks, 1 to 4 float64 per rank."""
    rng = hidden_random()
    n = rng.randint(2, 6)
    return n, n * rng.randint(1, 4)


check_plot_of_your_ring = own_plot_item(
    "your own ring: the timeline of your ring program (n and size drawn when grading), bar by bar",
    ask="plot_my_ring", case=small_ring, given=lambda s, n, size: s.ring_all_reduce_program(n, size), probe="timeline",
    what=lambda n, size: f"your ring_all_reduce_program({n}, {size}), priced by simulate (chosen when grading)",
    hint="return viz.timeline(simulate(ring_all_reduce_program(n, size))): the timeline of your own program")
