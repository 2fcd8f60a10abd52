"""Network: named parameters plus a DAG of operator calls, written in single-device style.

    net = Network("mlp")
    x = net.input("x", (64, 32))                  # fed at run time
    w = net.parameter("w", w0)                    # a named numpy array (trained by SGD)
    y = MatMul().shard(((2, 4), (4, 1)))(x, w)    # a Tensor: the output of node 0
    loss = SoftmaxCrossEntropy()(y, labels)

Tensors are handles (name, shape, dtype); nodes record which operator consumed which tensors.
Nothing is computed here: plan.py gives every node its parallel form, compile.py lowers it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import ParasimError


@dataclass(frozen=True)
class Tensor:
    """A value of the network: kind is "input", "parameter" or "activation"."""

    net: "Network" = field(repr=False, compare=False)
    name: str
    shape: tuple[int, ...]
    dtype: str = "float64"
    kind: str = "activation"
    requires_grad: bool = False

    def __repr__(self) -> str:
        return f"{self.name}{list(self.shape)}"


@dataclass(frozen=True)
class Node:
    """One operator call: `op`(inputs) -> output. `label` is unique in the network (MatMul-0)."""

    index: int
    op: object
    inputs: tuple[str, ...]
    output: str
    label: str
    stage: int | None = None  # pipeline stage (MindSpore `cell.pipeline_stage`); None: not set
    recompute: int | None = None  # the recomputed cell call it belongs to (cell.recompute())


class Network:
    """Parameters (named arrays) and a sequence of operator calls (a DAG by tensor names)."""

    def __init__(self, name: str = "net"):
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.params: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self._stage: int | None = None  # the stage of `with net.pipeline_stage(k):`
        self._recompute: int | None = None  # the segment of `with net.recompute_segment():`
        self._segments = 0

    @contextmanager
    def pipeline_stage(self, k: int):
        """Operators called inside `with net.pipeline_stage(k):` belong to pipeline stage k
        (MindSpore sets `cell.pipeline_stage = k` on a cell; an operator's own
        `op.pipeline_stage` wins)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ParasimError(f"pipeline stage must be an integer >= 0, got {k!r}")
        before, self._stage = self._stage, k
        try:
            yield self
        finally:
            self._stage = before

    @contextmanager
    def recompute_segment(self, on: bool = True):
        """Operators called inside form one recomputed segment (MindSpore `cell.recompute()`):
        the backward pass computes their forward again instead of keeping their outputs."""
        before = self._recompute
        if on and before is None:
            self._segments += 1
            self._recompute = self._segments
        try:
            yield self
        finally:
            self._recompute = before

    def _new(self, t: Tensor) -> Tensor:
        if not t.name or "/" in t.name or "@" in t.name:
            raise ParasimError(f"tensor name {t.name!r} must be non-empty without '/' or '@'")
        if t.name in self.tensors:
            raise ParasimError(f"the network already has a tensor named {t.name!r}")
        if any(int(s) < 1 for s in t.shape):
            raise ParasimError(f"tensor {t.name!r}: every dim must be >= 1, got {t.shape}")
        self.tensors[t.name] = t
        return t

    def input(self, name: str, shape: Sequence[int], dtype: str = "float64",
              requires_grad: bool = False) -> Tensor:
        """A value fed at run time (data or labels); requires_grad asks for its gradient."""
        return self._new(Tensor(self, name, tuple(int(s) for s in shape), str(dtype), "input",
                                bool(requires_grad)))

    def parameter(self, name: str, value) -> Tensor:
        """A trained weight with its initial value (copied; float64 is the reference dtype)."""
        arr = np.array(value, dtype=np.float64)
        t = self._new(Tensor(self, name, arr.shape, "float64", "parameter", True))
        self.params[name] = arr
        return t

    def add_node(self, op, inputs: Sequence[Tensor], out_shape: tuple[int, ...],
                 name: str | None = None, label: str | None = None,
                 stage: int | None = None, recompute: int | None = None) -> Tensor:
        """Record `op`(inputs); name/label/stage default to the next free ones (a pipeline stage
        sub-network passes the original network's)."""
        count = sum(1 for n in self.nodes if n.op.name == op.name)
        label = label or f"{op.name}-{count}"
        if name is None:
            name = f"{op.name.lower()}{count}"
            while name in self.tensors:
                name += "_"
        if stage is None:
            own = getattr(op, "pipeline_stage", None)
            stage = own if own is not None else self._stage
        dtype = "float64"
        out = self._new(Tensor(self, name, out_shape, dtype, "activation"))
        self.nodes.append(Node(len(self.nodes), op, tuple(t.name for t in inputs), out.name, label,
                               stage, self._recompute if recompute is None else recompute))
        return out

    # ---- queries ---------------------------------------------------------------------------------
    def consumers(self, name: str) -> list[tuple[Node, int]]:
        return [(n, i) for n in self.nodes for i, x in enumerate(n.inputs) if x == name]

    def producer(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.output == name), None)

    @property
    def output(self) -> Tensor:
        if not self.nodes:
            raise ParasimError(f"network {self.name!r} has no operators")
        return self.tensors[self.nodes[-1].output]

    @property
    def inputs(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "input"]

    def needs_grad(self) -> dict[str, bool]:
        """Which tensors need a gradient: parameters, inputs asking for one, and every
        activation computed from those."""
        need = {n: t.requires_grad for n, t in self.tensors.items()}
        for node in self.nodes:
            need[node.output] = any(need[x] for x in node.inputs)
        return need

    def __repr__(self) -> str:
        return (f"Network({self.name!r}: {len(self.params)} parameters, "
                f"{len(self.nodes)} operators)")
