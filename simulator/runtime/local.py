"""LocalRuntime: the devices live in this process and every call is a direct method call."""

from __future__ import annotations

from typing import Any

from ..errors import DeviceFailure
from .base import DEVICE_METHODS, Runtime
from .device import Device


class LocalRuntime(Runtime):
    """Runs calls immediately, in the driver's order; results are plain values, failures raise at once."""

    name = "local"

    def __init__(self, n_devices: int, device_class: type = Device):
        super().__init__(n_devices)
        self.device_class = device_class
        self.devices = [device_class(r) for r in range(self.n_devices)]

    def kill(self, rank: int, reason: str = "killed") -> None:
        """The device stops for good: every later call raises DeviceFailure (until `restart`)."""
        self._check_rank(rank)
        self.devices[rank].failed = DeviceFailure(rank, "its first call after the kill", reason)

    def restart(self, *ranks: int) -> None:
        """A fresh, empty device in place of each rank (as a replaced machine would be)."""
        for rank in ranks:
            self._check_rank(rank)
            self.devices[rank] = self.device_class(rank)
            self._kernels_on[rank] = set()

    def alive(self, rank: int) -> bool:
        return self.devices[rank].failed is None

    def _call(self, rank: int, method: str, args: tuple, n_out: int) -> tuple[list, Any]:
        assert method in DEVICE_METHODS, method
        outs = getattr(self.devices[rank], method)(*args)
        assert len(outs) == n_out, (method, len(outs), n_out)
        return outs, None

    def _wait(self, handles: list) -> list:
        return list(handles)

    def __repr__(self) -> str:
        return f"LocalRuntime({self.n_devices} devices)"
