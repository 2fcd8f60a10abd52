"""A Program as columns: one row per instruction in numpy arrays, for programs of a million rows.

Strategy compilers whose programs are regular (a pipeline schedule's timeline, a scale program)
emit these columns directly with numpy instead of a million instruction objects; the cost model's
clock prices them vectorised (`simulator.cost.clock_columns`). The instruction objects are still
there as row views: `ColumnarProgram.code` builds them on first use (the walk, the real runtimes,
`describe`), from the same compiler, so one program is still what both clocks consume.

Rows are device-major, each device's rows in program order (row r of device d is instruction
`code[d][r - first row of d]`). Per row:
  dev         the device;
  kind        COMPUTE, SEND, RECV or COLLECTIVE (programs with Free are not columnar);
  blocking    collectives: blocking (True) or on the non-blocking stream;
  proto       compute and collective rows: the index in `protos` of an instruction priced exactly as
              this row (same op, FLOPs, bytes, kernel; same collective kind, group, bytes, tag);
  peer, nbytes  send: destination; recv: source; the bytes of the transfer;
  match       send: its recv's row; recv: its send's row (Sends and Recvs matched FIFO per (src, dst, tag));
  join        multi-member collectives: one id per collective instance shared by its members' rows
              (-1 otherwise); member: the row's position in the group;
  reads, writes  CSR (reads_ptr, reads) of integer tensor ids per row (ids are per program);
  deps        or, when the compiler knows them, (rows, writers): pairs of a row and a row that
              last wrote one of its inputs (then reads and writes may be empty); writers on a
              lane the row takes itself may be left out (they never decide when it starts);
  microbatch  -1 for None; meta: index in `metas`, what the trace event of this row shows:
              (name format with {j} for the micro-batch, phase, op / kind, group, nbytes, flops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .program import Program

COMPUTE, SEND, RECV, COLLECTIVE = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class ProgramColumns:
    n_devices: int
    dev: np.ndarray
    kind: np.ndarray
    blocking: np.ndarray
    proto: np.ndarray
    peer: np.ndarray
    nbytes: np.ndarray
    match: np.ndarray
    join: np.ndarray
    member: np.ndarray
    reads_ptr: np.ndarray
    reads: np.ndarray
    writes_ptr: np.ndarray
    writes: np.ndarray
    microbatch: np.ndarray
    meta: np.ndarray
    protos: tuple
    metas: tuple
    deps: tuple | None = None

    def __len__(self) -> int:
        return len(self.dev)


def csr(counts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, values) of a CSR list from per-row counts."""
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, np.asarray(values, dtype=np.int64)


def last_writers(dev: np.ndarray, rrow: np.ndarray, rten: np.ndarray, wrow: np.ndarray, wten: np.ndarray,
                 N: int) -> tuple[np.ndarray, np.ndarray]:
    """For reads (row rrow of tensor rten) and writes (wrow, wten) of a program of N rows: (row,
    the row that last wrote that tensor on the row's device before it) for the reads that have one."""
    if not len(rrow) or not len(wrow):
        return rrow[:0], rrow[:0]
    T = int(max(rten.max(), wten.max())) + 1
    wkey = (dev[wrow] * T + wten) * (N + 1) + wrow
    wkey.sort()
    rk = dev[rrow] * T + rten
    pos = np.searchsorted(wkey, rk * (N + 1) + rrow) - 1
    hit = pos >= 0
    found = wkey[np.where(hit, pos, 0)]
    hit &= found // (N + 1) == rk
    return rrow[hit], found[hit] % (N + 1)


class ColumnarProgram(Program):
    """A Program held as `ProgramColumns`; `code` (the instruction objects) is built on first use
    by `build_code`, the compiler's object form of the same program."""

    def __init__(self, columns: ProgramColumns, build_code: Callable[[], tuple], name: str = ""):
        object.__setattr__(self, "n_devices", columns.n_devices)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "_build_code", build_code)

    @property
    def code(self) -> tuple:
        got = self.__dict__.get("_code")
        if got is None:
            got = tuple(tuple(c) for c in self._build_code())
            if len(got) != self.n_devices:
                raise AssertionError(f"columnar program {self.name!r}: {len(got)} code lists for {self.n_devices}")
            self.__dict__["_code"] = got
        return got

    def __len__(self) -> int:
        return len(self.columns)

    def __repr__(self) -> str:
        return f"ColumnarProgram({self.name!r}, {self.n_devices} devices, {len(self):,} instructions)"

    __hash__ = object.__hash__

    def __eq__(self, other) -> bool:
        return self is other
