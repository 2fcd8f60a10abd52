"""The registry of compute kernels that `Compute(op=...)` instructions name.

A kernel is a pure numpy function `kernel(*inputs, **attrs) -> array | tuple of arrays`; it never
mutates its inputs (the runtimes rely on this: a sent tensor is the value at the Send). Names are
looked up in this table, never evaluated. A strategy package registers its own kernels with
`@kernel` in a module its compiler imports (parallel/layer_kernels.py, tp_kernels.py, ...,
auto/kernels.py): nothing here names an upper layer. A runtime whose devices live in other
processes ships the kernels a program uses with `Device.register_kernels` (functions travel by
reference: unpickling one imports its module, which registers it).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import ProgramError

KERNELS: dict[str, Callable] = {}


def kernel(name: str):
    """Decorator: register a pure function under `name`."""

    def register(fn: Callable) -> Callable:
        KERNELS[name] = fn
        return fn

    return register


def register_kernels(kernels: dict[str, Callable]) -> None:
    """Add kernels by name (what a device in another process receives from the driver)."""
    KERNELS.update(kernels)


def get_kernel(name: str) -> Callable:
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
