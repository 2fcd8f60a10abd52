"""Property-based robustness: random strategy strings, layouts, TrainConfig fields and CLI argv
never crash or hang (only exit codes 0/1/2 or ParasimError), and programs with unmatched
send/recv fail fast on both runtimes with the devices and instructions named."""

import contextlib
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.errors import ParasimError, ProgramError
from simulator.faults import parse_faults
from simulator.layout import Layout
from simulator.mesh import DeviceMesh
from simulator.models import MLPConfig
from simulator.parallel.config import SCHEDULES, STRATEGIES, TrainConfig
from simulator.program import ProgramBuilder, Recv, Send
from simulator.runtime.local import LocalRuntime

FAST = settings(max_examples=40, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
small = st.integers(min_value=-2, max_value=9)


@FAST
@given(st.text(max_size=20))
def test_fault_specs_parse_or_refuse(text):
    try:
        faults = parse_faults(text)
    except ParasimError as e:
        assert "\n" not in str(e)
        return
    assert all(f.device >= 0 and f.step >= 0 for f in faults)


@FAST
@given(st.sampled_from(STRATEGIES + ("bogus", "", "DP")), small, small, small, small, small, small,
       st.sampled_from(SCHEDULES + ("nope",)), st.one_of(st.floats(-1, 1), st.just(float("nan"))))
def test_train_config_validates_or_refuses(strategy, devices, dp, pp, tp, batch, mbs, schedule, lr):
    try:
        cfg = TrainConfig(MLPConfig(in_dim=4, hidden=4, layers=4, classes=2), strategy=strategy, devices=devices,
                          dp=dp, pp=pp, tp=tp, global_batch=batch, microbatches=mbs, schedule=schedule, lr=lr).resolved()
    except ParasimError as e:
        assert "\n" not in str(e)
        return
    assert cfg.dp * cfg.pp * cfg.tp == cfg.devices and cfg.global_batch % (cfg.dp * cfg.m) == 0


@FAST
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_layouts_shard_and_unshard(sizes, data):
    mesh = DeviceMesh({f"a{i}": s for i, s in enumerate(sizes)})
    ndim = data.draw(st.integers(1, 3))
    axes = list(mesh.axis_names)
    dims = [[] for _ in range(ndim)]
    for a in axes:
        d = data.draw(st.integers(-1, ndim - 1))
        if d >= 0:
            dims[d].append(a)
    layout = Layout(mesh, dims)
    shape = tuple(int(np.prod([mesh.axis_size(a) for a in d], dtype=int)) * data.draw(st.integers(1, 2))
                  for d in dims)
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(float)
    np.testing.assert_array_equal(layout.unshard(layout.shard(x)), x)


ARGS = st.lists(st.sampled_from([
    "train", "checkpoint", "convert", "show", "--strategy", "dp", "pp", "zero1", "hybrid", "tp", "--devices", "1",
    "2", "3", "-1", "0", "--steps", "--fail", "1@0", "0@0", "slow:0@0", "x@y", "--checkpoint-every", "--json",
    "--model", "mlp", "--batch", "4", "--layers", "2", "--hidden", "4", "--dp", "--pp", "--microbatches",
    "--bogus", "memory", "simulate", "collective", "/nonexistent", "--to-strategy", "--help"]), max_size=9)


@settings(max_examples=60, deadline=10000, suppress_health_check=[HealthCheck.too_slow])
@given(ARGS)
def test_cli_random_argv_exits_cleanly(argv):
    if "--help" in argv or any(a == "app" for a in argv):
        argv = [a for a in argv if a != "--help"]
    if argv[:1] == ["train"] or "train" in argv:
        argv = argv + ["--model", "mlp", "--steps", "1", "--batch", "4", "--layers", "2", "--hidden", "4"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse usage errors
            code = e.code
    assert code in (0, 1, 2), (argv, code, err.getvalue()[-500:])


def _unmatched(kind):
    b = ProgramBuilder(3, name=f"unmatched {kind}")
    b.compute(0, "scale", ("param/w",), ("act/h",), attrs={"factor": 2.0})
    if kind == "send":
        b.add(0, Send("act/h", 2, tag="t"))
    else:
        b.add(1, Recv("act/x", 2, tag="t"))
    return b.build()


@pytest.mark.parametrize("kind, where", [("send", "device 0 instruction #1"), ("recv", "device 1 instruction #0")])
def test_unmatched_send_recv_fail_fast_local(kind, where):
    rt = LocalRuntime(3)
    rt.load({0: {"param/w": np.ones(2)}})
    with pytest.raises(ProgramError, match=where):
        rt.run(_unmatched(kind))


@pytest.mark.ray
@pytest.mark.parametrize("kind, where", [("send", "device 0 instruction #1"), ("recv", "device 1 instruction #0")])
def test_unmatched_send_recv_fail_fast_ray(ray_session, kind, where):
    from simulator.runtime.ray_runtime import RayRuntime

    rt = RayRuntime(3, timeout_s=10.0)
    try:
        rt.load({0: {"param/w": np.ones(2)}})
        with pytest.raises(ProgramError, match=where):
            rt.run(_unmatched(kind))
    finally:
        rt.close()
