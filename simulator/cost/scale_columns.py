"""A scale program's columns (`scale_program.build_scale_program`): each device's schedule actions
emitted once per (kind, chunk) with the micro-batch as a placeholder (`program_tiles`), so a
million-instruction step is built from a few blocks."""

from __future__ import annotations

from simulator.cost.grad_buckets import GradBuckets
from simulator.program_tiles import J, TileBuilder


def program_columns(em, sched, n: int):
    """The program's columns: each device's actions as blocks emitted once per (kind, chunk) with
    the micro-batch as a placeholder (`program_tiles`), except the actions that complete gradients,
    whose buckets differ (emitted one by one, in order, with the same bucket state as `device`), and
    the first micro-batch's forwards when they wait for prefetched parameters (`prefetched_params`)."""
    tiles = TileBuilder(n)
    for k in range(em.cfg.pp):
        for i in range(em.w):
            r, cache = k * em.w + i, {}
            if em.A.overlap_moe_comm:     # merged pairs of two micro-batches: the device as one block
                tiles.add(r, em.device(k, r, sched.actions[k]))
                continue
            buckets = GradBuckets(em, r)
            blocks: list = [[]]
            em.prologue(blocks[0], r)
            which, js = [0], [0]
            for a, gather in zip(sched.actions[k], em.gathers(sched.actions[k])):
                if a.kind in ("BW", "W") and em.is_last(a.microbatch):
                    blocks.append([])
                    em.action(blocks[-1], k, r, a.kind, J, a.chunk, True, buckets, gather)
                    t = len(blocks) - 1
                elif a.kind == "F" and a.microbatch == 0 and em.prefetched_params():
                    blocks.append([])       # the first forward waits for the prefetched parameters
                    em.action(blocks[-1], k, r, a.kind, 0, a.chunk, False, buckets, gather)
                    t = len(blocks) - 1
                else:
                    t = cache.get((a.kind, a.chunk, gather))
                    if t is None:
                        t = cache[(a.kind, a.chunk, gather)] = len(blocks)
                        blocks.append([])
                        em.action(blocks[-1], k, r, a.kind, J, a.chunk, False, buckets, gather)   # not last: no bucket
                which.append(t)
                js.append(a.microbatch)
            blocks.append([])
            em.epilogue(blocks[-1], k, r, buckets)
            which.append(len(blocks) - 1)
            js.append(0)
            tiles.add_many(r, blocks, which, js)
    return tiles.build()
