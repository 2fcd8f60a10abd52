"""Collectives traced as what they are: every step of every algorithm as send/recv events with
bytes and chunk ids, one flow arrow from each send to its receive, steps adding up to the bar."""

import json

import pytest

from simulator.cli import main
from simulator.collectives import algorithms
from simulator.collectives.reference import KINDS
from simulator.cost.clock import SimpleDeviceModel, plan_of, simulate
from simulator.runtime.programs import collective_program


def _expanded(kind, algo, n, size=13):
    prog, _, _ = collective_program(kind, n, size, algo)
    return prog, simulate(prog, SimpleDeviceModel(), collective_steps=True)


@pytest.mark.parametrize("kind", KINDS)
def test_every_transfer_of_every_algorithm_is_a_send_and_a_recv(kind):
    for algo in algorithms(kind):
        prog, trace = _expanded(kind, algo, 5)
        plan = plan_of(prog.code[0][0])
        sends = [e for e in trace.events if e.lane == "send"]
        recvs = [e for e in trace.events if e.lane == "recv"]
        assert len(sends) == len(recvs) == plan.messages, (kind, algo)
        assert sorted(e.nbytes for e in sends) == sorted(t.nbytes for st in plan.steps for t in st.transfers)
        by_flow = {}
        for e in sends + recvs:
            by_flow.setdefault(e.flow, []).append(e.kind)
        assert all(sorted(v) == ["recv", "send"] for v in by_flow.values())
        bar = [e for e in trace.events if e.lane == "comm"]
        if plan.steps:  # the steps fill the collective's bar exactly, no more
            assert max(e.end_s for e in sends + recvs) == pytest.approx(max(e.end_s for e in bar), rel=1e-12)
            assert min(e.start_s for e in sends + recvs) == pytest.approx(min(e.start_s for e in bar), rel=1e-12)
        # statistics still count each byte once (the step lanes are apart from "comm")
        assert trace.bytes_by_collective() == simulate(prog, SimpleDeviceModel()).bytes_by_collective()


def test_cli_ring_trace_shows_6_steps_24_transfers_and_arrows(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["collective", "all_reduce", "--devices", "4", "--size", "4096", "--algo", "ring",
                 "--trace", str(path)]) == 0
    ev = json.loads(path.read_text())["traceEvents"]
    sends = [e for e in ev if e.get("ph") == "X" and e["args"]["kind"] == "send"]
    recvs = [e for e in ev if e.get("ph") == "X" and e["args"]["kind"] == "recv"]
    assert len(sends) == len(recvs) == 24 and {e["args"]["nbytes"] for e in sends} == {8192}
    assert {int(e["name"].split("step ")[1].split("/")[0]) for e in sends} == set(range(1, 7))
    assert all("chunk" in e["args"] for e in sends + recvs)
    assert sum(1 for e in recvs if "reduce chunk" in e["name"]) == 12  # reduce-scatter adds, all-gather copies
    starts = {e["id"] for e in ev if e.get("ph") == "s"}
    assert starts == {e["id"] for e in ev if e.get("ph") == "f"} and len(starts) == 24
    assert main(["collective", "all_reduce", "--devices", "4", "--trace", str(path), "--summary"]) == 0
    assert not [e for e in json.loads(path.read_text())["traceEvents"] if e.get("args", {}).get("kind") == "send"]


def test_training_trace_expands_collectives_only_when_asked(tmp_path, capsys):
    base = ["train", "--model", "mlp", "--in-dim", "4", "--hidden", "4", "--layers", "2", "--classes", "2",
            "--strategy", "dp", "--devices", "2", "--steps", "2", "--json"]
    for flag, expect in (([], False), (["--collective-steps"], True)):
        path = tmp_path / f"t{len(flag)}.json"
        assert main(base + ["--trace", str(path), *flag]) == 0
        ev = json.loads(path.read_text())["traceEvents"]
        steps = [e for e in ev if e.get("ph") == "X" and e["args"]["kind"] in ("send", "recv")]
        assert bool(steps) == expect
        if expect:
            assert {e["args"]["step"] for e in steps} == {0, 1}
    capsys.readouterr()
