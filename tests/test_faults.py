"""Fault injection and recovery on the LocalRuntime: every recovered run ends bit-identical to the
fault-free run (tests/fault_tally.py counts the faults survived)."""

import json

import pytest
from fault_tally import tally_fixture

from simulator.cli import main
from simulator.errors import DeviceFailure, ParasimError
from simulator.faults import Fault, parse_faults, random_faults, train_resilient
from simulator.models import MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.strategies import compile_strategy
from simulator.runtime.faulty import FaultyDevice
from simulator.runtime.local import LocalRuntime

tally = tally_fixture("test_faults")
MLP = MLPConfig(in_dim=6, hidden=8, layers=4, classes=3)
PP = TrainConfig(MLP, strategy="pp", devices=4, dp=2, microbatches=2, global_batch=8, steps=4)
DP = TrainConfig(MLP, strategy="dp", devices=3, global_batch=6, steps=4)


def test_parse_faults_and_refusals():
    assert parse_faults("1@2, slow:0@1#5") == (Fault(1, 2), Fault(0, 1, "slow", 5))
    assert repr(Fault(3, 1, "kill", 40)) == "kill:3@1#40"
    assert parse_faults(None) == () and parse_faults("") == ()
    for bad in ("1", "a@1", "boom:1@2", "1@2#x", "-1@2"):
        with pytest.raises(ParasimError, match="bad fault|unknown fault kind"):
            parse_faults(bad)
    prog = compile_strategy(PP.resolved()).program
    with pytest.raises(ParasimError, match="device 9 does not exist"):
        Fault(9, 0).check(prog, 4)
    with pytest.raises(ParasimError, match="step 7 is never run"):
        Fault(0, 7).check(prog, 4)
    with pytest.raises(ParasimError, match="instructions"):
        Fault(0, 0, "kill", 10_000).check(prog, 4)
    recv = next(i for i, ins in enumerate(prog.code[2]) if type(ins).__name__ == "Recv")
    with pytest.raises(ParasimError, match="only a Send can be dropped"):
        Fault(2, 0, "drop", recv).check(prog, 4)


def test_kill_at_instruction_is_detected_and_named():
    """Without a way to recover, the failure surfaces as one line naming device and instruction."""
    cfg = PP.resolved()
    prog = compile_strategy(cfg).program
    rt = LocalRuntime(4, device_class=FaultyDevice)
    with pytest.raises(ParasimError) as err:
        train_resilient(cfg, runtime=rt, faults=(Fault(3, 1, "kill", 20),), replicas=False)
    cause = err.value.__cause__
    assert isinstance(cause, DeviceFailure) and cause.rank == 3 and "#20" in cause.instruction
    msg = str(err.value)
    assert msg.startswith(f"device 3 failed at instruction #20 {prog.code[3][20]!r}") and "\n" not in msg
    assert "cannot recover at step 1: no checkpoint" in msg


def test_without_checkpoint_or_replica_recovery_is_refused():
    cfg = TrainConfig(MLP, strategy="zero3", devices=2, global_batch=8, steps=3)
    with pytest.raises(ParasimError, match="no checkpoint .* no surviving replica holds the lost state of device"):
        train_resilient(cfg, faults=(Fault(1, 1),))


@pytest.mark.parametrize("spec", ["1@2", "kill:3@1#20", "fail:2@3#35", "kill:0@1#35,kill:2@3#10"])
def test_recovery_from_replicas_is_exact(tally, spec):
    """A dp peer holds the same state: copy it, retry only the failed step."""
    r = tally.check(train_resilient(PP, faults=parse_faults(spec)))
    assert r.faults_recovered == len(parse_faults(spec))
    assert {x["from"] for x in r.recoveries} == {"replicas"}
    assert r.replayed_steps == r.faults_recovered  # only the failed steps ran twice
    for rec, f in zip(r.recoveries, parse_faults(spec)):
        assert rec["device"] == f.device and rec["restarted"] == [f.device] and rec["resume_step"] == f.step


@pytest.mark.parametrize("spec, every, replays", [("1@3", 2, 2), ("kill:0@1#35,kill:2@3#10", 2, 4),
                                                  ("fail:2@2", 1, 1)])
def test_recovery_from_checkpoint_replays_exactly(tally, spec, every, replays):
    r = tally.check(train_resilient(PP, faults=parse_faults(spec), checkpoint_every=every, replicas=False))
    assert {x["from"] for x in r.recoveries} == {"checkpoint"}
    assert r.replayed_steps == replays
    assert r.checkpoints == [s for s in range(PP.steps) if s % every == 0]


def test_zero_recovers_from_checkpoint(tally):
    cfg = TrainConfig(MLP, strategy="zero2", devices=2, global_batch=8, steps=3)
    r = tally.check(train_resilient(cfg, faults=parse_faults("kill:1@2#5"), checkpoint_every=1))
    assert r.recoveries[0]["from"] == "checkpoint" and r.recoveries[0]["resume_step"] == 2


def test_dropped_message_retries_the_step(tally):
    r = tally.check(train_resilient(PP, faults=parse_faults("drop:0@1")))
    assert "receive timed out" in r.reports[0] and "device 0" in r.reports[0]
    assert r.recoveries[0]["restarted"] == []  # nobody died: the step is retried from the replicas


def test_random_faults_are_seeded_and_survived(tally):
    prog = compile_strategy(DP.resolved()).program
    faults = random_faults(7, 3, prog, DP.steps, kinds=("kill", "fail", "drop"))
    assert faults == random_faults(7, 3, prog, DP.steps, kinds=("kill", "fail", "drop"))
    assert len({f.step for f in faults}) == 3
    r = tally.check(train_resilient(DP, faults=faults, checkpoint_every=2))
    assert r.faults_injected == 3 and r.faults_recovered == 3


def test_straggler_shows_in_wall_time_and_trace(tally):
    cfg = DP.resolved()
    fast = train_resilient(cfg, checkpoint_every=0)
    slow = tally.check(train_resilient(cfg, faults=(Fault(1, 2, "slow", delay_s=0.3),)))
    assert slow.faults_recovered == 0 and slow.reports == []
    # the 0.3 s sleep happens inside the measured window (load can only add to it, so no comparison
    # with the fault-free run's noisy wall time)
    assert slow.train.wall_time_s >= 0.3 > fast.train.wall_time_s - 0.3
    assert slow.train.trace.makespan_s == pytest.approx(fast.train.trace.makespan_s + 0.3, rel=0.05)
    busy = [slow.train.trace.lane_busy_s(d, "compute") - fast.train.trace.lane_busy_s(d, "compute") for d in range(3)]
    assert busy[1] == pytest.approx(0.3) and abs(busy[0]) < 1e-12


def test_timeline_marks_lost_and_replayed_work():
    r = train_resilient(PP, faults=parse_faults("kill:3@2#20"), checkpoint_every=2, replicas=False)
    ev = r.train.trace.events
    lost = [e for e in ev if e.phase == "lost"]
    failure = [e for e in ev if e.phase == "failure"]
    assert lost and all(e.step == 2 and e.name.startswith("lost: ") for e in lost)
    assert len(failure) == 1 and failure[0].device == 3 and "#20" in failure[0].name
    assert max(e.end_s for e in lost) <= failure[0].start_s + 1e-12  # nothing after the failure is "lost"
    assert [e for e in ev if e.phase == "recovery"]
    replayed_steps = {e.step for e in ev if e.replayed and e.phase not in ("lost", "failure", "recovery")}
    assert replayed_steps == {2}  # checkpoint at 2: only step 2 runs again
    chrome = r.train.trace.to_chrome()["traceEvents"]
    cats = {e.get("cat") for e in chrome}
    assert {"lost", "failure", "recovery"} <= cats
    assert any(e.get("args", {}).get("replayed") for e in chrome if e.get("cat") == "forward")
    json.dumps(chrome)


def test_cli_fail_adds_fault_fields(capsys, tmp_path):
    argv = ["train", "--model", "mlp", "--strategy", "pp", "--devices", "4", "--dp", "2", "--microbatches", "2",
            "--steps", "4", "--fail", "1@1,kill:2@2#10", "--checkpoint-every", "2",
            "--checkpoint-dir", str(tmp_path / "ck"), "--trace", str(tmp_path / "t.json"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["faults_injected"] == 2 and out["faults_recovered"] == 2 and out["replayed_steps"] == 2
    assert out["max_rel_weight_diff_vs_single"] < 1e-9 and len(out["failures"]) == 2
    assert (tmp_path / "ck" / "latest.json").exists()
    assert "lost" in (tmp_path / "t.json").read_text()
    assert main(argv[:-7] + ["--fail", "9@0"]) == 2
    assert "device 9 does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("extra, words", [(["--address", "127.0.0.1:1", "--runtime", "local"], "need --runtime ray"),
                                          (["--devices-per-node", "2"], "need --runtime ray"),
                                          (["--runtime", "ray", "--devices-per-node", "0"], "must be >= 1, got 0")])
def test_cli_ray_placement_flags_refused_without_ray(capsys, extra, words):
    argv = ["train", "--model", "mlp", "--strategy", "dp", "--devices", "2", "--batch", "4", "--steps", "1", "--json"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]
