"""Sweeps return tables (records, CSV, DataFrame), refuse points with their reason, run from the
CLI; the user guide's four experiments run as written; every result type has to_dict() and asdict."""

import csv
import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from doc_examples import section_examples

matplotlib.use("Agg")

from simulator import (
    AutoParallelContext,
    GPTConfig,
    OpCostModel,
    ParallelConfig,
    SimpleDeviceModel,
    TrainConfig,
    auto,
    auto_search,
    auto_train,
    estimate,
    goodput,
    make_runtime,
    make_schedule,
    search_configs,
    simulate_schedule,
    sweep,
    train,
)
from simulator.cli import main as cli_main
from simulator.cost.goodput import FailureModel
from simulator.cost.search import search_training
from simulator.errors import ParasimError

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = section_examples("docs/user-guide.md", "Experiments as tables")


def test_the_user_guide_has_four_short_experiments():
    assert len(SNIPPETS) == 4 and all(len(s.strip().splitlines()) < 10 for s in SNIPPETS)


@pytest.mark.parametrize("k", range(4))
def test_user_guide_experiment_runs(k, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the figures it saves
    scope = {}
    exec(compile(SNIPPETS[k], f"user guide experiment {k + 1}", "exec"), scope)  # our own docs, not user input
    table = scope["t"]
    assert table.records and not any(r["error"] for r in table.records)


def test_schedule_sweep_matches_the_formula_and_plots():
    t = sweep("schedule", {"p": 4}, schedule=["gpipe", "1f1b"], m=[2, 8])
    assert [(r["schedule"], r["m"]) for r in t.records] == [("gpipe", 2), ("gpipe", 8), ("1f1b", 2), ("1f1b", 8)]
    for r in t.records:  # equal t_f = t_b: (p-1)/(m+p-1)
        assert r["bubble_fraction"] == pytest.approx(3 / (r["m"] + 3), rel=1e-9)
    ax = t.plot("bubble_fraction", x="m", line="schedule")
    assert len(ax.get_lines()) == 2 and ax.get_xlabel() == "m"


def test_plot_takes_a_label_and_matplotlibs_own_options():
    t = sweep("schedule", {"p": 4}, schedule=["1f1b"], m=[2, 8])
    (one,) = t.plot("bubble_fraction", x="m", label="1F1B, p = 4", linestyle="--").get_lines()
    assert one.get_label() == "1F1B, p = 4" and one.get_linestyle() == "--"
    two = sweep("schedule", {"p": 4}, schedule=["gpipe", "1f1b"], m=[2, 8]).plot("bubble_fraction", x="m",
                                                                                 line="schedule", label="p = 4")
    assert [ln.get_label() for ln in two.get_lines()] == ["p = 4, schedule = gpipe", "p = 4, schedule = 1f1b"]


def test_plot_keeps_the_users_backend():
    """sweep's figures use whatever backend the user chose (it used to force Agg, so nothing showed)."""
    code = ("import matplotlib; matplotlib.use('svg')\n"
            "from simulator import sweep\n"
            "sweep('schedule', {'p': 4}, schedule=['1f1b'], m=[2]).plot('bubble_fraction', x='m')\n"
            "print(matplotlib.get_backend())")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "svg"


def test_refused_points_keep_their_reason_and_tables_export(tmp_path):
    t = sweep("estimate", ParallelConfig(global_batch=64), {"model": "megatron-1.7b", "hardware": "a100-80gb"},
              dp=[2, 3])
    good, bad = t.records
    assert good["error"] == "" and good["memory_per_gpu_bytes"] > 0
    assert "64" in bad["error"] and "memory_per_gpu_bytes" not in bad
    frame = t.to_frame()
    assert list(frame["dp"]) == [2, 3] and frame.columns[0] == "dp" and "error" in frame.columns
    t.to_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["dp"] for r in rows] == ["2", "3"] and rows[1]["error"] == bad["error"]
    assert json.loads(json.dumps(t.to_dict()))["records"][0]["dp"] == 2 and dataclasses.asdict(t)["kind"] == "estimate"


def test_train_sweep_shows_the_latency_regime_of_small_buckets():
    base = TrainConfig(GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32), strategy="dp", devices=2,
                       global_batch=4)
    slow = SimpleDeviceModel(flops_per_s=1e12, memory_bandwidth_Bps=1e12, latency_s=50e-6, bandwidth_Bps=10e9)
    r = {x["bucket_mb"]: x for x in sweep("train", base, {"device_model": slow}, bucket_mb=[None, 0.004, 0.064, 1.0]).records}
    assert r[0.004]["messages"] > r[0.064]["messages"] > r[1.0]["messages"]
    assert r[0.004]["simulated_time_s"] > r[0.064]["simulated_time_s"] > r[1.0]["simulated_time_s"]
    # None: the default 25 MB bucket holds the whole model, complete only at the end of the backward,
    # like the one 1 MB bucket
    assert r[None]["messages"] == r[1.0]["messages"] and r[None]["simulated_time_s"] == r[1.0]["simulated_time_s"]


def test_cli_sweep_csv_json_and_refusals(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert cli_main(["sweep", "schedule", "--set", "p=4", "--vary", "schedule=gpipe,1f1b", "--vary", "m=2,4",
                     "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and rows[0]["schedule"] == "gpipe" and float(rows[0]["bubble_fraction"]) == 0.6
    capsys.readouterr()
    assert cli_main(["sweep", "estimate", "--set", "model=megatron-1.7b", "--set", "hardware=a100-80gb",
                     "--set", "global_batch=64", "--vary", "zero_stage=0,3", "--vary", "dp=8", "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)["records"]
    assert recs[0]["memory.model_state_bytes"] > recs[1]["memory.model_state_bytes"]
    assert cli_main(["sweep", "schedule", "--set", "p=4", "--vary", "m"]) == 2
    assert cli_main(["sweep", "train", "--set", "nonsense=1", "--vary", "devices=1"]) == 2
    assert "nonsense" in capsys.readouterr().err


def _results():
    gpt = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16)
    tr = train(TrainConfig(gpt, strategy="dp", devices=2, global_batch=4), check=False)
    with make_runtime("local", 2) as rt:
        from simulator import ProgramBuilder
        b = ProgramBuilder(2)
        rt.load({0: {"x": __import__("numpy").ones(2)}, 1: {}})
        b.send(0, 1, "x")
        run = rt.run(b.build())
    found = search_configs("megatron-1.7b", "a100-80gb", 8, 64, top=2)
    net, feeds = auto.mlp_network(n=8, d=4, f=8, c=2, bias=False)
    ctx = AutoParallelContext("auto_parallel", 2, search_mode="dynamic_programming", cost_model=OpCostModel())
    searched = auto_search(net, ctx)
    net, feeds = auto.mlp_network(n=8, d=4, f=8, c=2, bias=False)
    ran = auto_train(net, AutoParallelContext("data_parallel", 2), feeds, steps=1)
    fm = FailureModel(n_devices=1024, device_mtbf_h=5e4, checkpoint_nbytes=1e11, write_bandwidth_Bps=1e10)
    return {"TrainResult": tr, "RunResult": run, "AnalyticResult": estimate("megatron-1.7b",
            ParallelConfig(global_batch=8), "a100-80gb"), "Candidate": found[0],
            "SearchResult": search_training("megatron-1.7b", "a100-80gb", 8, 64, top=2),
            "SimResult": simulate_schedule(make_schedule("1f1b", 2, 4)), "Goodput": goodput(fm, 3600.0),
            "auto SearchResult": searched, "AutoRunResult": ran}


def test_every_result_type_has_to_dict_and_asdict():
    for name, r in _results().items():
        d = r.to_dict()
        json.dumps(d, default=float)  # plain data
        assert type(r).to_dict.__doc__, name
        assert dataclasses.asdict(r), name  # no "cannot pickle 'mappingproxy'"
        pickle.loads(pickle.dumps(r))


def test_names_and_grid_size_are_checked_before_any_point_runs():
    """A misspelt name used to give every row the same error (or a KeyError traceback for a missing
    one); a grid of 10^6 train points would have run for days."""
    with pytest.raises(ParasimError, match="a schedule sweep has no input 'mm'"):
        sweep("schedule", {"schedule": "1f1b", "p": 4}, mm=[1, 2])
    with pytest.raises(ParasimError, match="a schedule sweep needs schedule"):
        sweep("schedule", {"p": 4}, m=[1, 2])
    with pytest.raises(ParasimError, match="a search sweep needs global_batch, gpus, hardware, model"):
        sweep("search", {}, top=[1])
    with pytest.raises(ParasimError, match=r"a train sweep runs at most 64 points; 1000 x 1000 = 1,000,000"):
        sweep("train", TrainConfig(GPTConfig(2, 32, 4, 16, 32), strategy="dp", devices=2),
              global_batch=range(1000), steps=range(1000))
    t = sweep("schedule", {"schedule": "1f1b", "p": 4, "m": 8}, v=["x", 1])
    assert t.records[0]["error"] == "v must be an integer, got 'x'" and not t.records[1]["error"]
