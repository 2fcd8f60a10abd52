"""The closed form's data-parallel and pipeline exchanges (`analytic.estimate` prices a step with
them; `search_bound` bounds one from below with `dp_sync` itself)."""

from __future__ import annotations

from simulator.cost.comm import NVLS, collective_time_s
from simulator.cost.parallel_config import Assumptions, ParallelConfig


def p2p_exposed(cfg: ParallelConfig, topo, act_bytes: float, algo: str) -> list[tuple[float, float]]:
    """Per pipeline device k, (seconds k spends in its own stage-boundary exchanges, seconds the
    fill and drain add to its wait). Megatron-LM's p2p is blocking on both sides (batched isend/irecv,
    then wait): per micro-batch and chunk k receives the activation from k-1 and sends its own to k+1,
    receives the gradient from k+1 and sends one to k-1 (interleaved chunks wrap around from the last
    device to the first); a received tensor is the 1/t slice, then, without SP, an all-gather over the
    TP group (scatter/gather); chunks are placed by `cfg.stage_map`, and two consecutive chunks on one
    device (V-shaped) exchange nothing. The first activation and the last gradient cross every boundary once
    while k waits (its bubble). Every hop moves the same slice, so it takes one of two times: within
    a node or across nodes (`Topology.link`)."""
    p, v, m, t = cfg.pp, cfg.virtual_stages, cfg.microbatches, cfg.tp
    gather = 0.0
    if t > 1 and not cfg.sequence_parallel:
        gather = collective_time_s("all_gather", act_bytes, cfg.tp_group(), topo, algo)
    node = [topo.node_of(cfg.rank(0, 0, a)) for a in range(p)]      # device a's first rank's node
    near, far = topo.intra.time_s(act_bytes / t), topo.inter.time_s(act_bytes / t)
    hop = lambda a, b: near if node[a % p] == node[b % p] else far  # noqa: E731
    fill = 2 * sum(hop(a, a + 1) + gather for a in range(p - 1))
    on = {s: d for d, row in enumerate(cfg.stage_map) for s in row}   # model chunk -> device
    out = []
    for k in range(p):
        own = 0.0
        for s in cfg.stage_map[k]:     # neighbouring chunks on the same device (V-shaped) exchange nothing
            if s > 0 and on[s - 1] != k:             # receive the activation, send the gradient back
                own += m * (hop(on[s - 1], k) + gather + hop(k, on[s - 1]))
            if s < p * v - 1 and on[s + 1] != k:     # send the activation on, receive its gradient
                own += m * (hop(k, on[s + 1]) + hop(on[s + 1], k) + gather)
        out.append((own, fill))
    return out


def dp_sync(cfg: ParallelConfig, A: Assumptions, topo, dense: float, expert: float, stage, m: int,
             fetch: tuple = (1, 0.0, 0), first_gathers: tuple = (), gather_window: float | None = None):
    """(seconds by collective kind, exposed seconds) of one step's data-parallel synchronisation of
    `dense` parameters over the data x context group and `expert` ones over dp c / ep ranks.

    ZeRO 0: all-reduce of fp32 gradients once per step; 1: reduce-scatter once per step, then an
    all-gather of the parameters (`Assumptions.param_bytes`); 2 (DeepSpeed): gradients reduce-scattered at every micro-batch;
    3: every micro-batch all-gathers the parameters for its forward and again for its backward and
    reduce-scatters its gradients (Rajbhandari et al. 2020 Sec. 5-7), one all-gather per sub-module
    (`fetch` = `zero3_fetch.zero3_pass`: each pass pays the collective's latency per sub-module),
    and with full recomputation a third time the sub-modules beyond DeepSpeed's reuse distance
    (`Assumptions.stage3_max_reuse_distance`). Overlap (`Assumptions`):
    gradient reduction hides under the backward it follows (the last micro-batch's for ZeRO 0-1,
    each one's for 2-3), parameter gathers under the forward (ZeRO-3: prefetched one layer ahead
    under each forward and backward; the gathers of `first_gathers` elements, which a pass issues
    before its first compute, hide under nothing: the embedding and first layer of a forward, the
    output layer of a backward, as the event clock's prefetch runs them)."""
    F, B, W = stage
    algo = A.collective_algo
    ar_algo = NVLS if A.nvls else algo
    groups = [(dense, cfg.dp_cp_group())]
    if expert:
        groups.append((expert, cfg.edp_group()))
    rs = ag = 0.0
    for params, grp in groups:
        full = cfg.zero_stage == 0 or (cfg.zero_stage == 1 and A.dp_grad_all_reduce)
        if full:
            rs += collective_time_s("all_reduce", A.grad_reduce_bytes * params, grp, topo, ar_algo)
        else:
            rs += collective_time_s("reduce_scatter", A.grad_reduce_bytes * params, grp, topo, algo)
        if cfg.zero_stage:
            ag += collective_time_s("all_gather", A.param_bytes * params, grp, topo, algo)
    z = cfg.zero_stage
    bwd, mb = B + W, F + B + W                      # one micro-batch's backward, and its whole work
    if z <= 1:
        by = {"all_reduce": rs} if z == 0 else {"all_reduce" if full else "reduce_scatter": rs, "all_gather": ag}
        exposed = max(0.0, rs - bwd) if A.overlap_grad_reduce else rs
        # ZeRO-1/2's overlapped gather: done when the first forward reaches its last layer (the
        # clock's program waits there; `gather_window`, default the whole forward)
        exposed += max(0.0, ag - (F if gather_window is None else gather_window)) if A.overlap_param_gather else ag
        return by, exposed
    if z == 2:   # reduce-scatters of micro-batch j run under the work of j+1; the last under its backward
        grads = max(0.0, rs - bwd) + (m - 1) * max(0.0, rs - mb) if A.overlap_grad_reduce else m * rs
        return {"reduce_scatter": m * rs, "all_gather": ag}, grads + (max(0.0, ag - F) if A.overlap_param_gather else ag)
    fetches, again, n_again = fetch
    grp = groups[0][1]
    latency = collective_time_s("all_gather", 0.0, grp, topo, algo)       # alpha part of one gather
    ag = 2 * (ag + (fetches - 1) * latency)                               # forward and backward passes
    if n_again:
        ag += collective_time_s("all_gather", A.param_bytes * again, grp, topo, algo) + (n_again - 1) * latency
    first = sum(collective_time_s("all_gather", A.param_bytes * x, grp, topo, algo) for x in first_gathers if x)
    hidden = (ag - first if A.overlap_param_gather else 0.0) + (rs if A.overlap_grad_reduce else 0.0)
    exposed = m * (ag + rs - hidden) + m * max(0.0, hidden - mb)
    return {"reduce_scatter": m * rs, "all_gather": m * ag}, exposed


def chunk_times(cfg: ParallelConfig, layers: int, stages, ends: dict) -> tuple:
    """Per model chunk, (F, B, W) of one micro-batch: each pipeline device's `stages[k]` split over
    its chunks (`cfg.stage_map`) by their layers, the ends kept on their own chunk (`ends`: chunk
    -> (F, B, W), the embedding on the first, the LM head on the last). For a schedule played with
    each chunk's own times (`schedule_registry.executed_idle`)."""
    chunks = cfg.chunk_layers(layers)
    zero = (0.0, 0.0, 0.0)
    out = [zero] * len(chunks)
    for k, row in enumerate(cfg.stage_map):
        base = [stages[k][i] - sum(ends.get(j, zero)[i] for j in row) for i in range(3)]
        n = sum(chunks[j] for j in row)
        for j in row:
            share = chunks[j] / n if n else 1 / len(row)
            out[j] = tuple(base[i] * share + ends.get(j, zero)[i] for i in range(3))
    return tuple(out)
