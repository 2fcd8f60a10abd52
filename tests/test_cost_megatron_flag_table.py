"""Issue 25 item 5: every Megatron-LM flag is priced, or refused with the reason when it changes
time or memory and is not priced; only flags without effect are listed as ignored. One table,
simulator/cost/megatron_flags.txt (`megatron_flag_table`)."""

from __future__ import annotations

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.megatron_args import FLAGS, megatron_run, parse_megatron_args
from simulator.cost.megatron_flag_table import EFFECTS, FLAG_EFFECTS, PRICED
from simulator.errors import ParasimError


def test_every_flag_is_classified_and_the_priced_ones_are_the_typed_ones():
    assert len(FLAG_EFFECTS) == 864          # Megatron-LM's names at d98e8a64 / 1468ab01, + --use-megatron-fsdp
    assert {e for e, _r in FLAG_EFFECTS.values()} == set(EFFECTS)
    assert all(r for e, r in FLAG_EFFECTS.values() if e == "refused")
    assert PRICED == set(FLAGS)


def test_every_refused_flag_is_refused_with_its_reason():
    for name, (effect, reason) in FLAG_EFFECTS.items():
        if effect == "refused":
            with pytest.raises(ParasimError, match="is refused: " + reason[:30].replace("(", r"\(")):
                parse_megatron_args([f"--{name}", "1"])


@pytest.mark.parametrize("flag,match", [
    ("--cpu-offloading", "CPU offloading"),
    ("--moe-router-score-function", "issue 25 item 3"),  # MoE flags the `moe` work has not priced yet
    ("--no-gradient-accumulation-fusion", "fused kernel"),
    ("--recompute-activations", "--recompute-granularity selective"),
])
def test_examples_of_refusals(flag, match):
    with pytest.raises(ParasimError, match=match):
        parse_megatron_args([flag])


def test_flags_without_effect_are_listed_as_ignored():
    a = parse_megatron_args(["--log-interval", "10", "--seed", "1234", "--bias-dropout-fusion"])
    assert a.ignored == ("--log-interval", "--seed", "--bias-dropout-fusion")


def test_the_pipeline_split_flags_are_priced():
    """30 layers on 4 stages: no even split; with the embedding and the loss counted as a layer
    each, 32 slots split 7, 8, 8, 7 (Megatron-LM's account-for-* flags), the same stages as
    --decoder-first/last-pipeline-num-layers 7, and the same price."""
    base = ["--num-layers", "30", "--pipeline-model-parallel-size", "4", "--global-batch-size", "16"]
    plain = megatron_run(parse_megatron_args(base), gpus=4, model="llama3-8b")
    with pytest.raises(ParasimError, match="cannot be split evenly"):
        plain.config.stage_layers(30)
    both = base + ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    split = megatron_run(parse_megatron_args(both), gpus=4, model="llama3-8b")
    ends = megatron_run(parse_megatron_args(base + ["--decoder-first-pipeline-num-layers", "7",
                                                    "--decoder-last-pipeline-num-layers", "7"]), gpus=4,
                        model="llama3-8b")
    assert split.config.balance_embedding and split.config.stage_layers(30) == (7, 8, 8, 7)
    assert ends.config.stage_layers(30) == (7, 8, 8, 7)
    assert estimate(split.model, split.config, "h100-sxm").step_time_s == \
        estimate(ends.model, ends.config, "h100-sxm").step_time_s
    with pytest.raises(ParasimError, match="give both"):
        megatron_run(parse_megatron_args(base + ["--account-for-loss-in-pipeline-split"]), gpus=4, model="llama3-8b")


def test_gradient_reduction_dtype_and_refused_values():
    run = megatron_run(parse_megatron_args(["--grad-reduce-in-bf16"]), gpus=8, model="llama3-8b")
    assert run.assumptions.grad_reduce_bytes == 2
    run = megatron_run(parse_megatron_args(["--accumulate-allreduce-grads-in-fp32", "--optimizer", "adam"]), gpus=8,
                       model="llama3-8b")
    assert run.assumptions.grad_reduce_bytes == 4
    for argv, match in ((["--optimizer", "sgd"], "prices Adam"), (["--transformer-impl", "local"], "Transformer Engine"),
                        (["--cp-comm-type", "allgather"], "p2p"), (["--cp-comm-type", "a2a", "--context-parallel-size",
                                                                    "2"], None)):
        if match is None:
            assert megatron_run(parse_megatron_args(argv), gpus=2, model="llama3-8b").config.cp_comm_type == "a2a"
            continue
        with pytest.raises(ParasimError, match=match):
            megatron_run(parse_megatron_args(argv), gpus=8, model="llama3-8b")
