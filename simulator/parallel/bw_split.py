"""Zero-bubble B/W splitting for lanes whose layers emit several backward kernels (Qi et al. 2023,
"Zero Bubble Pipeline Parallelism", Sec. 2: B = input gradients, W = weight gradients).

A Megatron tensor-parallel block's backward is a chain of kernels with collectives between them:
the AllReduce (or ReduceScatter under sequence parallelism) of each column-parallel layer's input
gradient, the re-gathers of sequence-parallel inputs. Each kernel that yields parameter gradients
is named through `grad_op`, and the same emission then serves three uses:

  whole backward (BW)  the kernel `op`: input gradients and weight gradients together;
  B                    its input half `op_input`: the input gradients, which the collectives and
                       the previous stage wait for, plus a weight cache (the saved input and the
                       output gradient of each linear) kept as act/wcache/{layer}/mb{j}/{k};
  W                    its weight half `op_weight` from that cache, later, in the pipeline's
                       bubbles: dW = X^T dY needs no communication for column- or row-parallel
                       weights (each rank's shard sees its own columns or rows of dY and X).

Kernels with no input gradient (the embedding's) keep their inputs in B (`pack`) and run whole
in W. `op_input`/`op_weight` pairs live beside `op` in block_lane.py (the block's segments),
tp_kernels.py and cp_kernels.py (the MoE block's are block_lane's, its steps in models/moe_steps.py).
"""

from __future__ import annotations

from ..ops import kernel
from .emit import grad


@kernel("pack")
def pack(*values):
    """Keep several tensors as one weight cache (a tuple)."""
    return (tuple(values),)


class SplitBackward:
    """Mixed into a Replica whose emit_layer_backward names every parameter-gradient kernel through
    `grad_op`: emit_layer_backward_input / _weight then run the zero-bubble B and W of any layer."""

    _splitting = False

    def grad_op(self, r: int, li: int, j: int, op: str, ins, outs, names, accumulate: bool,
                flops: tuple[float, float] = (0.0, 0.0), attrs: dict | None = None, label: str = "") -> None:
        """`op`(*ins) -> (*outs, gradients of layer li's params `names`); whole, or split (see above)."""
        b, G, attrs = self.builder, [grad(li, n) for n in names], attrs or {}
        if not self._splitting:
            b.compute(r, op, [*ins, *(G if accumulate else [])], [*outs, *G], attrs=attrs, flops=flops[0] + flops[1],
                      phase="backward", microbatch=j, label=f"B{j} {label}")
            return
        queue = self.__dict__.setdefault("_deferred", {}).setdefault((r, li, j), [])
        wc = f"act/wcache/{li}/mb{j}/{len(queue)}"
        if outs:
            b.compute(r, f"{op}_input", ins, [*outs, wc], attrs=attrs, flops=flops[0], phase="backward",
                      microbatch=j, label=f"B{j} {label}")
        else:
            b.compute(r, "pack", ins, [wc], phase="backward", microbatch=j, label=f"B{j} {label} keep")
        queue.append((op, wc, tuple(names), flops[1], attrs, label))

    def split_backward_input(self, r: int, li: int, dy: str, dx: str | None, j: int) -> None:
        """B: the layer's backward emission with every gradient kernel cut to its input half."""
        self._splitting = True
        try:
            self.emit_layer_backward(r, li, dy, dx, j, accumulate=False)
        finally:
            self._splitting = False

    def split_backward_weight(self, r: int, li: int, j: int, accumulate: bool) -> None:
        """W: the weight halves B queued for (layer li, micro-batch j), in B's order."""
        b = self.builder
        for op, wc, names, fl, attrs, label in self._deferred.pop((r, li, j)):
            G = [grad(li, n) for n in names]
            b.compute(r, f"{op}_weight", [wc, *(G if accumulate else [])], G, attrs=attrs, flops=fl, phase="wgrad",
                      microbatch=j, label=f"W{j} {label}")
            b.free(r, wc)
