"""LocalRuntime behaviour (the Ray runtime must match it: see test_runtime_ray.py)."""

import numpy as np
import pytest

from simulator.collectives import algorithms
from simulator.errors import DeviceFailure, ParasimError, ProgramError
from simulator.program import Collective, Compute, Program, ProgramBuilder, Recv, Send
from simulator.runtime import LocalRuntime, make_runtime
from simulator.runtime.device import Device, category_of
from simulator.runtime.programs import collective_program, sharded_matmul_program

CASES = [(kind, algo) for kind, algos in algorithms().items() for algo in algos]


def _check(rt, expected, name="act/y"):
    for r, want in expected.items():
        if want is None:
            continue
        got = rt.fetch(r, [name])[name]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind,algo", CASES)
@pytest.mark.parametrize("group", [(5,), (2, 0, 6), (0, 1, 2, 3, 4, 5, 6)])
def test_collective_programs_equal_reference(kind, algo, group):
    # groups in a non-sorted order inside an 8-device runtime; 13 elements never divide evenly
    root = group[-1]
    ops = ("sum", "mean", "max") if kind in ("all_reduce", "reduce_scatter", "reduce") else ("sum",)
    for op in ops:
        prog, inputs, expected = collective_program(kind, 8, 13, algo, op=op, root=root, group=group)
        rt = LocalRuntime(8)
        rt.load(inputs)
        res = rt.run(prog)
        _check(rt, expected)
        if kind == "reduce":  # non-roots get no output
            assert all("act/y" not in rt.devices[r].tensors for r in group if r != root)
        outside = [r for r in range(8) if r not in group]
        assert all(res.bytes_sent[r] == 0 and not res.memory[r] for r in outside)
        assert res.wall_time_s > 0


def test_bytes_sent_match_the_plan():
    prog, inputs, _ = collective_program("all_reduce", 8, 8 * 1024, "ring")
    rt = LocalRuntime(8)
    rt.load(inputs)
    res = rt.run(prog)
    plan, _ = rt.lower(prog.code[0][0])
    assert list(res.bytes_sent) == plan.bytes_sent_per_rank() == [2 * 7 * 8 * 1024 * 8 // 8] * 8
    assert res.messages_sent == (14,) * 8
    assert res.calls == 8 * 15 + 8  # 2(n-1)+1 collective calls per device, one report each


@pytest.mark.parametrize("n,m", [(8, 37), (8, 64), (3, 10)])
def test_sharded_matmul_equals_numpy(n, m):
    prog, inputs, expected = sharded_matmul_program(n, m, 12, 9, dtype="float64")
    rt = make_runtime("local", n)
    rt.load(inputs)
    rt.run(prog)
    for r in range(n):
        np.testing.assert_allclose(rt.fetch(r, ["act/out"])["act/out"], expected, rtol=1e-12)


def test_send_recv_batches_and_memory_samples():
    b = ProgramBuilder(3)
    b.compute(0, "scale", ("param/w",), ("act/h",), attrs={"factor": 2.0})
    b.send(0, 1, "act/h", "act/h")
    b.compute(1, "add", ("act/h", "act/h"), ("grad/g",))
    b.send(1, 2, "grad/g", "opt/m")
    b.free(1, "act/h")
    prog = b.build()
    rt = LocalRuntime(3)
    w = np.arange(6.0).reshape(2, 3)
    rt.load({0: {"param/w": w}})
    res = rt.run(prog)
    np.testing.assert_array_equal(rt.fetch(2, ["opt/m"])["opt/m"], 4 * w)
    assert res.bytes_sent == (48, 48, 0) and res.messages_sent == (1, 1, 0)
    # one sample per instruction, by category
    assert res.memory[0][0] == {"param": 48, "grad": 0, "opt": 0, "act": 48, "other": 0}
    assert res.memory[1] == {0: {"param": 0, "grad": 0, "opt": 0, "act": 48, "other": 0},
                             1: {"param": 0, "grad": 48, "opt": 0, "act": 48, "other": 0},
                             2: {"param": 0, "grad": 48, "opt": 0, "act": 48, "other": 0},
                             3: {"param": 0, "grad": 48, "opt": 0, "act": 0, "other": 0}}
    assert res.peak_bytes() == [96, 96, 48]
    assert set(res.memory_by_instruction()) == {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)}
    # device 0's compute+send is one call, device 1's recv+compute+send+free one call
    assert res.calls == 3 + 3  # one batch per device, one report per device


def test_non_blocking_collective_overlaps_independent_compute():
    n = 4
    b = ProgramBuilder(n)
    b.collective("all_reduce", range(n), "grad/g", "grad/g", blocking=False)
    for r in range(n):
        b.compute(r, "scale", ("act/x",), ("act/y",), attrs={"factor": 3.0})
        b.compute(r, "add", ("grad/g", "act/y"), ("act/z",))
    rt = LocalRuntime(n)
    rt.load({r: {"grad/g": np.full(5, float(r)), "act/x": np.ones(5)} for r in range(n)})
    rt.run(b.build())
    for r in range(n):
        np.testing.assert_array_equal(rt.fetch(r, ["act/z"])["act/z"], np.full(5, 6.0 + 3.0))


def test_broadcast_keeps_shape_and_scalars():
    for x in (np.arange(12.0).reshape(4, 3), np.float64(7.5)):
        b = ProgramBuilder(3)
        b.collective("broadcast", (0, 1, 2), "param/w", "param/w", algo="ring", root=1)
        rt = LocalRuntime(3)
        rt.load({1: {"param/w": x}})
        rt.run(b.build())
        for r in range(3):
            np.testing.assert_array_equal(rt.fetch(r, ["param/w"])["param/w"], x)


def test_unmatched_recv_fails_fast_naming_device_and_instruction():
    prog = Program(2, ((Compute("copy", ("act/x",), ("act/y",)),), (Recv("act/y", 0, tag="t"),)))
    rt = LocalRuntime(2)
    rt.load({0: {"act/x": np.ones(2)}})
    with pytest.raises(ProgramError, match=r"device 1 instruction #0 Recv\(act/y from 0, tag t\)"):
        rt.run(prog)
    assert rt.devices[0].memory == {}  # refused before any instruction ran


def test_collective_a_member_never_issues_is_a_deadlock_not_a_silent_no_op():
    # device 0's AllReduce is its last instruction; device 1 never issues it
    last = Program(2, ((Collective("all_reduce", "grad/g", "grad/g", (0, 1)),), ()))
    with pytest.raises(ProgramError, match=r"device 0 instruction #0 Collective\(all_reduce.*waits for "
                                           r"device\(s\) \[1\], which never reach it"):
        last.validate()
    rt = LocalRuntime(2)
    rt.load({0: {"grad/g": np.ones(2)}, 1: {"grad/g": np.ones(2)}})
    with pytest.raises(ProgramError, match="deadlock"):
        rt.run(last)
    # the message names the collective, not the instruction after it
    follow = Program(2, ((Collective("all_reduce", "grad/g", "grad/g", (0, 1)),
                          Compute("copy", ("grad/g",), ("act/y",))), ()))
    with pytest.raises(ProgramError, match=r"device 0 instruction #0 Collective"):
        follow.validate()


def test_runtime_errors_name_device_and_instruction():
    rt = LocalRuntime(2)
    rt.load({1: {"act/a": np.ones((2, 3)), "act/b": np.ones((2, 3))}})
    bad_shapes = Program(2, ((), (Compute("matmul", ("act/a", "act/b"), ("act/c",)),)))
    with pytest.raises(ProgramError, match=r"device 1 instruction #0 Compute\(matmul.*ValueError"):
        rt.run(bad_shapes)
    missing = Program(2, ((Send("act/nope", 1),), (Recv("act/q", 0),)))
    with pytest.raises(ProgramError, match=r"device 0 instruction #0 .*'act/nope'.*holds: nothing"):
        rt.run(missing)
    with pytest.raises(ProgramError, match=r"device 0 instruction #0 Compute\(evil"):
        rt.run(Program(2, ((Compute("evil", (), ("x",)),), ())))
    with pytest.raises(ProgramError, match="program for 3 devices"):
        rt.run(Program(3, ((), (), ())))
    with pytest.raises(ProgramError, match="root 5, which is not in its group"):
        rt.run(Program(2, ((Collective("broadcast", "act/a", "act/a", (0, 1), root=5),),
                           (Collective("broadcast", "act/a", "act/a", (0, 1), root=5),))))
    with pytest.raises(ParasimError, match="valid: local, ray"):
        make_runtime("gpu", 2)


def test_failure_injection_hook():
    prog, inputs, _ = collective_program("all_reduce", 4, 8)
    rt = LocalRuntime(4)
    rt.load(inputs)
    rt.inject_failure(2, 0, "power loss")
    with pytest.raises(DeviceFailure, match="device 2 failed at instruction #0 .*power loss"):
        rt.run(prog)


def test_device_alone_and_categories():
    assert [category_of(n) for n in ("param/w", "grad/w", "opt/m", "act/x", "x", "paramx", "other/y")] == \
        ["param", "grad", "opt", "act", "other", "other", "other"]
    d = Device(0)
    d.load({"act/x": np.ones(3), "y": np.ones(2, dtype=np.float32)})
    assert d.bytes_by_category() == {"param": 0, "grad": 0, "opt": 0, "act": 24, "other": 8}
    out = d.run_batch(((0, Compute("scale", ("act/x",), ("act/x2",), attrs={"factor": 2.0})),
                       (1, Send("act/x2", 1))))
    np.testing.assert_array_equal(out[0], np.full(3, 2.0))
    assert d.bytes_sent == 24 and d.messages_sent == 1
