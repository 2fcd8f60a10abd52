"""Units and conversions, in one place.

Names carry their unit (`nbytes`, `time_s`, `bandwidth_GBps`, `latency_us`, `flops`). Decimal
prefixes (1 GB = 1e9 bytes) as in vendor datasheets and nccl-tests; binary ones only where a
name says GiB.
"""

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB = 1024, 1024**2, 1024**3
US, MS = 1e-6, 1e-3
TFLOP = 1e12

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1}


def GBps(x: float) -> float:
    """GB/s -> bytes per second."""
    return x * GB


def us(x: float) -> float:
    """Microseconds -> seconds."""
    return x * US


def fmt_bytes(nbytes: float) -> str:
    """Human-readable decimal bytes: 1.5 GB, 320 kB."""
    nbytes = float(f"{nbytes:.3g}")  # round first: 999999.9 B -> 1 MB, not "1e+03 kB"
    for unit, scale in (("TB", TB), ("GB", GB), ("MB", MB), ("kB", KB)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


LONG_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0))


def fmt_time(time_s: float) -> str:
    """The one formatter of every duration parasim prints (CLI, app, figures): 3 ns, 80 µs, 35 ms,
    1.2 s, 68.6 min, 5.2 h, 3.1 d, three significant digits. Minutes, hours and days start at
    twice their size (90 s, 100 min, 30 h), so a value never reads as 1.1 of a unit."""
    for unit, size in LONG_UNITS:
        if abs(time_s) >= 2 * size:
            return f"{time_s / size:.3g} {unit}"
    time_s = float(f"{time_s:.3g}")  # round first: 0.000999999 s -> 1 ms, not "1e+03 µs"
    for unit, scale in (("s", 1.0), ("ms", MS), ("µs", US)):
        if abs(time_s) >= scale:
            return f"{time_s / scale:.3g} {unit}"
    return f"{time_s * 1e9:.3g} ns"


def nbytes_of(value) -> int:
    """Bytes held by a numpy array, or a (nested) tuple/list/dict of them."""
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes_of(v) for v in value)
    return 0
