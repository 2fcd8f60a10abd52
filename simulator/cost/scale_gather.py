"""ZeRO-3's parameter all-gathers in a scale program (`scale_program._Emitter`): one collective
per layer (or FSDP unit, `simulator.cost.fsdp`) before its forward and again before its backward,
blocking, or prefetched one unit ahead on the stream of non-blocking collectives."""

from __future__ import annotations

from simulator.cost.fsdp import copy_out_bytes
from simulator.cost.scale_kernels import Kernel
from simulator.program import Collective, Compute


def gather_layer(em, out, r, c, l, j, which, elements=None, x="params") -> tuple:
    """ZeRO-3: all-gather one layer's parameters (`Assumptions.param_bytes` each) (or `elements` of them; the embedding's
    or output layer's for l = "emb" / "head") over the data-parallel group before its forward
    and again before its backward (non-blocking = prefetched, `overlap_param_gather`). One
    collective per layer: the closed form adds the latency of DeepSpeed's per-sub-module
    fetches (`zero3_fetch`). FSDP's gather reads `x`, the activation the previous layer wrote,
    so it starts no earlier than that layer's end (one-unit prefetch, `simulator.cost.fsdp`)."""
    if elements is None:
        elements, experts = em.unit_of(r, c, l)
    else:
        experts = em.expert_local if em.fsdp and l not in ("emb", "head") and em.cfg.ep > 1 else 0.0
    if em.cfg.zero_stage < 3 or em.cfg.dp * em.cfg.cp == 1 or not elements:
        return ()
    w = f"w{which}{c}.{l}.{j}"
    out.append(Collective("all_gather", x if em.fsdp else "params", w, (r,), tag="dp", microbatch=j,
                          nbytes=int(em.A.param_bytes * (elements - experts) / em.cfg.shard_size),
                          blocking=not em.prefetch))
    if not experts:
        return (w,)
    # FSDP: the unit's experts over the expert-data-parallel group (`simulator.cost.fsdp`)
    out.append(Collective("all_gather", x, f"{w}e", (r,), tag="edp", microbatch=j,
                          nbytes=int(em.A.param_bytes * experts / em.expert_dp), blocking=not em.prefetch))
    return (w, f"{w}e")


def copied_out(em, out, needs: tuple, r, c, l, j, which) -> tuple:
    """FSDP2's copy-out of unit l's gathered parameters on the compute lane, just before the unit
    computes (`simulator.cost.fsdp.copy_out_bytes`): what the unit's compute then waits for."""
    if not needs:
        return needs
    nbytes = copy_out_bytes(em.cfg, em.unit_of(r, c, l)[0])
    if not nbytes:
        return needs
    kern = em.copy_kernels.get(nbytes)
    if kern is None:      # one Kernel per size: the device model caches its time per Kernel
        kern = em.copy_kernels[nbytes] = Kernel("fsdp_copy_out", (), nbytes)
    name = f"{needs[0]}u"
    out.append(Compute("fsdp_copy_out", needs, (name,), 0.0, int(nbytes), {"kernel": kern},
                       "forward" if which == "f" else "backward", j, f"copy-out {l}"))
    return (name,)


def gathered(em, out, r, c, j, which, order, x="params", gather=True):
    """Per layer of `order`, the gathered parameters its compute needs (none when not `gather`:
    FSDP's unit is still unsharded, `fsdp.gather_flags`); with prefetch (`overlap_param_gather`)
    the next layer's gather is issued before this layer computes, so a gradient reduce-scatter
    queued on the same stream does not delay it (DeepSpeed / FSDP)."""
    order = list(order)
    if not gather:
        for l in order:
            yield l, ()
        return
    if not em.prefetch:
        for l in order:
            yield l, copied_out(em, out, gather_layer(em, out, r, c, l, j, which, x=x), r, c, l, j, which)
        return
    nxt = gather_layer(em, out, r, c, order[0], j, which, x=x) if order else ()
    for i, l in enumerate(order):
        cur = nxt
        if i + 1 < len(order):
            nxt = gather_layer(em, out, r, c, order[i + 1], j, which, x=x)
        yield l, copied_out(em, out, cur, r, c, l, j, which)
