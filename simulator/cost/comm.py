"""Alpha-beta time of collectives: priced plans and closed forms.

Symbols: n ranks, S bytes (nccl-tests convention: for all_gather / reduce_scatter / all_to_all
S is the whole array, per-rank part x n), alpha latency per step, B bandwidth per direction.

Closed forms (Thakur, Rabenseifner, Gropp 2005; Patarasuk & Yuan 2009; nccl-tests doc/PERFORMANCE.md):

| algo             | all_reduce                       | reduce_scatter / all_gather   | broadcast / reduce     | all_to_all               |
|------------------|----------------------------------|-------------------------------|------------------------|--------------------------|
| ring             | 2(n-1) a + 2 (n-1)/n S/B         | (n-1) a + (n-1)/n S/B         | (n-1) a + S/B (pipelined chain) | (n-1) a + (n-1)/n S/B |
| tree             | 2 ceil(log2 n) a + 2 S/B         | as ring                       | ceil(log2 n) a + S/B   | as ring                  |
| halving_doubling | 2 L a + 2 (n-1)/n S/B            | L a + (n-1)/n S/B             | as tree                | L a + L/2 S/B (Bruck)    |
| direct           | 2 a + 2 (n-1)/n S/B              | a + (n-1)/n S/B               | a + (n-1) S/B (root sends all) | a + (n-1)/n S/B    |

L = ceil(log2 n); halving-doubling on a non-power-of-two n adds two fold steps of S/B each.
Pipelined (chunked) tree and chain are taken in their large-message limit, as NCCL does.

Topology (`collective_time_s`): a group inside one node uses the intra-node link. A group that
spans nodes is priced **hierarchically** when every node holds the same number g > 1 of its
ranks (NCCL's tree/CollNet and Megatron's layout): intra-node reduce-scatter, then g parallel
inter-node collectives of S/g each (one NIC per device), then intra-node all-gather. With one
rank per node the flat algorithm runs on the inter-node link; with uneven nodes, the flat
algorithm runs at the slowest link (inter-node). all_to_all is always flat at the slowest link.

NVLink SHARP (`algo="nvls"`, NCCL_ALGO=NVLS): an all-reduce inside one node whose switches reduce
in the network runs at the ring's bus bandwidth times the node's measured gain g(n)
(`Topology.nvls_allreduce_gain`, from nccl-tests on H100, `simulator.cost.hardware`):
    2 a + 2 (n-1)/n S / (B g(n)).
Every other kind, a group spanning nodes, or a node without NVLS falls back to "ring".
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from simulator.collectives.plan import Plan
from simulator.errors import ParasimError
from simulator.topology import Link, Topology

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")
ALGOS = ("ring", "tree", "halving_doubling", "direct")
NVLS = "nvls"


def bus_bandwidth_factor(kind: str, n: int) -> float:
    """busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md): AllReduce 2(n-1)/n; ReduceScatter,
    AllGather, AllToAll (n-1)/n; Broadcast, Reduce 1."""
    if n < 1:
        raise ParasimError(f"group size must be >= 1, got {n}")
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce"):
        return 1.0
    raise ParasimError(f"unknown collective kind {kind!r}; known {KINDS}")


def plan_time(plan: Plan, link_of: Callable[[int, int], tuple[float, float]],
              group: Sequence[int] | None = None) -> float:
    """Sum over the plan's steps of the slowest message of the step: max over (src, dst) pairs of
    latency + bytes / bandwidth, where the chunks one rank sends another within a step form one
    message (halving-doubling moves several chunks per pair) — the alpha-beta model (Hockney 1994).

    `link_of(src, dst)` -> (latency_s, bandwidth_Bps). Plan ranks are group-local; pass `group`
    to map them to global ranks before asking `link_of`.
    """
    total = 0.0
    for step in plan.steps:
        worst = 0.0
        for (a, b), nbytes in step.links().items():
            src, dst = (a, b) if group is None else (group[a], group[b])
            latency_s, bandwidth_Bps = link_of(src, dst)
            worst = max(worst, latency_s + nbytes / bandwidth_Bps)
        total += worst
    return total


def closed_form_time_s(kind: str, algo: str, nbytes: float, n: int, link: Link) -> float:
    """Alpha-beta time of one collective of S = `nbytes` over n ranks joined by `link` (table above)."""
    if kind not in KINDS:
        raise ParasimError(f"unknown collective kind {kind!r}; known {KINDS}")
    if algo not in ALGOS:
        raise ParasimError(f"unknown collective algorithm {algo!r}; known {ALGOS}")
    if n < 1:
        raise ParasimError(f"group size must be >= 1, got {n}")
    if nbytes < 0:
        raise ParasimError(f"collective size must be >= 0 bytes, got {nbytes}")
    if n == 1:
        return 0.0
    a, S, B = link.latency_s, float(nbytes), link.bandwidth_Bps
    frac = (n - 1) / n
    L = math.ceil(math.log2(n))
    fold = 0.0 if n & (n - 1) == 0 else 2 * (a + S / B)
    if algo == "ring":
        return {"all_reduce": 2 * (n - 1) * a + 2 * frac * S / B,
                "reduce_scatter": (n - 1) * a + frac * S / B,
                "all_gather": (n - 1) * a + frac * S / B,
                "all_to_all": (n - 1) * a + frac * S / B,
                "broadcast": (n - 1) * a + S / B,
                "reduce": (n - 1) * a + S / B}[kind]
    if algo == "tree":
        if kind == "all_reduce":
            return 2 * L * a + 2 * S / B
        if kind in ("broadcast", "reduce"):
            return L * a + S / B
        return closed_form_time_s(kind, "ring", nbytes, n, link)
    if algo == "halving_doubling":
        return {"all_reduce": 2 * L * a + 2 * frac * S / B + fold,
                "reduce_scatter": L * a + frac * S / B + fold / 2,
                "all_gather": L * a + frac * S / B + fold / 2,
                "all_to_all": L * a + L / 2 * S / B,
                "broadcast": L * a + S / B,
                "reduce": L * a + S / B}[kind]
    # direct: every rank sends to every other in one step (messages share the rank's one port)
    return {"all_reduce": 2 * a + 2 * frac * S / B,
            "reduce_scatter": a + frac * S / B,
            "all_gather": a + frac * S / B,
            "all_to_all": a + frac * S / B,
            "broadcast": a + (n - 1) * S / B,
            "reduce": a + (n - 1) * S / B}[kind]


def collective_time_s(kind: str, nbytes: float, ranks: Sequence[int], topology: Topology,
                      algo: str = "ring") -> float:
    """Topology-aware time of a collective over global `ranks` (module docstring for the rules)."""
    ranks = list(ranks)
    if len(set(ranks)) != len(ranks):
        raise ParasimError(f"collective group has repeated ranks: {ranks}")
    n = len(ranks)
    if n <= 1:
        return 0.0
    nodes = topology.nodes_of(ranks)
    gain = topology.nvls_allreduce_gain.get(n, 1.0) if algo == NVLS else 1.0
    if algo == NVLS:
        algo = "ring"
    if len(nodes) == 1:
        if kind == "all_reduce" and gain > 1.0:
            link = topology.intra
            return 2 * link.latency_s + 2 * (n - 1) / n * float(nbytes) / (link.bandwidth_Bps * gain)
        return closed_form_time_s(kind, algo, nbytes, n, topology.intra)
    sizes = {len(v) for v in nodes.values()}
    g, k = len(ranks) // len(nodes), len(nodes)
    if kind == "all_to_all" or len(sizes) > 1 or g == 1:
        return closed_form_time_s(kind, algo, nbytes, n, topology.inter)
    intra = lambda kd, s: closed_form_time_s(kd, algo, s, g, topology.intra)  # noqa: E731
    inter = lambda kd, s: closed_form_time_s(kd, algo, s, k, topology.inter)  # noqa: E731
    S = float(nbytes)
    if kind == "all_reduce":      # RS in node, g parallel AR of S/g across nodes, AG in node
        return intra("reduce_scatter", S) + inter("all_reduce", S / g) + intra("all_gather", S)
    if kind == "reduce_scatter":  # RS in node (S -> S/g), then RS across nodes (S/g -> S/(gk))
        return intra("reduce_scatter", S) + inter("reduce_scatter", S / g)
    if kind == "all_gather":
        return inter("all_gather", S / g) + intra("all_gather", S)
    if kind == "broadcast":       # across nodes in g parallel pieces, then gather in node
        return inter("broadcast", S / g) + intra("all_gather", S)
    # reduce: RS in node, g parallel reduces of S/g to the root node, gather there
    return intra("reduce_scatter", S) + inter("reduce", S / g) + intra("all_gather", S)


def algbw_Bps(kind: str, nbytes: float, time_s: float) -> float:
    """nccl-tests algorithm bandwidth S / t."""
    if not time_s > 0:
        raise ParasimError(f"time must be > 0 to compute a bandwidth, got {time_s}")
    return nbytes / time_s
