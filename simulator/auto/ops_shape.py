"""Operators that move elements without arithmetic: Reshape, Transpose, ExpandDims, Tile, Concat,
StridedSlice, with MindSpore's sharding rules (`ops_info/reshape_info.cc`, `transpose_info.cc`,
`expand_dims_info.cc`, `tile_info.cc`, `concat_info.cc`, `strided_slice_info.cc`).
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..errors import ParasimError
from .primitive import LETTERS, Primitive, need


class Transpose(Primitive):
    """y = x.transpose(perm); the output's cuts follow the permutation."""

    name, fwd, bwd = "Transpose", "auto.transpose", "auto.transpose_bwd"

    def __init__(self, perm: Sequence[int]):
        super().__init__()
        self.perm = tuple(int(p) for p in perm)

    def spec(self, shapes):
        need(sorted(self.perm) == list(range(len(shapes[0]))),
             f"{self.name}: perm {self.perm} is not a permutation of {len(shapes[0])} dims")
        la = LETTERS[:len(shapes[0])]
        return [la], "".join(la[p] for p in self.perm), la, ""

    def attrs(self, shapes):
        return {"perm": self.perm}


class Reshape(Primitive):
    """y = x.reshape(shape). No letters: its input layout is the producer's, kept where a cut
    maps onto the leading dim of a merged or split group, gathered otherwise (propagate.py)."""

    name, fwd, bwd = "Reshape", "auto.reshape", "auto.reshape_bwd"

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def out_shape(self, shapes):
        need(prod(self.shape) == prod(shapes[0]),
             f"{self.name}: cannot reshape {shapes[0]} ({prod(shapes[0])} elements) to "
             f"{self.shape} ({prod(self.shape)} elements)")
        return self.shape

    def spec(self, shapes):
        raise ParasimError("Reshape has no einsum letters")


class ExpandDims(Primitive):
    """Insert a dim of size 1 at `axis` (MindSpore ExpandDims: the strategy is the input's; the
    new dim is not cut)."""

    name, fwd, bwd = "ExpandDims", "auto.reshape", "auto.reshape_bwd"

    def __init__(self, axis: int):
        super().__init__()
        self.axis = int(axis)

    def spec(self, shapes):
        n = len(shapes[0])
        need(-n - 1 <= self.axis <= n, f"{self.name}: axis {self.axis} is outside [-{n + 1}, {n}]")
        ax = self.axis % (n + 1)
        la = LETTERS[:n]
        return [la], la[:ax] + "Z" + la[ax:], la, ""

    def attrs(self, shapes):
        return {}


class Tile(Primitive):
    """y = tile(x, multiples). MindSpore (tile_info.cc): one strategy value per dim; on a dim
    with multiple 1 it cuts the input, on a tiled dim (multiple > 1) it cuts the multiples (the
    input dim stays whole and each rank tiles multiple / cut copies)."""

    name, fwd, bwd = "Tile", "auto.tile", "auto.tile_bwd"

    def __init__(self, multiples: Sequence[int]):
        super().__init__()
        self.multiples = tuple(int(m) for m in multiples)

    def _check(self, shape):
        need(len(self.multiples) == len(shape) and all(m >= 1 for m in self.multiples),
             f"{self.name}: multiples {self.multiples} must have one value >= 1 per input dim "
             f"(input {tuple(shape)})")

    def spec(self, shapes):
        self._check(shapes[0])
        la = LETTERS[:len(shapes[0])]
        ins = "".join(c if m == 1 else c.upper() for c, m in zip(la, self.multiples))
        return [ins], la, la, ""

    def out_shape(self, shapes):
        self._check(shapes[0])
        return tuple(n * m for n, m in zip(shapes[0], self.multiples))

    def strategy_view(self, shapes):
        la = LETTERS[:len(shapes[0])]
        return [la], [tuple(n if m == 1 else m for n, m in zip(shapes[0], self.multiples))]

    def attrs(self, shapes):
        return {"multiples": self.multiples}

    def rank_attrs(self, sharding, shapes):
        cuts = sharding.raw.splits
        return lambda r: {"multiples": tuple(m // c if m > 1 else 1 for m, c in zip(self.multiples, cuts))}


class Concat(Primitive):
    """Concatenate `n` tensors along `axis`, which must not be cut; the other dims are cut alike
    in every input (concat_info.cc)."""

    name, fwd, bwd = "Concat", "auto.concat", "auto.concat_bwd"

    def __init__(self, axis: int = 0, n: int = 2):
        super().__init__()
        self.axis, self.n_inputs = int(axis), int(n)
        self.grad_inputs = tuple(range(self.n_inputs))

    def _ax(self, shapes) -> int:
        r = len(shapes[0])
        need(-r <= self.axis < r, f"{self.name}: axis {self.axis} is outside a rank-{r} input")
        ax = self.axis % r
        for s in shapes[1:]:
            need(len(s) == r and all(a == b for d, (a, b) in enumerate(zip(s, shapes[0])) if d != ax),
                 f"{self.name}: inputs {tuple(shapes[0])} and {tuple(s)} differ outside axis {ax}")
        return ax

    def spec(self, shapes):
        ax = self._ax(shapes)
        la = LETTERS[:len(shapes[0])]
        ins = [la[:ax] + "ABCDEFGHIJKLMNOPQRSTUVWXY"[i] + la[ax + 1:] for i in range(len(shapes))]
        return ins, la[:ax] + "Z" + la[ax + 1:], la[:ax] + la[ax + 1:], ""

    def out_shape(self, shapes):
        ax = self._ax(shapes)
        out = list(shapes[0])
        out[ax] = sum(s[ax] for s in shapes)
        return tuple(out)

    def attrs(self, shapes):
        ax = self._ax(shapes)
        return {"axis": ax, "sizes": tuple(s[ax] for s in shapes)}


class StridedSlice(Primitive):
    """x[begin:end:strides] per dim (MindSpore StridedSlice without masks): a dim that is
    sliced (not taken whole with stride 1) must not be cut (strided_slice_info.cc)."""

    name, fwd, bwd = "StridedSlice", "auto.strided_slice", "auto.strided_slice_bwd"

    def __init__(self, begin: Sequence[int], end: Sequence[int], strides: Sequence[int] | None = None):
        super().__init__()
        self.begin, self.end = tuple(int(b) for b in begin), tuple(int(e) for e in end)
        self.strides = tuple(int(s) for s in strides) if strides is not None else (1,) * len(self.begin)

    def _slices(self, shape) -> list[slice]:
        need(len(self.begin) == len(self.end) == len(self.strides) == len(shape),
             f"{self.name}: begin/end/strides need one value per dim of {tuple(shape)}")
        need(all(s > 0 for s in self.strides), f"{self.name}: strides must be >= 1, got {self.strides}")
        return [slice(b, e, s) for b, e, s in zip(self.begin, self.end, self.strides)]

    def _sliced(self, shape) -> list[bool]:
        return [sl.indices(n) != (0, n, 1) for sl, n in zip(self._slices(shape), shape)]

    def spec(self, shapes):
        la = LETTERS[:len(shapes[0])]
        sliced = self._sliced(shapes[0])
        ins = "".join(c.upper() if cut else c for c, cut in zip(la, sliced))
        return [ins], ins, "".join(c for c, cut in zip(la, sliced) if not cut), ""

    def out_shape(self, shapes):
        return tuple(len(range(*sl.indices(n))) for sl, n in zip(self._slices(shapes[0]), shapes[0]))

    def attrs(self, shapes):
        return {"begin": self.begin, "end": self.end, "strides": self.strides}
