"""The registry of compute kernels that `Compute(op=...)` instructions name.

A kernel is a pure numpy function `kernel(*inputs, **attrs) -> array | tuple of arrays`; it never
mutates its inputs (the runtimes rely on this: a sent tensor is the value at the Send). Names are
looked up in this table, never evaluated. Strategy packages register their own kernels in modules
listed in `_KERNEL_MODULES`, imported on first lookup.
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

from .errors import ProgramError

KERNELS: dict[str, Callable] = {}
_KERNEL_MODULES = ("simulator.parallel.kernels", "simulator.auto.op_kernels", "simulator.auto.op_kernels_nn",
                  "simulator.parallel.zero_kernels", "simulator.parallel.moe_kernels", "simulator.parallel.tp_kernels",
                  "simulator.parallel.cp_kernels")
_loaded = False


def kernel(name: str):
    """Decorator: register a pure function under `name`."""

    def register(fn: Callable) -> Callable:
        KERNELS[name] = fn
        return fn

    return register


def get_kernel(name: str) -> Callable:
    global _loaded
    if name not in KERNELS and not _loaded:
        _loaded = True
        for mod in _KERNEL_MODULES:
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as e:  # a plugin package not written yet
                if not (e.name and mod.startswith(e.name)):
                    raise
    if name not in KERNELS:
        raise ProgramError(f"unknown compute kernel {name!r}; known: {', '.join(sorted(KERNELS))}")
    return KERNELS[name]


def run_kernel(name: str, inputs: list, attrs: dict) -> tuple:
    out = get_kernel(name)(*inputs, **attrs)
    return out if isinstance(out, tuple) else (out,)


@kernel("matmul")
def matmul(a, b):
    return a @ b  # (m, k) @ (k, n) -> (m, n)


@kernel("add")
def add(a, b):
    return a + b


@kernel("scale")
def scale(a, factor: float):
    return a * factor


@kernel("copy")
def copy(a):
    return np.array(a, copy=True)


@kernel("cast")
def cast(a, dtype: str):
    return a.astype(dtype)


@kernel("split")
def split(a, parts: int, index: int, axis: int = 0):
    """This part of `a` cut into `parts` along `axis` (np.array_split convention)."""
    return np.array_split(a, parts, axis=axis)[index].copy()


@kernel("reshape")
def reshape(a, shape: tuple):
    return np.reshape(a, shape).copy()


@kernel("concat")
def concat(*arrays, axis: int = 0):
    return np.concatenate(arrays, axis=axis)


@kernel("fill")
def fill(shape: tuple = (), value: float = 0.0, dtype: str = "float64"):
    return np.full(shape, value, dtype=dtype)
