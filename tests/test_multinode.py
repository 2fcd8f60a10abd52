"""A real two-node Ray cluster on this machine (head + worker raylet, ray.cluster_utils.Cluster),
a pp=2 x dp=2 training placed with a placement group (2 simulated nodes -> 2 Ray nodes), and the
worker node removed before step 2: detection (dead actors), restart on the surviving node,
restore from the checkpoint, final weights bit-identical to the fault-free run.

Runs in a subprocess (`python -m simulator.faults.cluster`), so the test suite's shared Ray
session (tests/conftest.py `ray_session`) is never shut down or replaced: the cluster has its
own GCS and raylets and is torn down in the subprocess's finally blocks; the subprocess itself is
bounded by a timeout."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray


def test_node_loss_on_a_real_multi_node_cluster():
    proc = subprocess.run([sys.executable, "-m", "simulator.faults.cluster", "4"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PARASIM_CLUSTER_RESULT "))
    out = json.loads(line.split(" ", 1)[1])
    assert out["ray_nodes"] == 2 and out["same_node_pairs"] == [True, True]  # a simulated node on one Ray node
    assert out["placement"][0] != out["placement"][2]  # the two simulated nodes on different Ray nodes
    lost = out["devices_on_worker"]
    assert sorted(lost) in ([0, 1], [2, 3])
    assert set(out["placement_after"]) <= set(out["alive_nodes"]), out  # every device on a live node
    assert len(out["failures"]) == 1 and "actor died" in out["failures"][0]
    assert f"device {lost[0]}" in out["failures"][0] or f"device {lost[1]}" in out["failures"][0]
    rec = out["recoveries"][0]
    # the node is removed before step 2; its death is noticed at step 2 or, on a busy machine, a little later
    assert sorted(rec["restarted"]) == sorted(lost) and rec["from"] == "checkpoint"
    assert rec["step"] >= 2 and rec["resume_step"] in (rec["step"], rec["step"] - 1)
    assert out["faults_injected"] == 1 and out["faults_recovered"] == 1
    assert out["identical_to_fault_free"] and out["max_rel_weight_diff_vs_single"] < 1e-9
    print(f"\n[test_multinode] faults survived: 1 node loss ({len(lost)} devices), 0 lost updates")


def test_train_cli_address_places_devices_by_simulated_node(ray_session, capsys, monkeypatch):
    """`parasim train --address ADDR` runs on Ray (no --runtime needed) and places the actors with a
    placement group of one bundle per simulated node (--devices-per-node; default the preset's)."""
    from simulator.cli import main
    from simulator.runtime import factory, ray_runtime

    made = []

    class Spy(ray_runtime.RayRuntime):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            pg = self.placement_group
            made.append((self.devices_per_node, pg.bundle_count if pg is not None else 0))

    monkeypatch.setattr(factory, "RayRuntime", Spy)  # make_runtime builds the actors
    address = ray_session.get_runtime_context().gcs_address
    base = ["train", "--model", "mlp", "--strategy", "dp", "--devices", "4", "--batch", "4", "--steps", "1",
            "--layers", "2", "--hidden", "4", "--address", address, "--json"]
    assert main(base + ["--devices-per-node", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["max_rel_weight_diff_vs_single"] < 1e-9
    assert main(base) == 0
    capsys.readouterr()
    assert made == [(2, 2), (8, 1)]  # 4 ranks: 2 nodes of 2; the local preset's 8 per node: one bundle
    assert ray_session.is_initialized()  # the shared session is reused, not shut down
