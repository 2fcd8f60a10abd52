"""A pipeline schedule's timeline as a Program, to price a schedule on the event clock.

Per action one Compute ("F" or "BW" with the given FLOPs), and the Send/Recv of every stage
boundary: stage d receives the activation x_j from d - 1 before F_j and sends y_j to d + 1 after
it; it receives dy_j from d + 1 before BW_j and sends dx_j to d - 1 after it. On a device model
with free links this is the unit-time timeline of `schedule_sim.simulate_schedule` (bench_cost).
"""

from __future__ import annotations

from ..program import Compute, Program, Recv, Send, no_gc


def schedule_program(sched, flops_f: float = 1e12, flops_b: float = 2e12, nbytes: int = 1 << 20) -> Program:
    """The schedule (`schedule_registry.make_schedule`, F and BW actions) as a Program."""
    with no_gc():       # many small objects, no cycles (program.no_gc)
        return _schedule_program(sched, flops_f, flops_b, nbytes)


def _schedule_program(sched, flops_f, flops_b, nbytes) -> Program:
    p, code = sched.p, []
    for d, row in enumerate(sched.actions):
        out = []
        add = out.append
        for a in row:
            j = a.microbatch
            if a.kind == "F":
                if d > 0:
                    add(Recv(f"x{j}", d - 1, "f", nbytes, j))
                add(Compute("F", (f"x{j}",), (f"y{j}",), flops_f, 0, phase="forward", microbatch=j))
                if d < p - 1:
                    add(Send(f"y{j}", d + 1, "f", nbytes, j))
            else:
                if d < p - 1:
                    add(Recv(f"dy{j}", d + 1, "b", nbytes, j))
                add(Compute("BW", (f"y{j}", f"dy{j}"), (f"dx{j}",), flops_b, 0, phase="backward", microbatch=j))
                if d > 0:
                    add(Send(f"dx{j}", d - 1, "b", nbytes, j))
        code.append(tuple(out))
    return Program(p, tuple(code), f"1f1b p={p} m={sched.m}")
