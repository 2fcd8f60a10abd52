"""Shared fixtures. Ray starts ONCE per test session (num_cpus=2), only if a test asks for it."""

import logging

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
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
