"""ZeRO stage 1 over the data-parallel axis of a pipeline / tensor / hybrid run: Megatron-LM's
"distributed optimizer" (Shoeybi et al.; Rajbhandari et al. 2020, Sec. 5.1, P_os).

Each rank of a data-parallel group holds the same (tensor-parallel shard of the) parameters of its
pipeline stage. After backward, instead of an AllReduce, every local gradient is flattened and
ReduceScattered over the group (np.array_split convention); rank i updates its 1/N_d of the
elements with its 1/N_d of the optimizer state, then the updated slices are AllGathered and
reshaped back. Per device this moves 2 Psi_local as the AllReduce did (ring: 2(N_d-1)/N_d Psi) and
holds the optimizer state only for its slice: K Psi_local / N_d instead of K Psi_local.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..program import Collective, ProgramBuilder
from .emit import grad, param
from .layer_kernels import optimizer_state_names

F64 = 8


def emit_zero1_optimizer(b: ProgramBuilder, rank: int, layers, shapes: Callable, optimizer,
                         group: tuple[int, ...], mean: bool) -> None:
    """ReduceScatter each gradient over `group`, update this rank's slice, AllGather the slices."""
    i, n_d = group.index(rank), len(group)
    op = "mean" if mean else "sum"
    b.compute(rank, "increment", ["opt/step"], ["opt/step"], phase="optimizer", label="step += 1")
    states = optimizer_state_names(optimizer)
    for li in reversed(list(layers)):
        for n, shape in shapes(li).items():
            size = int(np.prod(shape))
            own = len(np.array_split(np.empty(size), n_d)[i])
            g, flat, st = grad(li, n), f"grad/{li}/{n}/flat", [f"opt/{li}/{n}/{s}" for s in states]
            b.compute(rank, "flatten", [g], [flat], phase="other", label=f"flatten grad {li}/{n}")
            b.free(rank, g)
            b.add(rank, Collective("reduce_scatter", flat, flat, group, op=op, nbytes=F64 * size, tag=f"zrs:{li}/{n}"))
            new = f"param/{li}/{n}/shard"
            b.compute(rank, "zero_shard_update", [param(li, n), flat, "opt/step", *st], [new, *st],
                      attrs={"optimizer": optimizer, "parts": n_d, "index": i}, nbytes=F64 * own * (3 + 2 * len(st)),
                      flops=10 * own, phase="optimizer", label=f"update {li}/{n} slice")
            b.free(rank, flat)
            b.add(rank, Collective("all_gather", new, new, group, nbytes=F64 * own, tag=f"zag:{li}/{n}"))
            b.compute(rank, "reshape", [new], [param(li, n)], attrs={"shape": tuple(shape)}, phase="other",
                      label=f"unflatten {li}/{n}")
            b.free(rank, new)


def shard_optimizer_state(state: dict[str, np.ndarray], parts: int, index: int) -> dict[str, np.ndarray]:
    """This rank's flat slice of every optimizer-state array (parameters stay whole)."""
    return {k: (np.array_split(np.ravel(v), parts)[index].copy() if k.startswith("opt/") and k != "opt/step" else v)
            for k, v in state.items()}
