"""Free every tensor a program creates right after its last use.

A compiled step (compile.py) names a fresh local tensor for every activation, moved copy and
gradient. Without frees a device would hold all of them to the end of the step, and the measured
peak (RunResult.peak_bytes) would not show what recomputation saves. `free_dead(builder, keep)`
appends a Free after the last instruction touching each tensor the program itself creates
(its first touch writes it), except the names in `keep` (the loss, the network output and the
parameter gradients, fetched after the run). Tensors read before any write (loaded parameters and
inputs) persist across steps and are never freed. This is the liveness a graph compiler's
memory planner uses (MindSpore's SOMAS, XLA's buffer assignment): a buffer lives from its
definition to its last use."""

from __future__ import annotations

from typing import Iterable

from ..program import Collective, Compute, Free, ProgramBuilder, Recv


def writes(ins) -> tuple[str, ...]:
    if isinstance(ins, Compute):
        return ins.outputs
    if isinstance(ins, Collective):
        return (ins.out,)
    if isinstance(ins, Recv):
        return (ins.tensor,)
    return ()


def free_dead(builder: ProgramBuilder, keep: Iterable[str]) -> None:
    """Insert, on every rank, a Free after the last use of each tensor the program creates."""
    keep = set(keep)
    for r, code in enumerate(builder.code):
        created, last = set(), {}
        seen = set()
        for k, ins in enumerate(code):
            if isinstance(ins, Free):
                for t in ins.tensors:
                    last.pop(t, None)
                    created.discard(t)
                    seen.discard(t)
                continue
            new = [t for t in writes(ins) if t not in seen]
            read = [t for t in ins.touches() if t not in writes(ins)]
            seen.update(read)
            created.update(new)
            seen.update(new)
            for t in ins.touches():
                last[t] = k
        after: dict[int, list[str]] = {}
        for t in sorted(created - keep):
            if t in last:
                after.setdefault(last[t], []).append(t)
        out = []
        for k, ins in enumerate(code):
            out.append(ins)
            if k in after:
                out.append(Free(tuple(after[k])))
        builder.code[r] = out

