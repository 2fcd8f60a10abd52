"""Hidden items of lesson 05 (instructor only): the public items' rules on cases the student never
sees, so a function fitted to the public cases earns nothing here."""

import numpy as np

from simulator import ParasimError, make_schedule, simulate_schedule
from simulator.grading import item, partial
from simulator.grading.sandbox import StudentError
from simulator.parallel.schedule_registry import flush_formulas

CASES = [(6, 10), (16, 5), (5, 1), (7, 13)]
BIG = [(1500, 800), (2048, 4096), (1111, 2222), (4000, 1000)]   # beyond make_schedule's size limit


@item(points=2)
def check_bubble_on_unseen_cases(s):
    "bubble_time and bubble_fraction on pipelines the public checks do not try (some too big to simulate)"
    done = 0
    for p, m in CASES:
        r = simulate_schedule(make_schedule("1f1b", p, m), t_f=1.0, t_b=3.0, t_w=0.0)
        done += bool(np.isclose(s.bubble_time(p, m, 1.0, 3.0), r.bubble_time[0], rtol=1e-9)
                     and np.isclose(s.bubble_fraction(p, m), simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction,
                                    rtol=1e-9))
    for p, m in BIG:   # a formula answers at once; a solver of any name runs out of time (`within`)
        f = flush_formulas("1f1b", p, m, 1.0, 3.0)
        done += bool(np.isclose(s.within(2.0).bubble_time(p, m, 1.0, 3.0), f["bubble_time"], rtol=1e-9)
                     and np.isclose(s.within(2.0).bubble_fraction(p, m), f["bubble_fraction"], rtol=1e-9))
    total = len(CASES) + len(BIG)
    return partial(done, total, "the simulated bubble", f"{done} of {total} cases")


@item(points=2)
def check_1f1b_text_on_unseen_cases(s):
    "one_f_one_b_text on pipelines the public checks do not try, with and without extra warm-up"
    from simulator import format_schedule, parse_schedule, validate_schedule

    done = 0
    for p, m in CASES:
        try:
            done += format_schedule(parse_schedule(s.one_f_one_b_text(p, m))) == format_schedule(make_schedule("1f1b", p, m))
        except (ParasimError, StudentError):  # a text that does not parse, an error: nothing for that case
            pass
    extra = [(6, 10, 2), (5, 12, 4), (7, 9, 1)]
    for p, m, k in extra:   # no parasim schedule has extra warm-up: the held activations tell
        try:
            mine = parse_schedule(s.one_f_one_b_text(p, m, k))
            validate_schedule(mine)
            done += simulate_schedule(mine).peak_in_flight == tuple(min(p - d + k, m) for d in range(p))
        except (ParasimError, StudentError):
            pass
    total = len(CASES) + len(extra)
    return partial(done, total, "1F1B with w = min(p-d-1+extra_warmup, m) warm-up forwards", f"{done} of {total} cases")
