"""FSDP (issue 25 item 1, `simulator.cost.fsdp`): per-layer units gathered and reduce-scattered as
PyTorch FSDP2 (with torch's pipelining) and Megatron-FSDP do, in both models (the grid of
tests/test_step_model.py holds them within 2 %), memory per component, and Megatron's / torchtitan's
names mapped onto it."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.fsdp import gather_flags, reduce_every_microbatch, reshard_after_forward
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.memory_report import memory_report, stage_params
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.scale_program import build_scale_program
from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import make_schedule
from simulator.program import Collective

GPT = ModelSpec("gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257)


def _cfg(**kw):
    return ParallelConfig(**{"zero_stage": 3, "fsdp": "fsdp2", **kw})


def _gathers(cfg, k=0):
    actions = make_schedule(cfg.schedule, cfg.pp, cfg.microbatches, cfg.virtual_stages).actions[k]
    return sum(gather_flags(cfg, [(a.kind, a.chunk) for a in actions]))


def test_reshard_after_forward_follows_torchtitans_policy():
    # torchtitan get_fsdp_reshard_after_forward_policy: "default" = not pp_enabled
    assert reshard_after_forward(_cfg(dp=8))
    assert not reshard_after_forward(_cfg(pp=2, dp=4))
    assert reshard_after_forward(_cfg(pp=2, dp=4, reshard_after_forward="always"))
    assert not reshard_after_forward(_cfg(dp=8, reshard_after_forward="never"))


@pytest.mark.parametrize("kw,per_chunk", [
    (dict(dp=2, global_batch=8), 2 * 4),                                   # every forward and backward
    (dict(dp=2, global_batch=8, reshard_after_forward="never"), 4),        # forwards only
    (dict(pp=4, dp=2, global_batch=16), 1),                                # kept unsharded for the step
    (dict(pp=4, dp=2, global_batch=16, reshard_after_forward="always"), 8 + 1),   # m + 1 (module docstring)
    (dict(pp=2, dp=2, global_batch=16, schedule="interleaved", virtual_stages=2, reshard_after_forward="always"),
     2 * (8 + 1)),
])
def test_gathers_per_step(kw, per_chunk):
    cfg = _cfg(**kw)
    assert _gathers(cfg) == per_chunk


def test_gradients_are_reduced_per_micro_batch_except_under_torchs_pipelining():
    assert reduce_every_microbatch(_cfg(dp=8))
    assert not reduce_every_microbatch(_cfg(pp=2, dp=4))          # set_requires_gradient_sync(False)
    assert reduce_every_microbatch(_cfg(pp=2, dp=4, fsdp="megatron_fsdp"))   # grads shard mode always syncs
    assert not reduce_every_microbatch(ParallelConfig(dp=8, zero_stage=1))


def _collectives(prog, kind):
    return [i for dev in prog.code for i in dev if isinstance(i, Collective) and i.kind == kind and i.tag == "dp"]


@pytest.mark.parametrize("kw,gathers,reductions", [
    # m = 4 micro-batches of 8 layers; GPT ties its embeddings, so with p = 1 the embedding is the one vocabulary unit
    (dict(dp=2, global_batch=8), 4 * (8 + 1) + 4 * 8, 4 * 8 + 1),
    (dict(dp=2, global_batch=8, reshard_after_forward="never"), 4 * (8 + 1), 4 * 8 + 1),
])
def test_the_clocks_program_gathers_and_reduces_per_unit(kw, gathers, reductions):
    """One all-gather per unit and pass, one reduce-scatter per layer and micro-batch (plus the
    embedding's once per step), as the closed form counts them."""
    prog = build_scale_program(GPT, _cfg(**kw), fold_tp=True)
    assert len(_collectives(prog, "all_gather")) == gathers
    assert len(_collectives(prog, "reduce_scatter")) == reductions


def test_pipelined_fsdp2_reduces_once_per_step_and_deepspeed_zero3_with_a_pipeline_is_refused():
    cfg = _cfg(pp=2, dp=2, global_batch=16)
    prog = build_scale_program(GPT, cfg, fold_tp=True)
    assert len(_collectives(prog, "reduce_scatter")) == 8 + 2         # each layer once, the two vocabulary copies
    with pytest.raises(ParasimError, match="DeepSpeed refuses it"):
        ParallelConfig(pp=2, dp=2, zero_stage=3)
    with pytest.raises(ParasimError, match="it is zero_stage 3"):
        ParallelConfig(dp=2, zero_stage=1, fsdp="fsdp2")


def test_reduce_scatter_time_grows_with_micro_batches_only_without_a_pipeline():
    def rs(**kw):
        return estimate(GPT, _cfg(**kw), "a100-80gb").comm_time_by_kind["data_parallel"]
    # pp = 1: gathers and reduce-scatters repeat per micro-batch
    assert rs(dp=4, global_batch=16) == pytest.approx(4 * rs(dp=4, global_batch=4) - 3 * _emb_rs(dp=4), rel=1e-9)
    # pp = 2 (kept unsharded, reduced once): independent of m
    assert rs(pp=2, dp=4, global_batch=32) == pytest.approx(rs(pp=2, dp=4, global_batch=8), rel=1e-9)


def _emb_rs(dp):
    """The embedding unit's reduce-scatter, priced once per step whatever m (module docstring)."""
    from simulator.cost.comm import collective_time_s
    from simulator.cost.hardware import get_hardware
    from simulator.cost.scale_kernels import padded_vocab
    cfg = _cfg(dp=dp, global_batch=dp)
    topo = get_hardware("a100-80gb").topology(cfg.gpus)
    return collective_time_s("reduce_scatter", 4 * padded_vocab(GPT, 1) * GPT.hidden, cfg.dp_cp_group(), topo)


def test_memory_per_component():
    """Sharded states + the unsharded units in flight (`fsdp.fsdp_buffer_bytes`)."""
    layer = stage_params(GPT, 1, 1, False, False)
    plain = memory_report(GPT, ParallelConfig(dp=8, zero_stage=3), "a100-80gb")
    raf = memory_report(GPT, _cfg(dp=8), "a100-80gb")
    never = memory_report(GPT, _cfg(dp=8, reshard_after_forward="never"), "a100-80gb")
    assert raf.model_state_bytes == plain.model_state_bytes        # the same sharded states as ZeRO-3
    assert raf.buffer_bytes == pytest.approx(2 * layer * 2 + 4 * layer * 2, rel=1e-12)
    assert never.buffer_bytes == pytest.approx(2 * layer * 8 + 4 * layer * 2, rel=1e-12)
    piped = _cfg(pp=2, dp=4, global_batch=8)
    mem = memory_report(GPT, piped, "a100-80gb")
    held = stage_params(GPT, 1, 4, mem.stage == 0, mem.stage == 1)
    assert mem.buffer_bytes == pytest.approx((2 + 4) * held, rel=1e-12)   # unsharded params + fp32 grad accumulators


# The case: Megatron's FSDP flags used to price plain DDP. Llama 3 8B on 8 H100 (recorded):
# DDP 185.2 GB (out of memory), FSDP2 61.3 GB (docs/fsdp.md).
FSDP_ARGV = ["--use-torch-fsdp2", "--data-parallel-sharding-strategy", "optim_grads_params",
             "--untie-embeddings-and-output-weights"]


def test_megatrons_fsdp_flags_shard_and_are_not_priced_as_ddp():
    run = megatron_run(parse_megatron_args(FSDP_ARGV), gpus=8, model="llama3-8b")
    assert (run.config.zero_stage, run.config.fsdp) == (3, "fsdp2")
    ddp = megatron_run(parse_megatron_args([]), gpus=8, model="llama3-8b")
    fsdp = memory_report(run.model, run.config, "h100-sxm", flash_attention=True)
    plain = memory_report(ddp.model, ddp.config, "h100-sxm", flash_attention=True)
    assert round(plain.total_bytes / 1e9, 1) == 185.2 and plain.oom
    assert round(fsdp.total_bytes / 1e9, 1) == 61.3 and not fsdp.oom
    assert "--use-torch-fsdp2" not in run.ignored


@pytest.mark.parametrize("argv,zero,fsdp", [
    (["--use-megatron-fsdp"], 3, "megatron_fsdp"),          # Megatron's default strategy optim_grads_params
    (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"], 2, "megatron_fsdp"),
    (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim"], 1, "megatron_fsdp"),
    (["--use-distributed-optimizer"], 1, "none"),
])
def test_sharding_strategies_map_to_zero_stages(argv, zero, fsdp):
    cfg = megatron_run(parse_megatron_args(argv), gpus=8, model="llama3-8b").config
    assert (cfg.zero_stage, cfg.fsdp) == (zero, fsdp)


@pytest.mark.parametrize("argv,match", [
    (FSDP_ARGV + ["--pipeline-model-parallel-size", "2"], "not supported with pipeline parallelism"),
    (["--use-torch-fsdp2", "--data-parallel-sharding-strategy", "optim"], "applies to --use-megatron-fsdp"),
    (["--use-torch-fsdp2", "--use-megatron-fsdp"], "not both"),
    (["--torch-fsdp2-no-reshard-after-forward"], "needs --use-torch-fsdp2"),
])
def test_megatrons_refusals(argv, match):
    with pytest.raises(ParasimError, match=match):
        megatron_run(parse_megatron_args(argv), gpus=8, model="llama3-8b")


def test_no_reshard_flag_maps_to_torchtitans_never():
    cfg = megatron_run(parse_megatron_args(FSDP_ARGV + ["--torch-fsdp2-no-reshard-after-forward"]), gpus=8,
                       model="llama3-8b").config
    assert cfg.reshard_after_forward == "never"


def test_simulate_combines_zero_and_fsdp_flags_with_megatron_flags(capsys):
    """`--zero` and `--fsdp` override what Megatron's flags say, and the answer is the Python API's."""
    argv = ["simulate", "--model", "gpt3-1.3b", "--hardware", "a100-80gb", "--gpus", "8",
            "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--global-batch-size", "16",
            "--zero", "3", "--fsdp", "fsdp2", "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    cfg = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16, zero_stage=3, fsdp="fsdp2")
    assert got["step_time_s"] == estimate("gpt3-1.3b", cfg, "a100-80gb").step_time_s
    assert got["assumptions"]["fsdp"] == {"value": "fsdp2", "source": "flag"}
