"""Shared fixtures. Ray starts ONCE per test session (num_cpus=2), only if a test asks for it, the
way parasim starts it (`ensure_ray`: loopback only, Ray's reports off stdout)."""

import importlib.util
import os
from pathlib import Path

import pytest


def _pin_blas() -> None:
    """BLAS on one thread before anything imports numpy (simulator/blas.py, read as a file: importing
    the simulator package would import numpy first). The devices' tiny products gain nothing from a
    thread pool, whose spinning workers slow them on a loaded machine; the CLI subprocesses, app
    servers and Ray actors the tests start inherit it. A value already set is kept."""
    spec = importlib.util.spec_from_file_location("_parasim_blas", Path(__file__).parents[1] / "simulator" / "blas.py")
    blas = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(blas)
    os.environ.update(blas.pinned(os.environ))


_pin_blas()


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from simulator.runtime.ray_start import ensure_ray

    started = ensure_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_runtime(ray_session):
    """An 8-actor RayRuntime shared by the Ray tests (tensors are cleared before each use). Its
    devices are FaultyDevices (Devices until a fault is armed), so the fault tests share it too."""
    from simulator.runtime.faulty import FaultyDevice
    from simulator.runtime.ray_runtime import RayRuntime

    rt = RayRuntime(8, device_class=FaultyDevice)
    yield rt
    rt.close()
