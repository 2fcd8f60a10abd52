"""BLAS on one thread for the processes parasim starts (the app's server, calibration, the tests).

An emulated device multiplies tiny matrices (a 16 x 256 by 256 x 256 product is a million
FLOPs): a BLAS thread pool cannot speed that up, and on a machine with more runnable threads
than cores its spinning workers slow every product down. Measured here at load 15 on 2 cores:
200 such products took 1.28 s with OpenBLAS's default pool and 0.039 s on one thread. A value the
user set in the environment is kept (`pinned`).
"""

from __future__ import annotations

PINNED_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def pinned(env) -> dict:
    """`env` (a mapping such as os.environ) with BLAS pinned to one thread where it does not say."""
    return {**PINNED_BLAS, **dict(env)}
