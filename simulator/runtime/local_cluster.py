"""A real multi-node Ray cluster on one machine (head + worker raylets), for tests and demos.

`ray.cluster_utils.Cluster` starts separate raylets (one "node" each, own CPUs) under one GCS;
`remove_node` kills a node's raylet and with it every actor on it, as a lost machine would.
Health checks are shortened so the GCS declares a lost node dead within about 2 s.
Use it in a process of its own: it calls `ray.init(address=...)` and `ray.shutdown()`.
"""

from __future__ import annotations

import contextlib
import logging

HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 4, "health_check_initial_delay_ms": 0}


class LocalCluster:
    """A head node and `workers` worker nodes, each with `num_cpus` CPUs; the driver joined."""

    def __init__(self, workers: int = 1, num_cpus: int = 1):
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": num_cpus, "include_dashboard": False, "_system_config": HEALTH})
        self.workers = [self.cluster.add_node(num_cpus=num_cpus) for _ in range(workers)]
        self.cluster.wait_for_nodes(timeout=60)
        ray.init(address=self.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        self.address = self.cluster.address

    def worker_ids(self) -> list[str]:
        return [w.node_id for w in self.workers]

    def remove_worker(self, i: int = 0) -> str:
        """Kill worker node i (raylet and actors, not gracefully); returns its node id."""
        node = self.workers[i]
        self.cluster.remove_node(node, allow_graceful=False)
        return node.node_id

    def alive_nodes(self) -> list[str]:
        import ray

        return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]

    def shutdown(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
        self.cluster.shutdown()
