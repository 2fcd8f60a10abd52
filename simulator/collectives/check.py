"""Is a collective's result right? Exact where the algorithm only moves data, a derived bound where it adds.

- all_gather, broadcast, all_to_all, barrier, and every reduction by max or min: the algorithm
  moves (or selects) values without arithmetic, so each element must equal the reference bit for
  bit (NaN matches NaN at the same place). No tolerance.
- sum and mean (all_reduce, reduce_scatter, reduce): an algorithm adds the n inputs in its own
  order (a ring, a tree, halving-doubling). Whatever the order, floating-point summation of n
  terms satisfies  |fl(x_1 + ... + x_n) - (x_1 + ... + x_n)| <= gamma_{n-1} * sum_i |x_i|,
  gamma_k = k u / (1 - k u), u = eps / 2 the unit roundoff of the dtype (Higham, "Accuracy and
  Stability of Numerical Algorithms", 2nd ed., SIAM 2002, eq. (4.4) and Lemma 3.1). mean divides
  once more (one more rounding: gamma_n). We compare with the exact-as-possible reference, the
  same reduction of the inputs in float64, so per element
      |result - reference_float64| <= (gamma_n(u_dtype) + gamma_n(u_float64)) * sum_i |x_i| (/ n for mean),
  the second term covering the float64 reference's own rounding. A result outside that bound is
  wrong in any summation order; one inside it is what floating point allows.

Every check also reports the measured error against float64 (`max_abs_error_vs_float64`,
`max_rel_error_vs_float64`): for float16 (or any low-precision wire format) that is the number a
student should look at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ParasimError
from .reference import reference

ARITHMETIC_OPS = ("sum", "mean")
REDUCING_KINDS = ("all_reduce", "reduce_scatter", "reduce")


def unit_roundoff(dtype) -> float:
    """u = eps / 2 (2^-53 for float64, 2^-24 for float32, 2^-11 for float16)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def gamma(k: int, u: float) -> float:
    """Higham's gamma_k = k u / (1 - k u); inf once k u >= 1 (no bound left)."""
    return k * u / (1 - k * u) if k * u < 1 else float("inf")


def is_exact(kind: str, op: str) -> bool:
    """True when the collective moves or selects values without rounding: compare bit for bit."""
    return kind not in REDUCING_KINDS or op not in ARITHMETIC_OPS


@dataclass(frozen=True)
class Verdict:
    correct: bool
    exact: bool  # compared bit for bit (no arithmetic in the algorithm)
    max_abs_error_vs_float64: float
    max_rel_error_vs_float64: float
    bound_rel: float | None  # the largest error allowed, relative to sum |x_i| (None when exact)
    reason: str = ""  # why it is wrong (empty when correct)

    def to_dict(self) -> dict:
        return {"correct": self.correct, "check": "bit-exact" if self.exact else "summation error bound",
                "max_abs_error_vs_float64": self.max_abs_error_vs_float64,
                "max_rel_error_vs_float64": self.max_rel_error_vs_float64, "error_bound_rel": self.bound_rel}


def check_collective(kind: str, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray | None], op: str = "sum",
                     root: int = 0, axis: int | None = None) -> Verdict:
    """Compare every rank's output of collective `kind` with the reference (see the module docstring)."""
    n = len(inputs)
    if len(outputs) != n:
        raise ParasimError(f"{n} inputs but {len(outputs)} outputs: one output per rank")
    dtype = np.asarray(inputs[root if kind == "broadcast" else 0]).dtype
    same = reference(kind, inputs, op, root, axis)
    exact64 = reference(kind, [np.asarray(x, dtype=np.float64) for x in inputs], op, root, axis)
    exact = is_exact(kind, op)
    scale = None
    if not exact:
        scale = reference(kind, [np.abs(np.asarray(x, dtype=np.float64)) for x in inputs], "sum", root, axis)
        if op == "mean":
            scale = [None if s is None else s / n for s in scale]
    bound_rel = None if exact else gamma(n, unit_roundoff(dtype)) + gamma(n, unit_roundoff(np.float64))
    abs_err = rel_err = 0.0
    reason = ""
    for r in range(n):
        got, want, want64 = outputs[r], same[r], exact64[r]
        if want is None:
            if got is not None:
                reason = reason or f"rank {r} should hold no result after {kind}, got an array"
            continue
        got = None if got is None else np.asarray(got)
        if got is None or got.shape != want.shape:
            reason = reason or (f"rank {r}: result shape {None if got is None else got.shape} "
                                f"!= expected {want.shape}")
            continue
        finite = np.isfinite(want64)
        if not np.array_equal(np.isfinite(got), np.isfinite(want)) or not np.array_equal(
                got[~np.isfinite(want)], want[~np.isfinite(want)], equal_nan=True):
            reason = reason or f"rank {r}: NaN/inf where the reference has none (or the reverse)"
            continue
        diff = np.abs(got.astype(np.float64) - want64)[finite]
        if diff.size:
            abs_err = max(abs_err, float(diff.max()))
            mag = np.abs(want64)[finite]
            rel_err = max(rel_err, float((diff / np.maximum(mag, np.finfo(np.float64).tiny)).max()))
        if exact:
            if not np.array_equal(got, want, equal_nan=True):
                k = int(np.flatnonzero(got.ravel() != want.ravel())[0])
                reason = reason or (f"rank {r}: element {k} is {got.ravel()[k]!r}, expected {want.ravel()[k]!r} "
                                    f"exactly ({kind} moves data without arithmetic)")
        else:
            allowed = bound_rel * scale[r][finite]
            over = diff > allowed
            if over.any():
                k = int(np.flatnonzero(over)[0])
                reason = reason or (f"rank {r}: error {diff[k]:.3g} exceeds the summation bound {allowed[k]:.3g} "
                                    f"(gamma_{n} x sum|x_i| in {dtype})")
    return Verdict(not reason, exact, abs_err, rel_err, bound_rel, reason)
