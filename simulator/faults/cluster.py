"""A real multi-node Ray cluster on one machine, a training on it, and a node lost mid-run.

    python -m simulator.faults.cluster      # prints one JSON object

Starts a head node and one worker node (`ray.cluster_utils.Cluster`: separate raylets, one CPU
each, short health checks), joins it with `address=`, places 4 device actors with a placement
group of 2 bundles (2 simulated nodes of 2 devices: ranks 0-1 and 2-3; each bundle on one Ray
node), trains pp=2 x dp=2, removes the worker node (its raylet and its actors die) before step 2,
and recovers: dead devices are detected, restarted on the surviving node, and restored from the
last checkpoint. Meant to run in its own process (the test suite's shared Ray session is left
alone); everything is shut down in `finally` blocks and every wait is bounded.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

RESULT_PREFIX = "PARASIM_CLUSTER_RESULT "


def run_demo(steps: int = 4, timeout_s: float = 20.0) -> dict:
    from ..models import MLPConfig
    from ..parallel.config import TrainConfig
    from ..runtime.faulty import FaultyDevice
    from ..runtime.local_cluster import LocalCluster
    from ..runtime.ray_runtime import RayRuntime
    from ..training import train
    from .recovery import train_resilient

    cfg = TrainConfig(MLPConfig(in_dim=6, hidden=8, layers=4, classes=3), strategy="pp", devices=4, dp=2, pp=2,
                      microbatches=2, global_batch=8, steps=steps)
    cluster = LocalCluster(workers=1, num_cpus=1)
    runtime = None
    try:
        runtime = RayRuntime(4, address=cluster.address, timeout_s=timeout_s, devices_per_node=2,
                             device_class=FaultyDevice)
        nodes = runtime.node_of()
        worker_id = cluster.worker_ids()[0]
        on_worker = [r for r, n in enumerate(nodes) if n == worker_id]

        def lose_node(step, rt) -> bool:
            if step != 2:
                return False
            cluster.remove_worker(0)  # its raylet and actors die ...
            deadline = time.monotonic() + 60  # ... asynchronously: wait (bounded) until their death shows,
            while any(rt.alive(r) for r in on_worker) and time.monotonic() < deadline:  # or a busy machine may
                time.sleep(0.5)  # run the remaining steps on the dying actors and notice only at the end
            return True

        with tempfile.TemporaryDirectory(prefix="parasim-cluster-") as root:
            result = train_resilient(cfg, runtime=runtime, checkpoint_every=1, checkpoint_dir=root,
                                     before_step=lose_node)
        baseline = train(cfg).params
        identical = all(
            (result.train.params[li][n] == baseline[li][n]).all() for li in range(len(baseline)) for n in baseline[li])
        return {
            "ray_nodes": len(set(nodes)), "placement": nodes, "worker_node": worker_id,
            "devices_on_worker": on_worker, "same_node_pairs": [nodes[0] == nodes[1], nodes[2] == nodes[3]],
            "placement_after": runtime.node_of(), "alive_nodes": cluster.alive_nodes(),
            "failures": result.reports, "recoveries": result.recoveries,
            "faults_injected": result.faults_injected, "faults_recovered": result.faults_recovered,
            "replayed_steps": result.replayed_steps, "identical_to_fault_free": bool(identical),
            "max_rel_weight_diff_vs_single": result.train.max_rel_weight_diff_vs_single,
        }
    finally:
        if runtime is not None:
            try:
                runtime.close()
            except Exception:
                pass
        cluster.shutdown()


if __name__ == "__main__":
    result = run_demo(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
    print(RESULT_PREFIX + json.dumps(result), flush=True)  # raylet logs may share stdout
