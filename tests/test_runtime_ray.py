"""The Ray runtime against the local one: same results, same memory samples, same bytes.
Few tests, one shared Ray session and one shared 8-actor runtime (tests/conftest.py)."""

import numpy as np
import pytest

from simulator.collectives import algorithms, reference
from simulator.errors import DeviceFailure, ProgramError
from simulator.program import Collective, Compute, Program, ProgramBuilder, Recv
from simulator.runtime import LocalRuntime
from simulator.runtime.programs import sharded_matmul_program

pytestmark = pytest.mark.ray
GROUPS = [(0, 1, 2, 3, 4, 5, 6, 7), (6, 1, 3), (2, 7, 0, 4, 5)]


def _all_collectives_program(seed=0):
    """Every kind x algorithm, on groups of 8, 3 and 5 (uneven sizes), plus a send/recv chain."""
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(8)
    inputs = {r: {} for r in range(8)}
    expected = []  # (rank, name, array)
    c = 0
    for kind, algos in algorithms().items():
        for algo in algos:
            group = GROUPS[c % 3]
            op = ("sum", "mean", "max")[c % 3]
            root = group[c % len(group)]
            size = 11 + c
            xs = [rng.standard_normal(size if kind != "all_gather" else size + g) for g in range(len(group))]
            for g, r in enumerate(group):
                inputs[r][f"act/x{c}"] = xs[g]
                b.add(r, Collective(kind, f"act/x{c}", f"act/y{c}", group, algo=algo, op=op, root=root,
                                    nbytes=xs[g].nbytes))
            for g, out in enumerate(reference(kind, xs, op, root=group.index(root), axis=0)):
                if out is not None:
                    expected.append((group[g], f"act/y{c}", out))
            c += 1
    inputs[0]["param/w"] = np.arange(5.0)
    for r in range(7):
        b.compute(r, "scale", ("param/w",), ("act/h",), attrs={"factor": 2.0})
        b.send(r, r + 1, "act/h", "param/w")
    expected.append((7, "param/w", np.arange(5.0) * 2**7))
    return b.build(), inputs, expected


class _CountingLocal(LocalRuntime):
    """The local runtime, noting the method of every device call."""

    def __init__(self, n):
        super().__init__(n)
        self.methods = []

    def _call(self, rank, method, args, n_out):
        self.methods.append(method)
        return super()._call(rank, method, args, n_out)


def _run(rt, prog, inputs):
    rt.clear()
    rt.load(inputs)
    return rt.run(prog)


def test_ray_equals_local_and_reference(ray_runtime):
    prog, inputs, expected = _all_collectives_program()
    local = _CountingLocal(8)
    res_local = _run(local, prog, inputs)
    res_ray = _run(ray_runtime, prog, inputs)
    for r, name, want in expected:
        got_ray = ray_runtime.fetch(r, [name])[name]
        np.testing.assert_array_equal(got_ray, local.fetch(r, [name])[name])  # bit-identical
        np.testing.assert_allclose(got_ray, want, rtol=1e-12)
    assert res_ray.memory == res_local.memory
    assert res_ray.bytes_sent == res_local.bytes_sent and res_ray.messages_sent == res_local.messages_sent
    # one call per member for a whole collective (chunks handed actor to actor), not one per step
    members = sum(isinstance(ins, Collective) for code in prog.code for ins in code)
    steps = sum(1 for m in local.methods if m == "collective_step")
    assert res_ray.calls == res_local.calls - steps + members and steps > 3 * members

    prog, inputs, want = sharded_matmul_program(8, 45, 16, 7, dtype="float64")
    res_ray, res_local = _run(ray_runtime, prog, inputs), _run(local, prog, inputs)
    for r in (0, 7):
        np.testing.assert_allclose(ray_runtime.fetch(r, ["act/out"])["act/out"], want, rtol=1e-12)
    assert res_ray.memory == res_local.memory


def test_ray_fails_fast_and_names_device_and_instruction(ray_runtime):
    unmatched = Program(8, ((), (Recv("act/y", 0),)) + ((),) * 6)
    with pytest.raises(ProgramError, match=r"device 1 instruction #0 Recv\(act/y from 0\)"):
        ray_runtime.run(unmatched)
    ray_runtime.clear()
    ray_runtime.load({3: {"act/a": np.ones((2, 3))}})
    bad = Program(8, ((),) * 3 + ((Compute("matmul", ("act/a", "act/a"), ("act/c",)),),) + ((),) * 4)
    with pytest.raises(ProgramError, match=r"device 3 instruction #0 Compute\(matmul"):
        ray_runtime.run(bad)
    b = ProgramBuilder(8)
    b.collective("all_reduce", range(8), "grad/g")
    ray_runtime.load({r: {"grad/g": np.ones(4)} for r in range(8)})
    ray_runtime.inject_failure(5, 0, "injected")
    with pytest.raises(DeviceFailure, match="device 5 failed at instruction #0"):
        ray_runtime.run(b.build())


def test_ray_started_from_a_short_lived_thread_outlives_it():
    """A Streamlit script thread ends after every run; Ray's head processes die with the thread that
    started them (PR_SET_PDEATHSIG), so ensure_ray starts them from a parked thread. A fresh process:
    the shared test session must not be touched."""
    import subprocess
    import sys

    code = """
import threading, time
import ray
from simulator import ensure_ray
t = threading.Thread(target=ensure_ray)
t.start(); t.join()
time.sleep(3)  # the starting thread is gone
@ray.remote(num_cpus=0)
def f(): return 41 + 1
print("ALIVE", ray.get(f.remote(), timeout=60))
ray.shutdown()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert "ALIVE 42" in proc.stdout, proc.stderr[-2000:]


def _large_chunks_program(n, group_sizes=None):
    """Collectives whose chunks are >= 100 KB (they travel through the actors' shared memory)."""
    rng = np.random.default_rng(1)
    b = ProgramBuilder(n)
    inputs = {r: {} for r in range(n)}
    cases = [("all_reduce", "ring", 16_000 * n + 3), ("all_gather", "ring", 13_001 * n),
             ("reduce_scatter", "direct", 14_000 * n + 5), ("all_to_all", "ring", 15_000 * n),
             ("broadcast", "ring", 16_000 * n), ("all_reduce", "halving_doubling", 12_000 * n)]
    for c, (kind, algo, size) in enumerate(cases):
        for r in range(n):
            x = rng.standard_normal(size + r if kind == "all_gather" else size)
            inputs[r][f"act/x{c}"] = x
            b.add(r, Collective(kind, f"act/x{c}", f"act/y{c}", tuple(range(n)), algo=algo, op="sum", root=n - 1,
                                nbytes=x.nbytes))
    return b.build(), inputs, len(cases)


def test_large_chunks_through_shared_memory_equal_local(ray_runtime):
    """Chunks of >= 100 KB between actors of one Ray node leave through the sender's shared-memory
    buffers (not the object store): every result bit-identical to the local runtime, same memory
    samples, bytes and messages."""
    prog, inputs, n_cases = _large_chunks_program(8)
    local = LocalRuntime(8)
    res_local, res_ray = _run(local, prog, inputs), _run(ray_runtime, prog, inputs)
    for r in range(8):
        names = [f"act/y{c}" for c in range(n_cases)]
        got, want = ray_runtime.fetch(r, names), local.fetch(r, names)
        for name in names:
            np.testing.assert_array_equal(got[name], want[name])
    assert res_ray.memory == res_local.memory
    assert res_ray.bytes_sent == res_local.bytes_sent and res_ray.messages_sent == res_local.messages_sent
    import ray

    assert all(ray.get([a.shared_buffers.remote() for a in ray_runtime.actors], timeout=60))


def test_object_store_transport_equals_shared_memory_and_buffers_are_unlinked(ray_session):
    """shared_memory=False sends every chunk through Ray's object store: same results; closing a
    runtime unlinks its actors' shared-memory segments."""
    import os

    from simulator.runtime.ray_runtime import RayRuntime

    prog, inputs, n_cases = _large_chunks_program(3)
    names = [f"act/y{c}" for c in range(n_cases)]
    got = {}
    for shm in (True, False):
        rt = RayRuntime(3, shared_memory=shm)
        try:
            _run(rt, prog, inputs)
            got[shm] = [rt.fetch(r, names) for r in range(3)]
            segments = [s for a in rt.actors for s in ray_session.get(a.shared_buffers.remote(), timeout=60)]
        finally:
            rt.close()
        assert bool(segments) == shm
        if os.path.isdir("/dev/shm"):
            assert not [s for s in segments if os.path.exists(f"/dev/shm/{s}")]
    for r in range(3):
        for name in names:
            np.testing.assert_array_equal(got[True][r][name], got[False][r][name])


def test_a_failure_inside_a_collective_run_hand_to_hand_is_named_at_once(ray_runtime):
    """A collective run as one call per member: the failing member tells the others (they stop
    instead of waiting for its chunks), the failure names it, well within the bounded wait, and
    the next run is right again."""
    import time

    from simulator.runtime.programs import collective_program

    prog, inputs, _ = collective_program("all_reduce", 8, 80_000, "ring")
    ray_runtime.timeout_s, bound = 30.0, ray_runtime.timeout_s
    try:
        ray_runtime.clear()
        ray_runtime.load(inputs)
        ray_runtime.inject_failure(5, 0, "injected in the ring")
        t0 = time.perf_counter()
        with pytest.raises(DeviceFailure, match="injected in the ring") as err:
            ray_runtime.run(prog)
        assert err.value.rank == 5 and time.perf_counter() - t0 < 15
        res = _run(ray_runtime, prog, inputs)
        assert res.calls == 8 + 8  # one call per member for the whole ring, one report each
        local = LocalRuntime(8)
        _run(local, prog, inputs)
        np.testing.assert_array_equal(ray_runtime.fetch(3, ["act/y"])["act/y"], local.fetch(3, ["act/y"])["act/y"])
    finally:
        ray_runtime.timeout_s = bound


def test_the_runtime_that_started_ray_closes_the_others_first(ray_session, monkeypatch):
    """Ray's shutdown kills every actor before it could unlink its shared-memory buffers: the
    runtime that owns Ray closes the still-open ones first (they unlink their buffers)."""
    import os
    import weakref

    from simulator.runtime import ray_runtime as module
    from simulator.runtime.programs import collective_program
    from simulator.runtime.ray_runtime import RayRuntime

    # only these two count as open: the session's shared 8-actor runtime must survive this test
    monkeypatch.setattr(module, "_OPEN", weakref.WeakSet())
    owner, other = RayRuntime(1, shared_memory=False), RayRuntime(3)
    owner._owns_ray = True  # as if it had started Ray (the session's Ray stays up: shutdown recorded)
    shutdowns = []
    monkeypatch.setattr(ray_session, "shutdown", lambda: shutdowns.append(other.actors))
    prog, inputs, _ = collective_program("all_reduce", 3, 300_000, "ring")
    _run(other, prog, inputs)
    segments = [s for a in other.actors for s in ray_session.get(a.shared_buffers.remote(), timeout=60)]
    owner.close()
    assert segments and shutdowns == [[]]  # the other runtime was closed before Ray's shutdown
    if os.path.isdir("/dev/shm"):
        assert not [s for s in segments if os.path.exists(f"/dev/shm/{s}")]
