"""One question, one answer: the same configuration asked through every door (Python API, each CLI
command with --json, sweep in Python and from the shell, the app) gives the same plan, the same
numbers and the same assumptions; restating a preset's own value changes nothing; every result
states its assumptions and where each came from (issue 24, item 1)."""

import json
import weakref

import pytest
from app_helpers import page

from simulator import (
    Assumptions,
    ParallelConfig,
    TrainConfig,
    estimate,
    get_model,
    make_schedule,
    search_training,
    simulate_schedule,
    sweep,
    time_schedule,
)
from simulator.cli import main
from simulator.cost.assumptions import STACK_KNOBS, assumptions_of
from simulator.models import GPTConfig
from simulator.units import fmt_time

HW, GPUS, B = "h100-sxm", 64, 64
PLAN = ParallelConfig(tp=8, dp=8, global_batch=B)             # llama3-8b at t8 d8 on 64 H100
SEARCH = dict(gpus=16, global_batch=32, schedules=("1f1b",), zero_stages=(0, 1))


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _values(assumptions: dict) -> dict:
    return {name: a["value"] for name, a in assumptions.items()}


@pytest.fixture(scope="module")
def api():
    model = get_model("llama3-8b")
    return model, estimate(model, PLAN, HW)


def test_the_api_assumes_the_presets_flash_attention(api):
    model, res = api
    assert res.step_time_s == estimate(model, PLAN, HW, Assumptions(flash_attention=True)).step_time_s
    assert res.step_time_s < estimate(model, PLAN, HW, Assumptions(flash_attention=False)).step_time_s
    gpt = get_model("gpt3-1.3b")
    assert estimate(gpt, PLAN, HW).step_time_s == estimate(gpt, PLAN, HW, Assumptions(flash_attention=False)).step_time_s


@pytest.mark.parametrize("argv", [
    ["--model", "llama3-8b", "--tp", "8"],                                               # parasim's flags
    ["--model", "llama3-8b", "--tp", "8", "--seq", "8192", "--use-flash-attn"],          # restating the preset
    ["--model", "llama3-8b", "--tensor-model-parallel-size", "8"],                       # Megatron-LM's flags
    ["--model", "llama3-8b", "--seq-length", "8192", "--tensor-model-parallel-size", "8"],
    ["--model", "llama3-8b", "--seq-length", "8192", "--tensor-model-parallel-size", "8", "--use-flash-attn"],
], ids=["parasim", "parasim-restated", "megatron", "megatron-seq", "megatron-seq-flash"])
def test_simulate_through_every_spelling_equals_the_api(capsys, api, argv):
    _model, res = api
    batch = ["--global-batch-size" if "--tensor-model-parallel-size" in argv else "--global-batch", str(B)]
    out = _json(capsys, ["simulate", "--gpus", str(GPUS), "--hardware", HW, "--json", *argv, *batch])
    assert out["config"] == repr(PLAN)
    assert out["step_time_s"] == res.step_time_s and out["mfu"] == res.mfu
    assert out["memory"]["total_bytes"] == res.memory_per_gpu_bytes
    assert _values(out["assumptions"]) == _values(assumptions_of(_model, None, PLAN))
    assert out["assumptions"]["flash_attention"]["value"] is True


def test_sweep_estimate_in_python_and_from_the_shell_equal_the_api(capsys, api):
    model, res = api
    t = sweep("estimate", ParallelConfig(tp=8, dp=8), {"model": "llama3-8b", "hardware": HW}, global_batch=[B])
    rec = t.records[0]
    assert rec["error"] == "" and rec["step_time_s"] == res.step_time_s and rec["mfu"] == res.mfu
    assert rec["assumptions.flash_attention.value"] is True
    assert rec["assumptions.flash_attention.source"] == "preset llama3-8b"
    out = _json(capsys, ["sweep", "estimate", "--set", "model=llama3-8b", "--set", f"hardware={HW}", "--set", "tp=8",
                         "--set", "dp=8", "--vary", f"global_batch={B}", "--json"])
    assert out["records"] == [dict(rec)]


def test_memory_command_equals_the_api(capsys, api):
    _model, res = api
    out = _json(capsys, ["memory", "--model", "llama3-8b", "--gpus", str(GPUS), "--hardware", HW, "--json",
                         "--tensor-model-parallel-size", "8", "--global-batch-size", str(B)])
    assert out["config"] == repr(PLAN)
    assert out["memory"]["total_bytes"] == res.memory_per_gpu_bytes
    assert out["assumptions"]["flash_attention"] == {"value": True, "source": "preset llama3-8b"}


def test_the_scale_explorer_equals_the_api(api):
    _model, res = api
    at = page("scale")
    at.selectbox(key="model").set_value("llama3-8b").run()
    at.selectbox(key="hw").set_value(HW).run()
    at.select_slider(key="B").set_value(B).run()
    for key, value in (("tp", 8), ("pp", 1), ("dp", 8)):
        at.select_slider(key=key).set_value(value).run()
    at.selectbox(key="recompute").set_value("none").run()
    at.radio(key="zero").set_value(0).run()
    assert not at.exception, at.exception
    assert at.toggle(key="flash").value is True            # the preset's, as every other door assumes
    shown = {m.label: m.value for m in list(at.tabs[0].metric)[:6]}
    assert shown["step time"] == fmt_time(res.step_time_s) and shown["MFU"] == f"{res.mfu:.1%}"
    assert any("flash_attention on (preset llama3-8b)" in c.value for c in at.tabs[0].caption)


def test_search_through_every_door_picks_the_same_plan(capsys):
    best = search_training("llama3-8b", HW, **SEARCH, top=1).best
    cli = _json(capsys, ["search", "--model", "llama3-8b", "--hardware", HW, "--gpus", "16", "--global-batch", "32",
                         "--schedules", "1f1b", "--top", "1", "--alternatives", "0", "--json"])
    # the CLI searches ZeRO 0-3 by default; the API question above fixes 0-1: ask the API the CLI's question too
    full = search_training("llama3-8b", HW, 16, 32, schedules=("1f1b",), top=1).best
    assert cli["top"][0]["config"] == repr(full.config) and cli["top"][0]["step_time_s"] == full.result.step_time_s
    assert cli["assumptions"]["flash_attention"] == {"value": True, "source": "preset llama3-8b"}
    assert cli["assumptions"]["recompute"]["source"] == "searched"
    rec = sweep("search", {"model": "llama3-8b", "hardware": HW, "gpus": 16, "schedules": ("1f1b",)},
                global_batch=[32]).records[0]
    assert rec["error"] == "" and rec["config"] == repr(full.config) and rec["step_time_s"] == full.result.step_time_s
    assert rec["assumptions.flash_attention.value"] is True
    shell = _json(capsys, ["sweep", "search", "--set", "model=llama3-8b", "--set", f"hardware={HW}", "--set",
                           "gpus=16", "--set", "schedules=1f1b", "--vary", "global_batch=32", "--json"])
    assert shell["records"][0]["step_time_s"] == full.result.step_time_s
    import scale_search  # the app's search panel helper (app/ is on the path through app_helpers)
    app = scale_search.search(get_model("llama3-8b"), HW, 16, 32, ("1f1b",), (0, 1), (), 1)
    assert app["top"][0]["config"] == repr(best.config) and app["top"][0]["step_time_s"] == best.result.step_time_s


def test_every_result_states_its_assumptions(capsys):
    sim = _json(capsys, ["simulate", "--model", "gpt3-1.3b", "--gpus", "8", "--tp", "2", "--json"])
    mem = _json(capsys, ["memory", "--model", "gpt3-1.3b", "--gpus", "8", "--tensor-model-parallel-size", "2",
                         "--json"])
    found = _json(capsys, ["search", "--model", "gpt3-1.3b", "--gpus", "8", "--global-batch", "16", "--schedules",
                           "1f1b", "--top", "1", "--json"])
    for out in (sim, mem, found):
        assert set(STACK_KNOBS) | {"recompute", "sequence_parallel"} <= set(out["assumptions"])
        assert all(set(a) == {"value", "source"} for k, a in out["assumptions"].items() if k != "stack")
        # the stack row also states the figures it stands for and where they come from (its file)
        assert set(out["assumptions"]["stack"]) == {"value", "source", "profile"}
        assert out["assumptions"]["stack"]["value"] == "megatron-core"
        assert out["assumptions"]["stack"]["profile"].startswith("Stack(megatron-core: GEMM 0.8")
        assert out["assumptions"]["flash_attention"] == {"value": False, "source": "preset gpt3-1.3b"}
    assert sim["assumptions"]["dtype"] == {"value": "bf16", "source": "default"}
    flagged = _json(capsys, ["simulate", "--model", "gpt3-1.3b", "--gpus", "8", "--tp", "2", "--use-flash-attn",
                             "--overlap-grad-reduce", "--json"])
    assert flagged["assumptions"]["flash_attention"] == {"value": True, "source": "flag"}
    assert flagged["assumptions"]["overlap_grad_reduce"] == {"value": True, "source": "flag"}
    params = _json(capsys, ["memory", "--params", "7.5B", "--dp", "64", "--zero", "3", "--json"])
    assert params["assumptions"]["recipe"]["value"] == "mixed"
    for argv in (["simulate", "--model", "gpt3-1.3b", "--gpus", "8", "--tp", "2"],
                 ["memory", "--model", "gpt3-1.3b", "--gpus", "8", "--tensor-model-parallel-size", "2"],
                 ["search", "--model", "gpt3-1.3b", "--gpus", "8", "--global-batch", "16", "--schedules", "1f1b",
                  "--top", "1"]):
        assert main(argv) == 0
        assert "assumptions      flash_attention off (preset gpt3-1.3b)" in capsys.readouterr().out


def test_schedule_sweep_and_the_api_share_one_default_w():
    """sweep("schedule") used to default W to 0 where simulate_schedule defaults it to 1, so ZB-H1
    equalled 1F1B in the README's first sweep."""
    t = sweep("schedule", {"p": 4, "t_b": 2.0}, schedule=["1f1b", "zb-h1"], m=[8])
    one, zb = t.records
    assert one["makespan"] == simulate_schedule(make_schedule("1f1b", 4, 8), t_b=2.0).makespan
    assert zb["makespan"] == simulate_schedule(make_schedule("zb-h1", 4, 8), t_b=2.0).makespan
    assert zb["bubble_fraction"] < one["bubble_fraction"]
    inter = sweep("schedule", {"p": 4, "m": 8, "schedule": "interleaved"}, v=[2]).records[0]
    assert inter["makespan"] == time_schedule("interleaved", 4, 8, 2).makespan
    assert inter["makespan"] == simulate_schedule(make_schedule("interleaved", 4, 8, 2), 0.5, 0.5, 0.5).makespan


def test_train_resolves_its_configuration_once(monkeypatch):
    import simulator.parallel.config as config
    from simulator import train

    made = []
    real = config.Parallelism
    monkeypatch.setattr(config, "Parallelism", lambda **kw: made.append(kw) or real(**kw))
    monkeypatch.setattr(config, "_RESOLVED", weakref.WeakValueDictionary())    # nothing resolved before
    cfg = TrainConfig(GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16), strategy="pp", devices=2,
                      microbatches=2, global_batch=4)
    result = train(cfg)
    assert len(made) == 1 and result.max_rel_weight_diff_vs_single < 1e-9
    resolved = cfg.resolved()
    assert resolved.resolved() is resolved
