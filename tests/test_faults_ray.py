"""Faults on the Ray runtime (the shared test session, 4 actors): a real `ray.kill` is detected
as a dead actor naming the device, a straggler beyond the bounded wait is named, and recovery
(new actors + restore) ends bit-identical to the fault-free run."""

import pytest
from fault_tally import tally_fixture

from simulator.errors import DeviceFailure
from simulator.faults import Fault, parse_faults, train_resilient
from simulator.models import MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.strategies import compile_strategy
from simulator.runtime.faulty import FaultyDevice

pytestmark = pytest.mark.ray
tally = tally_fixture("test_faults_ray")
MLP = MLPConfig(in_dim=6, hidden=8, layers=4, classes=3)
PP = TrainConfig(MLP, strategy="pp", devices=4, dp=2, microbatches=2, global_batch=8, steps=4)


@pytest.fixture(scope="module")
def rt(ray_session):
    from simulator.runtime.ray_runtime import RayRuntime

    runtime = RayRuntime(4, timeout_s=3.0, device_class=FaultyDevice)
    yield runtime
    runtime.close()


def test_real_kill_detected_as_dead_actor(rt):
    cfg = PP.resolved()
    prog = compile_strategy(cfg)
    rt.clear()
    rt.load(prog.initial)
    rt.load(prog.feed(*__import__("simulator.models", fromlist=["get_batch"]).get_batch(cfg.model, 8, 0, 0)))
    before = rt.actors[2]._actor_id.hex()
    rt.kill(2)
    with pytest.raises(DeviceFailure) as err:
        rt.run(prog.program)
    assert err.value.rank == 2 and "actor died" in str(err.value)
    assert not rt.alive(2) and rt.alive(0)
    rt.restart(2)
    assert rt.alive(2) and rt.actors[2]._actor_id.hex() != before


def test_recovery_with_new_actors_is_exact(rt, tally):
    r = tally.check(train_resilient(PP, runtime=rt, faults=parse_faults("1@1,kill:3@2#20"), checkpoint_every=2,
                                    replicas=False))
    assert r.faults_recovered == 2 and [x["restarted"] for x in r.recoveries] == [[1], [3]]
    assert "device 1" in r.reports[0] and "actor died" in r.reports[0]
    assert "device 3 failed at instruction #20" in r.reports[1]


def test_replica_recovery_and_dropped_message_on_ray(rt, tally):
    """On Ray every survivor runs on after a failure: a dp peer stopped by its unfinished
    AllReduce still holds the step's starting state (replicas), while a lost backward message
    lets the other pipeline stage finish its step, so only a checkpoint is consistent."""
    r = tally.check(train_resilient(PP, runtime=rt, faults=parse_faults("kill:0@1#10,drop:2@2"), checkpoint_every=2))
    assert [x["from"] for x in r.recoveries] == ["replicas", "checkpoint"]
    assert "receive timed out" in r.reports[1] and "device 2" in r.reports[1]


def test_straggler_beyond_the_bounded_wait_is_named_and_survived(rt, tally):
    slow = Fault(1, 1, "slow", 2, delay_s=4.0)  # longer than the 3 s bounded wait
    r = tally.check(train_resilient(PP, runtime=rt, faults=(slow,), checkpoint_every=1))
    assert len(r.reports) == 1 and "device 1" in r.reports[0] and "bounded wait of 3.0 s" in r.reports[0]
    assert r.recoveries[0]["restarted"] in ([], [1])  # replaced if still stuck when probed
