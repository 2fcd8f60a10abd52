"""DualPipe (DeepSeek-V3 technical report, Sec. 3.2.1; github.com/deepseek-ai/DualPipe): two model
copies fed from opposite ends, and DualPipeV, its one-copy V-shaped form."""

from __future__ import annotations

from simulator.errors import ParasimError
from simulator.parallel.schedules import Action, Schedule, stage_placement


def check_dualpipe(p: int, m: int) -> None:
    """DualPipe's rules, one line each: an even number of stages, an even m >= 2p."""
    if p < 2 or p % 2:
        raise ParasimError(f"DualPipe pairs device d with device p-1-d, so it needs an even number of stages; "
                           f"got {p}")
    if m % 2 or m < 2 * p:
        raise ParasimError(f"DualPipe splits the micro-batches between its two directions and needs m >= 2p: "
                           f"m = {m} with p = {p} (need an even m >= {2 * p})")


def dualpipe(p: int, m: int, split: bool = True) -> Schedule:
    """DualPipe (DeepSeek-V3 technical report, Sec. 3.2.1; github.com/deepseek-ai/DualPipe,
    dualpipe.py `step`): two copies of the p-stage model, one fed from device 0 (chunk 0 of device
    d is its stage d) and one from device p-1 (chunk 1 of device d is its stage p-1-d), each taking
    m/2 micro-batches (ids 0..m/2-1 and m/2..m-1). Every device runs the repository's eight steps,
    "phase 0" being the direction whose first stage is nearer (its half of the devices):

        1 nF0   2 nF0F1   3 nB1W1F1 (zero bubble)   4 nF0B1F1B0 (main: F and B of different
        micro-batches paired)   5 nB1F1B0   6 nB1B0 (second half zero bubble)   7 nWB0   8 nW

    A zero-bubble backward is B now and W queued (first in, first out); `split=False` turns every
    backward into BW (for layers that emit both together). Needs p even and m >= 2p, m even.
    Bubble (p/2 - 1)(F&B + B - 3W), 2x parameters, p + 1 micro-batches of activations
    (the report's Table 2)."""
    check_dualpipe(p, m)
    return Schedule("dualpipe", p, m, 2, tuple(_dualpipe_row(rank, p, m // 2, split) for rank in range(p)),
                    bidirectional=True)


class _DualPipeDevice:
    """One device's row of DualPipe being written: micro-batch counters per direction and the
    queue of deferred weight-gradient steps (W)."""

    def __init__(self, second: bool, half: int, split: bool):
        self.second, self.half, self.split = second, half, split
        self.nf, self.nb, self.wq, self.row = [0, 0], [0, 0], [], []
        self.phase = "warmup"

    def F(self, ph: int) -> None:
        d = ph ^ 1 if self.second else ph
        self.row.append(Action("F", d * self.half + self.nf[d], d, self.phase))
        self.nf[d] += 1

    def B(self, ph: int, zb: bool = False) -> None:
        d = ph ^ 1 if self.second else ph
        mb = d * self.half + self.nb[d]
        self.nb[d] += 1
        self.row.append(Action("B" if zb and self.split else "BW", mb, d, self.phase))
        if zb and self.split:
            self.wq.append((mb, d))

    def W(self) -> None:
        if self.wq:
            mb, d = self.wq.pop(0)
            self.row.append(Action("W", mb, d, self.phase))


def _dualpipe_row(rank: int, p: int, half: int, split: bool) -> tuple:
    """The eight steps of DualPipe's `step` on one device (docstring of `dualpipe`)."""
    dev = _DualPipeDevice(rank >= p // 2, half, split)
    return _eight_steps(dev, p // 2, min(rank, p - 1 - rank), half)


def _eight_steps(dev: _DualPipeDevice, n: int, h: int, count: int) -> tuple:
    """DualPipe's eight steps on a device h hops from the middle of n (DualPipe: n = p/2 devices
    per direction and m/2 micro-batches each; DualPipeV: n = p, h = the rank, all m)."""
    for _ in range((n - h - 1) * 2):  # 1: nF0
        dev.F(0)
    for _ in range(h + 1):  # 2: nF0F1
        dev.F(0)
        dev.F(1)
    for _ in range(n - h - 1):  # 3: nB1W1F1
        dev.B(1, zb=True)
        dev.W()
        dev.F(1)
    dev.phase = "steady"
    for _ in range(count - 2 * n + h + 1):  # 4: nF0B1F1B0
        dev.F(0)
        dev.B(1)
        dev.F(1)
        dev.B(0)
    dev.phase = "cooldown"
    for _ in range(n - h - 1):  # 5: nB1F1B0
        dev.B(1)
        dev.F(1)
        dev.B(0)
    zb = False
    for i in range(h + 1):  # 6: nB1B0, the second half zero bubble
        zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
        dev.B(1, zb)
        zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
        dev.B(0, zb)
    for _ in range(n - h - 1):  # 7: nWB0
        dev.W()
        dev.B(0, zb=True)
    for _ in range(h + 1):  # 8: nW
        dev.W()
    while dev.wq:
        dev.W()
    return tuple(dev.row)


def dualpipev(p: int, m: int) -> Schedule:
    """DualPipeV (github.com/deepseek-ai/DualPipe, dualpipev.py; PyTorch's ScheduleDualPipeV): one
    model copy in 2p stages, V-placed (device r holds stages r and 2p-1-r: chunk 0 runs down the
    devices, chunk 1 back up), the eight steps of DualPipe on one device with "phase 0" = chunk 0:

        1 2(p-r-1) F0   2 r+1 F0 F1   3 p-r-1 B1 W1 F1 (zero bubble)   4 m-2p+r+1 F0 BW1 F1 BW0
        (paired; overlapped in DualPipe)   5 p-r-1 BW1 F1 BW0   6 r+1 B1 B0 (zero bubble from the
        middle on)   7 p-r-1 W B0   8 r+1 W

    A zero-bubble backward is B now and W queued (first in, first out). Needs m >= 2p."""
    if p < 1 or m < 2 * p:
        raise ParasimError(f"DualPipeV needs at least as many micro-batches as its 2p model stages: m = {m} with "
                           f"p = {p} (need m >= {2 * p})")
    # one copy: both chunks count their micro-batches from 0 (half = 0 in _DualPipeDevice)
    rows = tuple(_eight_steps(_DualPipeDevice(False, 0, True), p, r, m) for r in range(p))
    return Schedule("dualpipev", p, m, 2, rows, stage_map=stage_placement("v", p, 2))
