"""`parasim simulate` and `parasim memory`: JSON fields and one-line refusals."""

import argparse
import json

import pytest

from simulator.commands import memory as memory_cmd
from simulator.commands import simulate as simulate_cmd
from simulator.commands.memory import parse_count
from simulator.errors import ParasimError

REQUIRED = {"step_time_s", "tflops_per_gpu", "mfu", "bubble_fraction", "memory_per_gpu_bytes", "oom", "comm_time_s"}


def _parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_parser(parser.add_subparsers())
    return parser.parse_args(argv)


def _json(capsys, module, argv):
    args = _parse(module, argv)
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_preset_json(capsys):
    out = _json(capsys, simulate_cmd, ["simulate", "--model", "megatron-145.6b", "--hardware", "a100-80gb",
                                       "--gpus", "1536", "--tp", "8", "--pp", "8", "--dp", "24",
                                       "--microbatch-size", "1", "--global-batch", "2304", "--schedule", "1f1b",
                                       "--recompute", "full", "--json"])
    assert REQUIRED <= set(out)
    assert out["tflops_per_gpu"] == pytest.approx(148, rel=0.10)
    assert 0 < out["bubble_fraction"] < 0.2 and out["oom"] is False and out["comm_time_s"] > 0


def test_simulate_custom_model_from_namespace(capsys):
    ns = argparse.Namespace(model=None, layers=12, hidden=768, heads=12, seq=1024, vocab=50304,
                            hardware="h100-sxm", gpus=8, tp=2, pp=2, dp=None, microbatch_size=2,
                            global_batch=32, schedule="interleaved", virtual_stages=2, recompute="selective",
                            sequence_parallel=True, zero=1, json=True)
    assert simulate_cmd.run(ns) == 0
    out = json.loads(capsys.readouterr().out)
    assert REQUIRED <= set(out) and out["gpus"] == 8 and out["microbatches"] == 8
    assert 0 < out["mfu"] < 1


def test_simulate_text_output(capsys):
    args = _parse(simulate_cmd, ["simulate", "--model", "llama-7b", "--gpus", "8", "--global-batch", "64"])
    assert args.func(args) == 0
    assert "MFU" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["--model", "megatron-1.7b", "--gpus", "16", "--tp", "2", "--pp", "1", "--dp", "4"], "must equal --gpus"),
    (["--model", "megatron-1.7b", "--tp", "0"], "positive"),
    (["--model", "megatron-1.7b", "--microbatch-size", "-1"], "positive"),
    (["--model", "megatron-1.7b", "--dp", "4", "--microbatch-size", "2", "--global-batch", "12"], "divisible"),
    (["--model", "nope"], "unknown model preset"),
    (["--model", "megatron-1.7b", "--hardware", "tpu-v9"], "unknown hardware preset"),
    (["--layers", "2", "--hidden", "64"], "missing"),
    (["--layers", "0", "--hidden", "64", "--heads", "4", "--seq", "8", "--vocab", "10"], "layers"),
    (["--model", "megatron-1.7b", "--cp", "3"], "divisible by 2c = 6"),
])
def test_simulate_refusals(argv, match):
    args = _parse(simulate_cmd, ["simulate", *argv])
    with pytest.raises(ParasimError, match=match) as exc:
        args.func(args)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("zero,gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_memory_json_matches_zero_paper(capsys, zero, gb):
    out = _json(capsys, memory_cmd, ["memory", "--params", "7.5B", "--dp", "64", "--zero", str(zero), "--json"])
    assert round(out["model_state_bytes_per_device"] / 1e9, 1) == gb


def test_memory_accepts_scientific_notation(capsys):
    out = _json(capsys, memory_cmd, ["memory", "--params", "7.5e9", "--json"])
    assert out["model_state_bytes_per_device"] == 16 * 7.5e9


def test_parse_count():
    assert parse_count("7.5B") == 7.5e9 and parse_count("175m") == 175e6 and parse_count("1T") == 1e12
    assert parse_count("1K") == 1000 and parse_count(7_500_000_000) == 7.5e9
    for bad in ("0", "-3", "seven", "7.5X"):
        with pytest.raises(ParasimError):
            parse_count(bad)


def test_a_count_without_its_unit_is_refused_with_the_suggestion():
    """`--params 7.5` (the B forgotten) would price a model of 7.5 parameters: refused, with the fix."""
    for text, number in (("7.5", "7.5"), (1000, "1000"), ("999999", "999999")):
        with pytest.raises(ParasimError, match=rf"^{number} parameters\? write {number}B \(billions\) or {number}M"):
            parse_count(text)
    assert parse_count("1000000") == 1e6


def test_memory_refusals():
    with pytest.raises(ParasimError, match="dp"):
        memory_cmd.run(argparse.Namespace(params="1B", dp=0, zero=0, precision="mixed", json=True))
    with pytest.raises(ParasimError, match="ZeRO stage"):
        memory_cmd.run(argparse.Namespace(params="1B", dp=2, zero=5, precision="mixed", json=True))


@pytest.mark.parametrize("shape", [["--model", "llama3-8b", "--tp", "2"],
                                   ["--model", "llama3-8b", "--tensor-model-parallel-size", "2"]],
                         ids=["parasim flags", "megatron flags"])
def test_causal_attention_flops_flag_changes_model_flops_only_and_is_stated(capsys, shape):
    from simulator.cli import main
    base = ["simulate", "--hardware", "h100-sxm", "--gpus", "8", *shape, "--json"]
    outs = []
    for extra in ([], ["--causal-attention-flops"]):
        assert main(base + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    full, causal = outs
    assert causal["step_time_s"] == full["step_time_s"] and causal["tflops_per_gpu"] == full["tflops_per_gpu"]
    assert causal["model_tflops_per_gpu"] < full["model_tflops_per_gpu"]
    assert full["assumptions"]["causal_attention_flops"] == {"value": False, "source": "default"}
    assert causal["assumptions"]["causal_attention_flops"] == {"value": True, "source": "flag"}
