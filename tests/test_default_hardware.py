"""Real runs are priced on a fixed preset, the same on every machine: a calibration file in the
user's home (the `local` preset, written by `parasim calibrate`) changes nothing unless asked for."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_examples import section_examples

from simulator import GPTConfig, TrainConfig, get_hardware, price_training
from simulator.cli import main
from simulator.cost.hardware import RUN_HARDWARE, load_local

README = Path(__file__).resolve().parents[1] / "README.md"
# a calibration far from the fixed preset: any leak of it into the default clock changes the numbers
FAKE = {"peak_flops": {"fp64": 3e12, "fp32": 6e12}, "memory_bandwidth_Bps": 9e11,
        "intra": {"latency_s": 1e-3, "bandwidth_Bps": 1e8}, "inter": {"latency_s": 1e-3, "bandwidth_Bps": 1e8}}
CLI_TOUR = ["train", "--strategy", "pp", "--devices", "4", "--microbatches", "8", "--schedule", "1f1b", "--json"]


def _home(tmp_path: Path, calibrated: bool) -> Path:
    home = tmp_path / ("calibrated" if calibrated else "bare")
    (home / ".parasim").mkdir(parents=True)
    if calibrated:
        (home / ".parasim" / "local.json").write_text(json.dumps(FAKE))
    return home


def _tour_code() -> str:
    """The README's Python block (the tour), as the README prints it."""
    (code,) = section_examples("README.md", "A five-minute tour")
    return code


def _run(args: list[str], home: Path) -> str:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(README.parent)}
    done = subprocess.run([sys.executable, *args], cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_fake_calibration_is_read_when_asked_for(tmp_path):
    home = _home(tmp_path, calibrated=True)
    assert load_local(home / ".parasim" / "local.json").peak("fp64") == 3e12
    assert get_hardware(RUN_HARDWARE).peak("fp64") == 20e9     # the fixed preset ignores it


def test_readme_tour_prints_the_same_with_and_without_a_calibration(tmp_path):
    code = _tour_code()
    assert "bubble_fraction" in code
    bare, calibrated = (_run(["-c", code], _home(tmp_path, c)) for c in (False, True))
    assert bare == calibrated and len(bare.splitlines()) == 3


def test_cli_tour_prints_the_same_unless_local_is_asked_for(tmp_path, monkeypatch, capsys):
    outs = {}
    for calibrated in (False, True):
        monkeypatch.setenv("HOME", str(_home(tmp_path, calibrated)))
        for hw in (None, "local"):
            assert main(CLI_TOUR + ([] if hw is None else ["--hardware", hw])) == 0
            out = json.loads(capsys.readouterr().out)
            out.pop("wall_time_s")
            outs[calibrated, hw] = out
    assert outs[False, None] == outs[True, None] and outs[True, None]["hardware"] == RUN_HARDWARE
    assert outs[False, "local"]["simulated_time_s"] == outs[False, None]["simulated_time_s"]  # uncalibrated: same numbers
    assert outs[True, "local"]["simulated_time_s"] != outs[True, None]["simulated_time_s"]    # asked for: this machine


def test_api_hardware_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(_home(tmp_path, calibrated=True)))
    cfg = TrainConfig(GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16), strategy="dp", devices=2,
                      global_batch=4, steps=1)
    default, _ = price_training(cfg)
    local, _ = price_training(cfg, hardware="local")
    cpu, _ = price_training(cfg, hardware="cpu")
    assert default.makespan_s == cpu.makespan_s != local.makespan_s
    with pytest.raises(Exception, match="device_model or hardware, not both"):
        price_training(cfg, device_model=object(), hardware="cpu")
