"""Nodes and links: which link joins two ranks, and what it costs.

Model (the DGX / rail-optimised cluster picture): ranks are laid on nodes in consecutive blocks
of `devices_per_node` (ranks 0..7 on node 0, 8..15 on node 1, ...). Two ranks on one node talk
over the intra-node link (NVLink/NVSwitch: full bandwidth between any pair); ranks on different
nodes talk over the inter-node link (one NIC per device, so the bandwidth is per device and
several devices of a node can each use their own NIC at once).

A `Link` is the alpha-beta pair: a message of n bytes takes `latency_s + n / bandwidth_Bps`
(Hockney 1994; the alpha-beta model used by NCCL's tuner and by Thakur et al. 2005).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from simulator.errors import ParasimError


@dataclass(frozen=True)
class Link:
    """alpha (latency_s) and 1/beta (bandwidth_Bps, bytes per second per direction)."""

    latency_s: float
    bandwidth_Bps: float

    def __post_init__(self):
        if not self.latency_s >= 0:
            raise ParasimError(f"link latency_s must be >= 0, got {self.latency_s}")
        if not self.bandwidth_Bps > 0:
            raise ParasimError(f"link bandwidth_Bps must be > 0, got {self.bandwidth_Bps}")

    def time_s(self, nbytes: float) -> float:
        """alpha + n beta for one message of `nbytes`."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def scaled(self, efficiency: float) -> "Link":
        """The same link delivering `efficiency` x its bandwidth (0 < efficiency <= 1)."""
        if not 0 < efficiency <= 1:
            raise ParasimError(f"link efficiency must be in (0, 1], got {efficiency}")
        return Link(self.latency_s, self.bandwidth_Bps * efficiency)

    def __repr__(self) -> str:
        return f"Link({self.latency_s * 1e6:.3g} us, {self.bandwidth_Bps / 1e9:.4g} GB/s)"


@dataclass(frozen=True)
class Topology:
    """`n_devices` ranks in nodes of `devices_per_node` consecutive ranks (last node may be short).
    `nvls_allreduce_gain`: group size -> in-switch (NVLink SHARP) all-reduce bus bandwidth over the
    ring's inside one node, when the node has it (`simulator.cost.hardware`)."""

    n_devices: int
    devices_per_node: int
    intra: Link
    inter: Link
    nvls_allreduce_gain: Mapping[int, float] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.n_devices < 1:
            raise ParasimError(f"topology needs n_devices >= 1, got {self.n_devices}")
        if self.devices_per_node < 1:
            raise ParasimError(f"topology needs devices_per_node >= 1, got {self.devices_per_node}")

    @property
    def n_nodes(self) -> int:
        return -(-self.n_devices // self.devices_per_node)

    def _check(self, rank: int) -> None:
        if not 0 <= rank < self.n_devices:
            raise ParasimError(f"rank {rank} outside 0..{self.n_devices - 1}")

    def node_of(self, rank: int) -> int:
        self._check(rank)
        return rank // self.devices_per_node

    def same_node(self, a: int, b: int) -> bool:
        return self.node_of(a) == self.node_of(b)

    def link(self, a: int, b: int) -> Link:
        """The link a message from rank a to rank b uses (intra-node if they share a node)."""
        return self.intra if self.same_node(a, b) else self.inter

    def link_of(self, a: int, b: int) -> tuple[float, float]:
        """(latency_s, bandwidth_Bps) between two ranks; the signature `plan_time` expects."""
        lk = self.link(a, b)
        return lk.latency_s, lk.bandwidth_Bps

    def nodes_of(self, ranks) -> dict[int, list[int]]:
        """node -> the ranks of `ranks` on it, in the given order."""
        out: dict[int, list[int]] = {}
        n, per = self.n_devices, self.devices_per_node     # node_of, inlined: the search asks this ~10^5 times
        for r in ranks:
            if not 0 <= r < n:
                self._check(r)
            out.setdefault(r // per, []).append(r)
        return out

    def spans_nodes(self, ranks) -> bool:
        return len(self.nodes_of(ranks)) > 1

    def __repr__(self) -> str:
        return (f"Topology({self.n_devices} devices = {self.n_nodes} nodes x {self.devices_per_node}, "
                f"intra {self.intra!r}, inter {self.inter!r})")
