"""Columns from blocks of instructions repeated per micro-batch (a program's regular part).

A compiler whose program repeats the same instructions for every micro-batch (a scale program:
an action's layers, per micro-batch) emits each distinct block once, with the micro-batch written
as the placeholder "{j}" (`J`) in names, tags, labels and `microbatch`, and lists which block each
device runs for which micro-batch. `TileBuilder` turns the list into `ProgramColumns` with numpy:
a million rows from a few hundred blocks. A name with "{j}" is another tensor (tag) for every
micro-batch; a name without it is one tensor of its device. Sends and Recvs are matched FIFO per
(src, dst, tag), collectives of several members by the order each member issues them on the
group (`simulator.program`'s rules); a program that breaks them is left to the walk to name.
"""

from __future__ import annotations

import numpy as np

from .program import Collective, Compute, Recv, Send
from .program_columns import COLLECTIVE, COMPUTE, RECV, SEND, ProgramColumns, csr, last_writers

J = "{j}"


class _Intern(dict):
    def id(self, key) -> int:
        got = self.get(key)
        if got is None:
            got = self[key] = len(self)
        return got


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of range(s, s + c) for each (s, c)."""
    ends = np.cumsum(counts)
    out = np.arange(int(ends[-1]) if len(ends) else 0)
    out -= np.repeat(ends - counts - starts, counts)
    return out


def fifo_rank(keys: np.ndarray) -> np.ndarray:
    """Each element's rank among the elements of equal key before it."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - np.searchsorted(sk, sk)
    return rank


class TileBuilder:
    """Collects (device, block, micro-batch) in program order, device after device (module docstring)."""

    def __init__(self, n_devices: int):
        self.n = n_devices
        self.blocks: list[tuple] = []                   # (devices, templates, micro-batches) arrays
        self._tpl_of: dict[int, int] = {}
        self._tpls: list[tuple[int, list]] = []      # holds every block (so ids stay unique)
        self.names, self.tags, self.groups = _Intern(), _Intern(), _Intern()
        self.protos, self.metas = _Intern(), _Intern()
        self._proto_ins: list = []

    def _template(self, dev: int, block: list) -> int:
        t = self._tpl_of.get(id(block))
        if t is None:
            t = self._tpl_of[id(block)] = len(self._tpls)
            self._tpls.append((dev, block))
        elif self._tpls[t][0] != dev:
            raise ValueError("a block is reused on another device")
        return t

    def add(self, dev: int, block: list, j: int = 0) -> None:
        """Device dev runs `block` next, for micro-batch j."""
        self.add_many(dev, [block], [0], [j])

    def add_many(self, dev: int, blocks: list, which, js) -> None:
        """Device dev runs blocks[which[i]] for micro-batch js[i] next, for i in order."""
        ids = np.array([self._template(dev, b) if b else -1 for b in blocks], dtype=np.int64)
        t = ids[np.asarray(which, dtype=np.int64)]
        keep = t >= 0
        self.blocks.append((np.full(int(keep.sum()), dev), t[keep], np.asarray(js, dtype=np.int64)[keep]))

    # ---- one block's rows (once per block) ------------------------------------------------------
    def _proto(self, key, ins) -> int:
        k = self.protos.id(key)
        if k == len(self._proto_ins):
            self._proto_ins.append(ins)
        return k

    def _rows(self, dev: int, block: list) -> list[tuple]:
        rows = []
        for ins in block:
            mb = ins.microbatch
            mbj, mbc = mb == J, (-1 if mb is None or mb == J else mb)
            t = type(ins)
            if t is Compute:
                kern = ins.attrs.get("kernel") if ins.attrs else None
                rows.append((COMPUTE, False, -1, 0, -1, -1, 0, self._proto((ins.op, ins.flops, ins.nbytes, id(kern)), ins),
                             mbj, mbc, self.metas.id((ins.label or ins.op, ins.phase, ins.op, (), ins.nbytes, ins.flops)),
                             -1, ins.inputs, ins.outputs))
            elif t is Send:
                rows.append((SEND, False, ins.dst, ins.nbytes, self.tags.id(ins.tag), -1, 0, -1, mbj, mbc,
                             self.metas.id((f"send {ins.tensor} to {ins.dst}", "comm", "send", (), 0, 0.0)),
                             self.metas.id((f"recv {ins.tensor} from {dev}", "comm", "recv", (), 0, 0.0)),
                             (ins.tensor,), ()))
            elif t is Recv:
                rows.append((RECV, False, ins.src, ins.nbytes, self.tags.id(ins.tag), -1, 0, -1, mbj, mbc, -1, -1,
                             (), (ins.tensor,)))
            elif t is Collective:
                if len(ins.group) > 1 and not ins.blocking:
                    raise ValueError("non-blocking collectives of several members are priced by the walk")
                key = (ins.kind, ins.algo, ins.group, ins.nbytes, ins.tag, ins.root)
                rows.append((COLLECTIVE, ins.blocking, -1, 0, -1, self.groups.id(ins.group), ins.group.index(dev),
                             self._proto(key, ins), mbj, mbc,
                             self.metas.id((ins.label, ins.phase, ins.kind, ins.group, 0, 0.0)), -1,
                             (ins.tensor,), (ins.out,)))
            else:
                raise ValueError(f"{type(ins).__name__} has no columnar form")
        return rows

    # ---- all rows ---------------------------------------------------------------------------------
    def build(self) -> ProgramColumns:
        n = self.n
        tl = []
        for dev, block in self._tpls:
            tl += self._rows(dev, block)
        tlen = np.array([len(b) for _, b in self._tpls], dtype=np.int64)
        tstart = np.cumsum(tlen) - tlen
        (tkind, tblock, tpeer, tnb, ttag, tgroup, tmember, tproto, tmbj, tmbc, tmeta, trmeta) = (
            np.array(c, dtype=t) for c, t in zip(zip(*(r[:12] for r in tl)), (np.int8, bool) + (np.int64,) * 6
                                                  + (bool,) + (np.int64,) * 3))
        bdev, btpl, bj = (np.concatenate([b[i] for b in self.blocks]) if self.blocks else np.zeros(0, np.int64)
                          for i in range(3))
        if (np.diff(bdev) < 0).any():
            raise ValueError("blocks must be added device after device")
        lens = tlen[btpl]
        trow = ranges(tstart[btpl], lens)
        jr, dev = np.repeat(bj, lens), np.repeat(bdev, lens)
        M = int(bj.max()) + 1 if len(bj) else 1
        kind, peer = tkind[trow], tpeer[trow]

        def tensors(col):       # a block's tensors: its template's, "{j}" ones for its micro-batch
            cnt = np.array([len(r[col]) for r in tl], dtype=np.int64)
            nid = np.array([self.names.id(x) for r in tl for x in r[col]], dtype=np.int64)
            hasj = np.array(["{j}" in name for name in self.names] or [False])
            rptr = np.concatenate([[0], np.cumsum(cnt)])
            eptr = rptr[tstart]
            el = (rptr[tstart + tlen] - eptr)[btpl]
            v = nid[ranges(eptr[btpl], el)]
            vals = v * M
            vals += np.repeat(bj, el) * hasj[v]
            return csr(cnt[trow], vals)

        wp, wv = tensors(13)
        deps = self._deps(tl, tstart, tlen, btpl, bj, lens, dev, wp, wv, M)
        rp, rv = np.zeros(len(trow) + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)    # the reads are in deps
        match = self._match(kind, dev, peer, ttag, trow, jr, M)
        join, member = self._joins(kind, dev, tgroup, tmember, trow)
        meta = tmeta[trow]
        rcv = np.flatnonzero((kind == RECV) & (match >= 0))
        meta[rcv] = trmeta[trow[match[rcv]]]
        mb = np.where(tmbj[trow], jr, tmbc[trow])
        return ProgramColumns(n, dev, kind, tblock[trow], tproto[trow], peer, tnb[trow],
                              match, join, member, rp, rv, wp, wv, mb, meta, tuple(self._proto_ins),
                              tuple(self.metas), deps)

    def _deps(self, tl, tstart, tlen, btpl, bj, lens, dev, wp, wv, M) -> tuple[np.ndarray, np.ndarray]:
        """(row, row that last wrote one of its inputs): within a block, the block's own last write
        before it, the same for every instance of the block (found once per block); inputs the
        block has not written yet are looked up among all the program's writes."""
        inner, outer = [], []                   # (template row, template row of its writer), (row, name)
        for t0, n in zip(tstart.tolist(), tlen.tolist()):
            last: dict = {}
            for i in range(n):
                r = tl[t0 + i]
                for x in r[12]:
                    k = last.get(self.names.id(x))
                    (outer.append((i, self.names.id(x))) if k is None else inner.append((i, k)))
                for x in r[13]:
                    last[self.names.id(x)] = i
            inner.append((-1, -1))              # template separators
            outer.append((-1, -1))
        hasj = np.array(["{j}" in name for name in self.names] or [False])
        base = np.cumsum(lens) - lens           # each block's first row
        out = []
        for pairs in (inner, outer):
            arr = np.array(pairs, dtype=np.int64).reshape(-1, 2)
            sep = np.flatnonzero(arr[:, 0] < 0)
            start = np.concatenate([[0], sep[:-1] + 1])
            cnt = (sep - start)[btpl]
            idx = ranges(start[btpl], cnt)
            at = np.repeat(base, cnt)
            out.append((at + arr[idx, 0], arr[idx, 1], at, np.repeat(bj, cnt)))
        (r_in, k_in, at_in, _), (r_out, name, _, j) = out
        wrow = np.repeat(np.arange(len(dev)), np.diff(wp))
        r_x, w_x = last_writers(dev, r_out, name * M + np.where(hasj[name], j, 0), wrow, wv, len(dev))
        return np.concatenate([r_in, r_x]), np.concatenate([at_in + k_in, w_x])

    def _match(self, kind, dev, peer, ttag, trow, jr, M) -> np.ndarray:
        """Send <-> recv rows: the k-th of each (src, dst, tag) in program order meet (ttag: each
        template row's tag, trow: each row's template row)."""
        N, n = len(kind), self.n
        match = np.full(N, -1, dtype=np.int64)
        snd, rcv = np.flatnonzero(kind == SEND), np.flatnonzero(kind == RECV)
        tagj = np.array(["{j}" in t for t in self.tags] or [False])

        def tkey(rows):
            tag = ttag[trow[rows]]
            return tag * M + np.where(tagj[np.maximum(tag, 0)], jr[rows], 0)
        span = max(len(self.tags), 1) * M
        if n * n * span * (max(len(snd), 1) + 1) >= 2 ** 62:
            raise ValueError("program too large to match sends by integer keys")
        sk = (dev[snd] * n + peer[snd]) * span + tkey(snd)
        rk = (peer[rcv] * n + dev[rcv]) * span + tkey(rcv)
        R = len(snd) + 1
        sk, rk = sk * R + fifo_rank(sk), rk * R + fifo_rank(rk)
        o = np.argsort(sk)
        pos = np.minimum(np.searchsorted(sk[o], rk), max(len(snd) - 1, 0))
        hit = (sk[o][pos] == rk) if len(snd) else np.zeros(len(rcv), dtype=bool)
        s_rows = snd[o[pos[hit]]]
        match[rcv[hit]] = s_rows
        match[s_rows] = rcv[hit]
        return match

    def _joins(self, kind, dev, tgroup, tmember, trow) -> tuple[np.ndarray, np.ndarray]:
        """One id per instance of a collective of several members: the k-th each member issues
        (tgroup, tmember: each template row's group and place in it; trow: each row's)."""
        N = len(kind)
        join = np.full(N, -1, dtype=np.int64)
        member = np.zeros(N, dtype=np.int64)
        size = np.array([len(g) for g in self.groups] or [1])
        coll = np.flatnonzero(kind == COLLECTIVE)
        group = tgroup[trow[coll]]
        multi = coll[size[np.maximum(group, 0)] > 1]
        if len(multi):
            G = len(self.groups)
            group = tgroup[trow[multi]]
            seq = fifo_rank(dev[multi] * G + group)
            _, join[multi] = np.unique(group * (int(seq.max()) + 1) + seq, return_inverse=True)
            member[multi] = tmember[trow[multi]]
        return join, member
