"""Schedules with several model chunks per device: interleaved 1F1B (any m), interleaved zero
bubble, looped BFS and ZB-V. Each is a pure function of (p, m, v) returning per-device action lists;
the rules are PyTorch's `torch.distributed.pipelining` schedules (2.x, schedules.py), written here
from their description.

Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2; PyTorch's ScheduleInterleaved1F1B): work is
issued in rounds. With R = max(1, m // p) rounds of q = m / R micro-batches (m must be a multiple of
R; m % p may be anything, e.g. p 4, m 10: R 2, q 5), the k-th forward on a device is chunk
(k // q) mod v and the k-th backward chunk v - 1 - ((k - warmup) // q) mod v, each chunk taking
its micro-batches in order. Warmup on rank r: (v-1) q + 2 (p-1-r) forwards, capped at m v; then
F/BW pairs; then the remaining backwards. When p divides m, q = p and this is Megatron-LM's
schedule. The per-device idle stays (p-1)(F+B+W)/v for every m >= p, p dividing m or not, and grows
when m < p (measured; the closed form is the registry's).

Interleaved zero bubble (Qi et al. 2023, ZB-1P; PyTorch's ScheduleInterleavedZeroBubble): the same
issue order with warmup (v-1) q + (p-1-r), backwards split into B and W; rank r starts
pairing each B with the W of its oldest pending backward after r steady steps, and the W passes
left over close the step.

Looped BFS (Lamy-Poirier 2023, Breadth-First Pipeline Parallelism; PyTorch's ScheduleLoopedBFS):
all m forwards of chunk 0, then of chunk 1, ...; then the backwards chunk by chunk in reverse, each
chunk's micro-batches last to first.

ZB-V (Qi et al. 2024, Pipeline Parallelism with Controllable Memory, Sec. 6 of arXiv 2401.10241;
PyTorch's ScheduleZBVZeroBubble): two chunks per device in the V placement (device r holds stages
r and 2p-1-r). Rank r runs 2(p-r)-1 forwards of chunk 0; r pairs F1 F0; p-r triples F1 B1 W1;
then, while forwards remain, F0 B0 W0 F1 B1 W1; then r pairs B0 B1, p-r pairs B0 W0 and the
remaining W1 then W0. Built for max(m, 2p-1) micro-batches, the ones past m dropped.
"""

from __future__ import annotations

from simulator.errors import ParasimError
from simulator.parallel.schedules import ActionMaker, Schedule, check_sizes, infer_phases, one_f_one_b, stage_placement


def rounds(p: int, m: int) -> tuple[int, int]:
    """(R, q): R = max(1, m // p) rounds of q = m / R micro-batches; refuses m not a multiple of R."""
    n = max(1, m // p)
    if m % n:
        raise ParasimError(f"interleaved schedules issue micro-batches in max(1, m // p) = {n} rounds of equal size: "
                           f"m = {m} with p = {p} is not a multiple of {n} (PyTorch's ScheduleInterleaved1F1B rule)")
    return n, m // n


def _interleaved_row(p: int, m: int, v: int, r: int, zero_bubble: bool) -> list:
    """One rank's (kind, micro-batch, chunk) list of interleaved 1F1B or its zero-bubble form."""
    _, q = rounds(p, m)
    total = m * v
    warm = min((v - 1) * q + (1 if zero_bubble else 2) * (p - 1 - r), total)
    count = {}  # (kind, chunk) -> next micro-batch

    def take(kind, chunk, k):
        mb = count.get((kind, chunk), 0)
        count[(kind, chunk)] = mb + 1
        return kind, mb, chunk, "warmup" if k < warm else "steady" if k < total else "cooldown"

    def fwd_chunk(k):
        return (k // q) % v

    def bwd_chunk(k):
        return v - 1 - ((k - warm) // q) % v

    row, backs, n_w = [], [], 0
    for k in range(total + warm):
        if k < total:
            row.append(take("F", fwd_chunk(k), k))
        if k >= warm:
            row.append(take("B" if zero_bubble else "BW", bwd_chunk(k), k))
            backs.append(k)
            if zero_bubble and k - warm >= r:  # W of the oldest pending backward
                row.append(take("W", bwd_chunk(backs[n_w]), k))
                n_w += 1
    while zero_bubble and n_w < len(backs):
        row.append(take("W", bwd_chunk(backs[n_w]), total))
        n_w += 1
    return row


def first_stage_peak(p: int, m: int, v: int, zero_bubble: bool = False) -> float:
    """Stage-sized units device 0 holds at its peak (held chunks / v; F adds one, BW or W frees
    it: schedule_sim's peak_in_flight rule), from device 0's row alone (fast at real scale)."""
    if v == 1 and not zero_bubble:
        return float(min(p, m))  # one_f_one_b
    held = peak = 0
    for kind, *_ in _interleaved_row(p, m, v, 0, zero_bubble):
        held += 1 if kind == "F" else -1 if kind in ("BW", "W") else 0
        peak = max(peak, held)
    return peak / v


def interleaved(p: int, m: int, v: int) -> Schedule:
    """Interleaved 1F1B with v chunks per device, any m that PyTorch runs (module docstring).
    With v = 1 this is exactly one_f_one_b (Megatron takes its non-interleaved path)."""
    check_sizes(p, m, v)
    if v == 1:
        return Schedule("interleaved", p, m, 1, one_f_one_b(p, m).actions)
    act = ActionMaker()
    rows = tuple(tuple(act(*a) for a in _interleaved_row(p, m, v, r, False)) for r in range(p))
    return Schedule("interleaved", p, m, v, rows)


def interleaved_zero_bubble(p: int, m: int, v: int) -> Schedule:
    """Interleaved zero bubble (ZB-1P) with v chunks per device (module docstring)."""
    check_sizes(p, m, v)
    act = ActionMaker()
    rows = tuple(tuple(act(*a) for a in _interleaved_row(p, m, v, r, True)) for r in range(p))
    return Schedule("interleaved-zb", p, m, v, rows)


def looped_bfs(p: int, m: int, v: int) -> Schedule:
    """Looped breadth-first: chunk by chunk, all forwards, then all backwards in reverse."""
    check_sizes(p, m, v)
    row = [("F", i, c) for c in range(v) for i in range(m)]
    row += [("BW", i, c) for c in reversed(range(v)) for i in reversed(range(m))]
    return Schedule("looped-bfs", p, m, v, (infer_phases(row),) * p)


def zb_v(p: int, m: int) -> Schedule:
    """ZB-V: two chunks per device, V-shaped (module docstring)."""
    check_sizes(p, m, 2)
    n = max(2 * p - 1, m)
    rows = []
    for r in range(p):
        f, b = [0, 0], [0, 0]
        row = []

        def add(kind, c):  # F or B of chunk c's next micro-batch
            counter = f if kind == "F" else b
            row.append((kind, counter[c], c))
            counter[c] += 1

        for _ in range(2 * (p - r) - 1):
            add("F", 0)
        for _ in range(r):
            add("F", 1)
            add("F", 0)
        for _ in range(p - r):
            add("F", 1)
            row += [("B", b[1], 1), ("W", b[1], 1)]
            b[1] += 1
        while f[1] < f[0] or f[0] < n:
            if f[0] < n:
                add("F", 0)
            for c in (0, 1):
                if c == 1:
                    add("F", 1)
                row += [("B", b[c], c), ("W", b[c], c)]
                b[c] += 1
        w = list(b)
        for _ in range(r):
            add("B", 0)
            add("B", 1)
        for _ in range(p - r):
            add("B", 0)
            row.append(("W", w[0], 0))
            w[0] += 1
        row += [("W", i, 1) for i in range(w[1], b[1])] + [("W", i, 0) for i in range(w[0], b[0])]
        rows.append(infer_phases([a for a in row if a[1] < m]))
    return Schedule("zb-v", p, m, 2, tuple(rows), stage_map=stage_placement("v", p, 2))
