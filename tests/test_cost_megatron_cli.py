"""Megatron-LM launch flags pasted into `parasim simulate` and `parasim search`; presets with overrides."""

import json

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig

LAUNCH = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --vocab-size 32000 "
          "--swiglu --ffn-hidden-size 11008 --untie-embeddings-and-output-weights --disable-bias-linear "
          "--normalization RMSNorm --position-embedding-type rope --tensor-model-parallel-size 4 "
          "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 256 --sequence-parallel "
          "--use-distributed-optimizer --overlap-grad-reduce --use-flash-attn --bf16 --lr 3e-4 --train-iters 10")


def _run(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_takes_a_megatron_launch_line_as_it_is(capsys):
    out = _run(capsys, ["simulate", "--gpus", "64", "--hardware", "h100-sxm", "--json"] + LAUNCH.split())
    assert {"tflops_per_gpu", "mfu", "memory"} <= set(out)
    assert {"model_state_bytes", "activation_bytes"} <= set(out["memory"])
    assert out["ignored"] == ["--lr", "--train-iters"]
    A = {name: a["value"] for name, a in out["assumptions"].items()}
    assert A["flash_attention"] and A["overlap_grad_reduce"] and not A["overlap_tp_comm"]
    assert out["assumptions"]["flash_attention"]["source"] == "flag"
    # the same run written with parasim's own API
    model = get_model("llama-7b", seq=4096)
    cfg = ParallelConfig(tp=4, pp=2, dp=8, global_batch=256, sequence_parallel=True, zero_stage=1)
    want = estimate(model, cfg, "h100-sxm", Assumptions(flash_attention=True, overlap_grad_reduce=True))
    assert out["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-9)


def test_megatron_defaults_have_no_flash_attention_or_overlap(capsys):
    line = LAUNCH.replace("--use-flash-attn ", "").replace("--overlap-grad-reduce ", "").split()
    out = _run(capsys, ["simulate", "--gpus", "64", "--hardware", "h100-sxm", "--json"] + line)
    A = out["assumptions"]
    assert not A["flash_attention"]["value"] and not A["overlap_grad_reduce"]["value"]
    # a custom model (no preset) takes Megatron-LM's default: FlashAttention off
    assert A["flash_attention"]["source"] == "preset custom"


def test_misspelt_megatron_flag_and_mixing_are_refused(capsys):
    assert main(["simulate", "--gpus", "64", "--num-layer", "32"]) == 2
    assert "--num-layers" in capsys.readouterr().err
    assert main(["simulate", "--gpus", "64", "--tp", "2"] + LAUNCH.split()) == 2
    assert "not both" in capsys.readouterr().err


def test_preset_with_sequence_override_and_megatron_flags_on_a_preset(capsys):
    out = _run(capsys, ["simulate", "--model", "llama-70b", "--seq", "8192", "--gpus", "64", "--tp", "8", "--pp", "4",
                        "--hardware", "h100-sxm", "--json"])
    # no global batch: b x dp (one micro-batch, Megatron-LM's default) through both doors; it was
    # b x dp x pp on parasim's flags only, so restating --pp as --pipeline-model-parallel-size changed B
    want = estimate(get_model("llama-70b", seq=8192), ParallelConfig(tp=8, pp=4, dp=2), "h100-sxm",
                    Assumptions(flash_attention=True))
    assert out["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-9)
    out = _run(capsys, ["simulate", "--model", "llama-70b", "--gpus", "64", "--hardware", "h100-sxm", "--json",
                        "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4",
                        "--seq-length", "8192", "--global-batch-size", "32"])
    assert out["gpus"] == 64 and out["microbatches"] == 16


def test_search_takes_megatron_flags_and_reports_headroom(capsys):
    line = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --vocab-size 32000 "
            "--global-batch-size 64 --tensor-model-parallel-size 2 --use-flash-attn --log-interval 10").split()
    out = _run(capsys, ["search", "--gpus", "16", "--hardware", "h100-sxm", "--top", "2", "--json"] + line)
    assert out["global_batch"] == 64 and out["ignored"] == ["--log-interval"]
    assert any("searched, not fixed" in n for n in out["notes"])
    assert all(r["memory_headroom_bytes"] > 0 for r in out["top"])
