"""RayRuntime: each Device is a Ray actor; the shared driver loop submits calls with `.remote`.

Ray idioms (Ray docs, "Anti-patterns" and "Pass object arguments"): actors declared with
num_cpus=0 so n devices fit on any machine; every call is submitted without waiting; a chunk a
device sends is one return value of its call (num_returns = chunks + 1) and its ObjectRef is
passed as a TOP-LEVEL argument of the receiving device's next call, so Ray resolves it actor to
actor and the driver never fetches a chunk; the driver ray.get's the small acknowledgements once
at the end of `run`. Calls from one driver to one actor run in submission order, and every call
depends only on calls submitted before it, so nothing can deadlock.

`ray` is imported inside functions only. `ray.init()` is embedded by default (no dashboard,
num_cpus fixed, worker logs not forwarded); `address=` joins an existing cluster; an already
initialised Ray is reused (and then not shut down by `close`).
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import DeviceFailure, ParasimError
from .base import DEVICE_METHODS, Runtime
from .device import Device


class _Failure(Exception):
    """DeviceFailure in a form pickle can rebuild (its args are its constructor's)."""

    def __init__(self, rank: int, instruction: str, reason: str):
        super().__init__(rank, instruction, reason)


class _DeviceActor:
    """The actor body: a Device, one entry point. Returns n results + an acknowledgement."""

    def __init__(self, rank: int):
        self.device = Device(rank)

    def invoke(self, method: str, *args):
        if method not in DEVICE_METHODS:
            raise ParasimError(f"device method {method!r} is not callable; valid: {', '.join(DEVICE_METHODS)}")
        try:
            outs = getattr(self.device, method)(*args)
        except DeviceFailure as e:
            raise _Failure(e.rank, e.instruction, e.reason) from None
        return (*outs, True) if outs else True


def ensure_ray(address: str | None = None, num_cpus: int = 2) -> bool:
    """Initialise Ray unless it already is; True if this call started it."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    return True


class RayRuntime(Runtime):
    name = "ray"

    def __init__(self, n_devices: int, address: str | None = None, num_cpus: int = 2):
        super().__init__(n_devices)
        import ray

        self._owns_ray = ensure_ray(address, num_cpus)
        actor = ray.remote(num_cpus=0, max_restarts=0)(_DeviceActor)
        self.actors = [actor.remote(r) for r in range(self.n_devices)]

    def _call(self, rank: int, method: str, args: tuple, n_out: int) -> tuple[list, Any]:
        refs = self.actors[rank].invoke.options(num_returns=n_out + 1).remote(method, *args)
        if n_out == 0:
            return [], refs
        return list(refs[:-1]), refs[-1]

    def _wait(self, handles: list) -> list:
        import ray

        try:
            return ray.get(handles)
        except ray.exceptions.RayTaskError as e:
            for h in handles:  # let every call finish, so no failed result is left unread
                try:
                    ray.get(h)
                except Exception:
                    pass
            cause = getattr(e, "cause", None)
            if isinstance(cause, _Failure):
                raise DeviceFailure(*cause.args) from None
            if isinstance(cause, ParasimError):
                raise cause from None
            raise
        except ray.exceptions.RayActorError as e:
            raise DeviceFailure(-1, "a Ray call", f"actor died: {e}") from e

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        if self._owns_ray:
            ray.shutdown()

    def __repr__(self) -> str:
        return f"RayRuntime({self.n_devices} actors)"
