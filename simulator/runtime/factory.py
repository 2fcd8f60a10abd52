"""Make a runtime by name: the one place that knows both implementations (base.py knows neither)."""

from __future__ import annotations

from ..errors import ProgramError
from .base import Runtime
from .local import LocalRuntime
from .ray_runtime import RayRuntime


def make_runtime(kind: str, n_devices: int, address: str | None = None, **kw) -> Runtime:
    """'local' (in-process devices) or 'ray' (one actor per device; address= joins a cluster)."""
    if kind == "local":
        return LocalRuntime(n_devices)
    if kind == "ray":
        return RayRuntime(n_devices, address=address, **kw)
    raise ProgramError(f"unknown runtime {kind!r}; valid: local, ray")
