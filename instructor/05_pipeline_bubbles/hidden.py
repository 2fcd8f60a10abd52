"""Hidden items of lesson 05 (instructor only): the public items' rules on cases the student never
sees, so a function fitted to the public cases earns nothing here."""

import numpy as np

from simulator import ParasimError, make_schedule, simulate_schedule
from simulator.grading import item, partial
from simulator.grading.sandbox import StudentError

CASES = [(6, 10), (16, 5), (5, 1), (7, 13)]


@item(points=2)
def check_bubble_on_unseen_cases(s):
    "bubble_time and bubble_fraction on pipelines the public checks do not try"
    done = 0
    for p, m in CASES:
        r = simulate_schedule(make_schedule("1f1b", p, m), t_f=1.0, t_b=3.0, t_w=0.0)
        done += bool(np.isclose(s.bubble_time(p, m, 1.0, 3.0), r.bubble_time[0], rtol=1e-9)
                     and np.isclose(s.bubble_fraction(p, m), simulate_schedule(make_schedule("1f1b", p, m)).bubble_fraction,
                                    rtol=1e-9))
    return partial(done, len(CASES), "the simulated bubble", f"{done} of {len(CASES)} cases")


@item(points=2)
def check_1f1b_text_on_unseen_cases(s):
    "one_f_one_b_text on pipelines the public checks do not try"
    from simulator import format_schedule, parse_schedule

    done = 0
    for p, m in CASES:
        try:
            done += format_schedule(parse_schedule(s.one_f_one_b_text(p, m))) == format_schedule(make_schedule("1f1b", p, m))
        except (ParasimError, StudentError):  # a text that does not parse, an error: nothing for that case
            pass
    return partial(done, len(CASES), "make_schedule('1f1b', p, m)", f"{done} of {len(CASES)} cases")
