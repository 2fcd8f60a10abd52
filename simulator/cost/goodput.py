"""Goodput of a long training run with failures and checkpoints (Young 1974; Daly 2006).

Symbols: n devices, each failing independently at rate 1 / MTBF_device (exponential), so the
system fails at rate 1/M with M = MTBF_device / n. A checkpoint of S bytes is written in
C = S / write bandwidth and read back in R = S / read bandwidth + restart time (rescheduling,
re-initialising the job). Every tau seconds of useful work a checkpoint is taken.

First-order model (Young 1974, "A first order approximation to the optimum checkpoint interval",
CACM 17(9)): per useful second, checkpoints cost C / tau; failures arrive 1/M per second and
each loses on average half a segment, (tau + C)/2, plus the restart R. Wall time per useful
second is

    1 + waste(tau),   waste(tau) = C / tau + (R + (tau + C) / 2) / M
    goodput(tau) = 1 / (1 + waste(tau))

d waste / d tau = -C / tau^2 + 1 / (2M) = 0 gives Young's interval tau* = sqrt(2 C M).
Daly 2006 ("A higher order estimate of the optimum checkpoint interval for restart dumps",
FGCS 22(3)) refines it for larger C / M:
    tau_D = sqrt(2 C M) (1 + sqrt(C / (2M)) / 3 + C / (18 M)) - C    for C < 2M, else M.
The model needs C and R small against M (a run that fails before it can checkpoint makes no
progress); `goodput` refuses C + R >= M.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from simulator.errors import ParasimError
from simulator.units import fmt_time

HOUR_S = 3600.0
CHECKPOINT_BYTES_PER_PARAM = 14   # bf16 params (2) + fp32 master, momentum, variance (12); no grads


def _pos(**kw) -> None:
    for name, v in kw.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ParasimError(f"{name} must be a finite number > 0, got {v!r}")


def checkpoint_nbytes(params: float, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM) -> float:
    """Bytes of a full training checkpoint: parameters and optimizer states (mixed-precision Adam)."""
    _pos(params=params, bytes_per_param=bytes_per_param)
    return params * bytes_per_param


@dataclass(frozen=True)
class FailureModel:
    """Devices, per-device MTBF, checkpoint size and storage speed (all validated)."""

    n_devices: int
    device_mtbf_h: float                # e.g. 50,000 h per GPU (an assumption; vendors do not publish one)
    checkpoint_nbytes: float
    write_bandwidth_Bps: float          # aggregate bandwidth to storage
    read_bandwidth_Bps: float | None = None   # None: as write
    restart_s: float = 0.0              # rescheduling + job start, excluding the checkpoint read

    def __post_init__(self):
        if not isinstance(self.n_devices, int) or self.n_devices < 1:
            raise ParasimError(f"n_devices must be a positive integer, got {self.n_devices!r}")
        _pos(device_mtbf_h=self.device_mtbf_h, write_bandwidth_Bps=self.write_bandwidth_Bps)
        if self.read_bandwidth_Bps is not None:
            _pos(read_bandwidth_Bps=self.read_bandwidth_Bps)
        if not (math.isfinite(self.checkpoint_nbytes) and self.checkpoint_nbytes >= 0):
            raise ParasimError(f"checkpoint_nbytes must be >= 0, got {self.checkpoint_nbytes}")
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ParasimError(f"restart_s must be >= 0, got {self.restart_s}")

    @property
    def system_mtbf_s(self) -> float:
        """M = MTBF_device / n (independent exponential failures)."""
        return self.device_mtbf_h * HOUR_S / self.n_devices

    @property
    def checkpoint_time_s(self) -> float:
        """C = bytes / write bandwidth."""
        return self.checkpoint_nbytes / self.write_bandwidth_Bps

    @property
    def restore_time_s(self) -> float:
        """R = bytes / read bandwidth + restart."""
        return self.checkpoint_nbytes / (self.read_bandwidth_Bps or self.write_bandwidth_Bps) + self.restart_s

    def __repr__(self) -> str:
        return (f"FailureModel({self.n_devices} devices, MTBF {self.device_mtbf_h:g} h each -> system "
                f"{self.system_mtbf_s / HOUR_S:.3g} h; C = {self.checkpoint_time_s:.3g} s, R = {self.restore_time_s:.3g} s)")


@dataclass(frozen=True)
class Goodput:
    interval_s: float                 # tau, useful work between checkpoints
    goodput: float                    # useful / wall
    checkpoint_overhead: float        # C / tau, per useful second
    lost_work: float                  # (tau + C) / (2M)
    restart: float                    # R / M
    wall_time_s: float | None = None  # for a run of `useful_s`
    expected_failures: float | None = None

    def to_dict(self) -> dict:
        """Plain data: every field (dataclasses.asdict gives the same)."""
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return (f"Goodput({self.goodput:.2%} at tau = {self.interval_s:.4g} s: checkpoints {self.checkpoint_overhead:.2%}, "
                f"lost work {self.lost_work:.2%}, restarts {self.restart:.2%})")


def young_interval_s(fm: FailureModel) -> float:
    """Young 1974: tau* = sqrt(2 C M)."""
    return math.sqrt(2 * fm.checkpoint_time_s * fm.system_mtbf_s)


def daly_interval_s(fm: FailureModel) -> float:
    """Daly 2006 higher-order optimum: sqrt(2CM)(1 + sqrt(C/(2M))/3 + C/(18M)) - C, or M if C >= 2M."""
    C, M = fm.checkpoint_time_s, fm.system_mtbf_s
    if C >= 2 * M:
        return M
    return math.sqrt(2 * C * M) * (1 + math.sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C


def goodput(fm: FailureModel, interval_s: float, useful_s: float | None = None) -> Goodput:
    """Expected goodput with a checkpoint every `interval_s` of useful work (module docstring);
    with `useful_s`, the expected wall time and number of failures of a run of that much work."""
    _pos(interval_s=interval_s)
    C, R, M = fm.checkpoint_time_s, fm.restore_time_s, fm.system_mtbf_s
    if C + R >= M:
        raise ParasimError(f"checkpoint C = {fmt_time(C)} plus restore R = {fmt_time(R)} must be well below the system "
                           f"MTBF M = {fmt_time(M)} ({fm.n_devices} devices x {fm.device_mtbf_h:g} h); the first-order model "
                           "does not hold")
    if interval_s + C >= M:
        raise ParasimError(f"interval {fmt_time(interval_s)} + checkpoint {fmt_time(C)} must be below the system MTBF {fmt_time(M)}")
    ck, lost, rst = C / interval_s, (interval_s + C) / (2 * M), R / M
    g = 1 / (1 + ck + lost + rst)
    wall = fails = None
    if useful_s is not None:
        _pos(useful_s=useful_s)
        wall = useful_s / g
        fails = wall / M
    return Goodput(interval_s, g, ck, lost, rst, wall, fails)


def goodput_curve(fm: FailureModel, intervals_s=None, n_points: int = 200) -> list[Goodput]:
    """Goodput against the interval: `intervals_s`, or `n_points` geometrically spaced from tau*/30
    to 30 tau* (tau* Young's interval), clipped below M - C. For plots in the app."""
    if intervals_s is None:
        if n_points < 3:
            raise ParasimError(f"a curve needs at least 3 points, got {n_points}")
        if fm.checkpoint_time_s <= 0:
            raise ParasimError("with a free checkpoint (C = 0) the optimum interval is 0: nothing to plot")
        t0 = young_interval_s(fm)
        hi = min(30 * t0, 0.999 * (fm.system_mtbf_s - fm.checkpoint_time_s))
        lo = min(t0 / 30, hi / 2)
        intervals_s = [lo * (hi / lo) ** (i / (n_points - 1)) for i in range(n_points)]
    return [goodput(fm, float(t)) for t in intervals_s]
