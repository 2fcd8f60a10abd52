"""The CLI on Ray as a user meets it: a device actor that dies in a run without fault flags is one
named line and exit 1 (no traceback); with checkpoints the run recovers; --json prints pure JSON
even when Ray reports the dead worker."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.runtime.ray_runtime import RayRuntime

pytestmark = pytest.mark.ray
TRAIN = ["train", "--strategy", "dp", "--devices", "2", "--steps", "3", "--runtime", "ray", "--timeout-s", "60"]


@pytest.fixture
def kill_once(monkeypatch, ray_session):
    """The first run of a step: device 1's actor process is killed (ray.kill), as a crash would."""
    real_run, done = RayRuntime.run, []

    def run(self, program):
        if not done:
            done.append(True)
            self.kill(1)
        return real_run(self, program)

    monkeypatch.setattr(RayRuntime, "run", run)
    return done


def test_an_actor_death_without_fault_flags_is_one_named_line(kill_once, capsys):
    assert main(TRAIN) == 1
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert kill_once and len(lines) == 1, err
    assert lines[0].startswith("error: device 1 failed") and "actor died" in lines[0] and "Traceback" not in err


def test_an_actor_death_with_checkpoints_recovers_and_json_is_pure(kill_once, capsys, tmp_path):
    code = main(TRAIN + ["--checkpoint-every", "1", "--checkpoint-dir", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)          # the whole of stdout is one JSON document
    assert kill_once and code == 0, err
    assert report["matches_single_device"] is True and len(report["losses"]) == 3 and report["recoveries"]
