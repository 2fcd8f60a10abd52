"""Shared fixtures. Ray starts ONCE per test session (num_cpus=2), only if a test asks for it, the
way parasim starts it (`ensure_ray`: loopback only, Ray's reports off stdout)."""

import pytest


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
