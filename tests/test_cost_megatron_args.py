"""Megatron-LM's flags as they appear in a launch script -> model, parallel config, options; `parasim memory`."""

import json

import pytest

from simulator.cli import main
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.model_presets import get_model
from simulator.errors import ParasimError

LLAMA3_8B = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 8192 --vocab-size 128256 "
             "--ffn-hidden-size 14336 --group-query-attention --num-query-groups 8 --swiglu "
             "--untie-embeddings-and-output-weights --normalization RMSNorm --position-embedding-type rope")


def test_launch_script_flags_give_the_llama3_shape_and_config():
    argv = (LLAMA3_8B + " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 4 --sequence-parallel --micro-batch-size 2 "
            "--global-batch-size 64 --recompute-granularity selective --use-distributed-optimizer --bf16 "
            "--lr 3e-4 --data-path 0.5 /a 0.5 /b --train-iters=1000")
    run = megatron_run(parse_megatron_args(argv), gpus=32)
    m, cfg = run.model, run.config
    assert (m.layers, m.hidden, m.heads, m.seq, m.vocab, m.ffn_hidden, m.kv_heads) == (32, 4096, 32, 8192, 128256, 14336, 8)
    assert m.gated_mlp and not m.tied_embeddings and not m.biases and not m.position_embedding
    assert m.params() == get_model("llama3-8b").params()
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.micro_batch_size, cfg.global_batch) == (2, 2, 8, 2, 64)
    assert (cfg.schedule, cfg.virtual_stages, cfg.recompute, cfg.sequence_parallel, cfg.zero_stage) == (
        "interleaved", 4, "selective", True, 1)
    assert run.ignored == ("--lr", "--data-path", "--train-iters") and run.recipe == "megatron"


def test_megatron_defaults():
    run = megatron_run(parse_megatron_args("--num-layers 2 --hidden-size 768 --num-attention-heads 12 "
                                           "--seq-length 1024 --vocab-size 50257 --swiglu"))
    cfg = run.config
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.micro_batch_size, cfg.global_batch, cfg.recompute, cfg.zero_stage) == (
        1, 1, 1, 1, 1, "none", 0)
    assert not run.flash_attention and not run.fp8
    assert run.model.ffn_hidden == int(4 * 768 * 2 / 3 / 64) * 64      # Megatron's SwiGLU default
    assert run.model.padded_vocab(1) == 50304


def test_sequence_parallel_dropped_at_tp1_as_megatron_does():
    run = megatron_run(parse_megatron_args(LLAMA3_8B + " --sequence-parallel"))
    assert not run.config.sequence_parallel and "sequence-parallel" in run.notes[0]


@pytest.mark.parametrize("argv, message", [
    ("--num-layer 2", "did you mean --num-layers"),
    ("--tensor-model-parallel-size two", "takes an integer"),
    ("--recompute-granularity partial", "must be one of full, selective"),
    ("--bf16=yes", "takes no value"),
    ("--micro-batch-size", "needs a value"),
    ("--recompute-method uniform", "needs --recompute-granularity full"),
])
def test_bad_flags_refused_with_one_line(argv, message):
    with pytest.raises(ParasimError, match=message):
        megatron_run(parse_megatron_args(LLAMA3_8B + " " + argv))


def test_world_size_must_divide(capsys):
    with pytest.raises(ParasimError, match="not divisible by tp x pp x cp = 2 x 1 x 1 = 2"):
        megatron_run(parse_megatron_args(LLAMA3_8B + " --tensor-model-parallel-size 2"), gpus=7)


def test_memory_cli_reports_components_in_json(capsys):
    code = main(["memory", "--model", "llama3-8b", "--gpus", "8", "--tensor-model-parallel-size", "2",
                 "--sequence-parallel", "--recompute-granularity", "selective", "--use-distributed-optimizer",
                 "--hardware", "h100-sxm", "--seed", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ignored"] == ["--seed"]
    mem = out["memory"]
    assert mem["model_state_bytes"] == pytest.approx(
        mem["parameter_bytes"] + mem["gradient_bytes"] + mem["optimizer_bytes"])
    # t = 2 halves every matrix; the RMSNorm vectors (65 x 4096) stay whole on both ranks
    half = (get_model("llama3-8b").params() - 65 * 4096) / 2 + 65 * 4096
    assert mem["parameter_bytes"] == pytest.approx(2 * half, rel=1e-12)
    assert mem["optimizer_bytes"] == pytest.approx(12 * half / 4, rel=1e-12)
    assert mem["capacity_bytes"] == 81559 * 2**20 and mem["headroom_bytes"] > 0


def test_memory_cli_deepspeed_and_refusals(capsys):
    assert main(["memory", "--model", "gpt3-1.3b", "--deepspeed", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["deepspeed"]
    assert len(rows) == 8 and rows[1]["gpu_bytes"] == 2 * get_model("gpt3-1.3b").params() + int(
        18 * get_model("gpt3-1.3b").params() / 8)
    assert main(["memory", "--model", "llama3-8b", "--num-layer", "3"]) == 2
    assert "did you mean --num-layers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["collective", "--num-layers", "3"])
    assert e.value.code == 2
