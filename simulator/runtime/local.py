"""LocalRuntime: the devices live in this process and every call is a direct method call."""

from __future__ import annotations

from typing import Any

from .base import DEVICE_METHODS, Runtime
from .device import Device


class LocalRuntime(Runtime):
    """Runs calls immediately, in the driver's order; results are plain values, failures raise at once."""

    name = "local"

    def __init__(self, n_devices: int):
        super().__init__(n_devices)
        self.devices = [Device(r) for r in range(self.n_devices)]

    def _call(self, rank: int, method: str, args: tuple, n_out: int) -> tuple[list, Any]:
        assert method in DEVICE_METHODS, method
        outs = getattr(self.devices[rank], method)(*args)
        assert len(outs) == n_out, (method, len(outs), n_out)
        return outs, None

    def _wait(self, handles: list) -> list:
        return list(handles)

    def __repr__(self) -> str:
        return f"LocalRuntime({self.n_devices} devices)"
