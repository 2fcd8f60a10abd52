"""Runtimes that really execute a Program on emulated devices: in-process, or one Ray actor each."""

from .base import RunResult, Runtime
from .device import Device
from .factory import make_runtime
from .local import LocalRuntime

__all__ = ["Device", "LocalRuntime", "RunResult", "Runtime", "make_runtime"]
