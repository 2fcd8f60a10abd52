# %% [markdown]
# # Lesson 02 (EXERCISE): collectives by hand — ring all-reduce
#
# Fill in every function that raises `NotImplementedError("TODO ...")`, then run
# `parasim lesson check 02`. Experiments sit under `if __name__ == "__main__":`.

# %%
import numpy as np

from simulator import ProgramBuilder, make_plan, make_runtime, plan_time


# %% [markdown]
# ## 1. Predict: steps, bytes and time of a ring all-reduce
# Cut the S-byte array into n chunks. Reduce-scatter: n-1 steps, each rank passes one chunk to its
# right neighbour, who adds it to its own. All-gather: n-1 more steps passing the finished chunks.

# %%
def ring_steps(n: int) -> int:
    """Number of communication steps of a ring all-reduce over n ranks."""
    raise NotImplementedError("TODO: reduce-scatter steps + all-gather steps")


def ring_bytes_per_rank(n: int, nbytes: float) -> float:
    """Bytes each rank sends in a ring all-reduce of an nbytes array."""
    raise NotImplementedError("TODO: 2(n-1) steps of one chunk of nbytes / n")


def ring_time_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Alpha-beta time: every step costs latency + chunk / bandwidth."""
    raise NotImplementedError("TODO: steps x (alpha + (S/n) / B)")


# %% [markdown]
# ## 2. Do: write the ring as a Program of Send/Recv + Compute
# Each rank r starts with tensor `act/x` (1-D, `size` float64 elements, size divisible by n) and
# must end with `act/y` = the sum over ranks. Kernels you can use in `b.compute(rank, op, inputs,
# outputs, attrs={...})`: `split` (chunk `index` of `parts` equal chunks:
# `b.compute(r, "split", ["act/x"], ["act/c0"], attrs={"parts": n, "index": 0})`), `add`, `copy`, `concat`.
# `b.send(src, dst, tensor, dst_tensor)` adds the Send on src and the matching Recv on dst.
# A Recv overwrites its tensor, so receive into a scratch name, then add.

# %%
def ring_all_reduce_program(n: int, size: int):
    """A Program for n devices: act/x (size,) on every rank -> act/y = sum over ranks."""
    b = ProgramBuilder(n, name=f"ring all-reduce by hand, n={n}")
    raise NotImplementedError("TODO: split, n-1 reduce-scatter steps (send, recv, add), n-1 all-gather steps, concat")
    return b.build()


# %%
def run_on_devices(program, xs: list[np.ndarray]):
    """Run `program` on n local emulated devices; return (outputs per rank, bytes sent per rank)."""
    n = len(xs)
    with make_runtime("local", n) as rt:
        rt.load({r: {"act/x": xs[r]} for r in range(n)})
        result = rt.run(program)
        ys = [rt.fetch(r, ["act/y"])["act/y"] for r in range(n)]
    return ys, list(result.bytes_sent)

# %% [markdown]
# ## Predict, explain, then look at your own ring
# Predict before you build anything: the bytes each rank sends in a ring all-reduce of S bytes
# over n ranks (the grader picks n and S when grading; parasim's plans are withheld meanwhile).

# %%
def predicted_ring_bytes(n: int, nbytes: int) -> float:
    """Your prediction of the bytes one rank sends in a ring all-reduce of nbytes over n ranks."""
    raise NotImplementedError("TODO: n-1 reduce-scatter steps and n-1 all-gather steps of S/n each")


# %% [markdown]
# Why do the ring's bytes per rank hardly grow with n? Choose one letter:
#   a) the ring compresses the chunks
#   b) each step a rank sends one chunk of S/n, for 2(n-1) steps: 2(n-1)/n S, below 2 S for any n
#   c) only rank 0 sends
#   d) the ring sends the whole tensor once
# and give the number your reason predicts on n ranks (the grader picks n): the bytes one rank
# sends divided by S.

# %%
def why_ring_bytes_flat(n: int) -> tuple[str, float]:
    """(one letter: a, b, c or d; the bytes one rank sends over S, on n ranks)."""
    raise NotImplementedError("TODO: count the chunks one rank sends in your plan")


# %% [markdown]
# Your own ring: price your ring_all_reduce_program(n, size) on parasim's clock
# (`simulate(program)`) and return its timeline, `viz.timeline(trace)` (n and size chosen when
# grading). The grader runs your program through the clock itself and compares the bars, so the
# figure must be of your program; parasim's plans are withheld while this runs.

# %%
def plot_my_ring(n: int, size: int):
    """The matplotlib Figure of your ring program's timeline."""
    raise NotImplementedError("TODO: viz.timeline(simulate(ring_all_reduce_program(n, size)))")


if __name__ == "__main__":
    n, size = 4, 8
    xs = [np.random.default_rng(r).standard_normal(size) for r in range(n)]
    ys, sent = run_on_devices(ring_all_reduce_program(n, size), xs)
    print("correct:", np.allclose(ys[0], sum(xs)), "bytes sent per rank:", sent,
          "formula:", ring_bytes_per_rank(n, size * 8))
    plan = make_plan("all_reduce", "ring", n, size * 8)
    print(plan, plan.bytes_sent_per_rank(), plan_time(plan, lambda a, b: (5e-6, 100e9)))
