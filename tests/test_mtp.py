"""Multi-token prediction (Megatron-LM --mtp-num-layers, `simulator.cost.mtp`): its parameters, FLOPs,
time in both clocks, memory, the embedding copy it puts on the last stage, and what it refuses."""

from __future__ import annotations

import pytest
from test_cost_moe import DSV3_MLA, MEGATRON, MOE

from simulator.cost.analytic import estimate
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.memory_report import stage_param_split
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import mtp_params_on_rank
from simulator.cost.scale_sim import simulate_at_scale
from simulator.errors import ParasimError

GPT = ModelSpec("gpt", layers=8, hidden=2048, heads=16, seq=2048, vocab=51200, tied_embeddings=False)


def test_deepseek_v3s_mtp_module_holds_one_moe_layer_and_its_projection():
    """DeepSeek-V3's model card: 685B = 671B main model + 14B MTP module, whose checkpoint keeps its
    own copies of the embedding and the output head. Here: one MoE layer (the last layer's kind),
    eh_proj 2 x 7168 x 7168 and three norms, 11.6B; 13.5B with the two 129280 x 7168 copies."""
    dsv3 = get_model("deepseek-v3")        # the preset: DSV3_MLA with its dense layers and MTP module
    assert dsv3 == DSV3_MLA.with_overrides(name="deepseek-v3", moe_layer_freq=(0,) * 3 + (1,) * 58, mtp_num_layers=1,
                                           source=dsv3.source)
    assert dsv3.mtp_layer() is dsv3
    assert dsv3.mtp_module_params() == dsv3.layer_params() + 2 * 7168 * 7168 + 3 * 7168
    assert round(dsv3.mtp_module_params() / 1e9, 1) == 11.6
    assert round((dsv3.mtp_module_params() + 2 * dsv3.vocab * dsv3.hidden) / 1e9, 1) == 13.5
    assert round((dsv3.params() - dsv3.mtp_module_params()) / 1e9, 1) == 671.0
    dense_last = MOE.with_overrides(moe_layer_freq=(1,) * 7 + (0,), mtp_num_layers=1)
    assert dense_last.mtp_layer() == dense_last.dense_layer()      # built from the last layer's spec


def test_the_step_counts_megatrons_mtp_flops():
    """Megatron-LM's num_floating_point_operations counts, per MTP module and token, a layer, the
    2h x h projection and the logits again, forward and backward (x 3): for a GPT layer (12 h^2
    weights, attention core 4 s h per forward) 3 (24 h^2 + 4 s h) + 3 x 2 x 2 h^2 + 3 x 2 h V. Its
    3 h norm FLOPs are element-wise work, which parasim's FLOPs leave out everywhere."""
    cfg = ParallelConfig(dp=8, global_batch=16)
    base, mtp = (estimate(GPT.with_overrides(mtp_num_layers=n), cfg, "h100-sxm") for n in (0, 1))
    h, s, V = GPT.hidden, GPT.seq, GPT.padded_vocab(1)
    per_token = 3 * (24 * h * h + 4 * s * h) + 3 * 2 * 2 * h * h + 3 * 2 * h * V
    assert mtp.flops_per_step - base.flops_per_step == pytest.approx(16 * s * per_token, rel=1e-12)
    assert mtp.step_time_s > base.step_time_s


@pytest.mark.parametrize("model, cfg", [
    (MOE, dict(tp=2, pp=2, dp=4, ep=4, sequence_parallel=True, global_batch=32, zero_stage=1)),
    (MOE, dict(pp=2, dp=8, ep=8, global_batch=64, schedule="interleaved", virtual_stages=2)),
    (GPT, dict(tp=2, dp=4, global_batch=16, recompute="full")),
    (GPT, dict(tp=2, pp=4, dp=2, global_batch=32, schedule="zb-h1")),
], ids=["moe-tp2-sp-pp2", "moe-interleaved", "gpt-full-recompute", "gpt-zb-h1"])
def test_the_closed_form_and_the_clock_price_mtp_alike(model, cfg):
    config = ParallelConfig(**cfg)
    A = Assumptions(overlap_grad_reduce=True)
    with_mtp = model.with_overrides(mtp_num_layers=2)
    closed, clock = estimate(with_mtp, config, "h100-sxm", A), simulate_at_scale(with_mtp, config, "h100-sxm", A)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)
    base = estimate(model, config, "h100-sxm", A)
    assert closed.step_time_s > base.step_time_s and closed.memory.total_bytes > base.memory.total_bytes


@pytest.mark.parametrize("cfg", [dict(dp=8, ep=8, global_batch=16),
                                 dict(tp=2, pp=2, dp=4, ep=4, global_batch=32, sequence_parallel=True,
                                      schedule="interleaved", virtual_stages=2)], ids=["pp1", "tp2-pp2-v2"])
def test_the_all_to_all_overlap_pairs_the_mtp_layers_too(cfg):
    """With --overlap-moe-expert-parallel-comm an MTP module's MoE layer merges as the decoder's do
    (its projection beside its attention, the logits beside its attention's gradients); both clocks
    within the 2 % of one model of a step."""
    A = Assumptions(overlap_moe_comm=True, moe_token_dispatcher="alltoall")
    model, config = MOE.with_overrides(mtp_num_layers=2), ParallelConfig(**cfg)
    closed, clock = estimate(model, config, "h100-sxm", A), simulate_at_scale(model, config, "h100-sxm", A)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)


def test_an_untied_embedding_is_copied_to_the_last_stage_and_summed_with_the_first():
    cfg = ParallelConfig(tp=2, pp=2, dp=4, global_batch=16)
    mtp = GPT.with_overrides(mtp_num_layers=1)
    base, run = estimate(GPT, cfg, "h100-sxm"), estimate(mtp, cfg, "h100-sxm")
    assert base.comm_time_by_kind["embedding_all_reduce"] == 0 < run.comm_time_by_kind["embedding_all_reduce"]
    t, h, V = 2, GPT.hidden, GPT.padded_vocab(2)
    extra = stage_param_split(mtp, t, 4, False, True)[0] - stage_param_split(GPT, t, 4, False, True)[0]
    # memory counts as Megatron-LM's estimator does (every linear's bias split over t, `memory_report`)
    module = stage_param_split(GPT, t, 1, False, False)[0] + 2 * h * h / t + 3 * 2 * h
    assert extra == pytest.approx(module + V * h / t, rel=1e-12)
    # what the gradients and the optimizer count (`rank_params`: the two row-parallel biases whole)
    dense, expert = mtp_params_on_rank(mtp, t)
    assert expert == 0 and dense == pytest.approx(module + 2 * h * (1 - 1 / t), rel=1e-12)


def test_the_megatron_flag_sets_the_modules():
    run = megatron_run(parse_megatron_args(MEGATRON + " --mtp-num-layers 1"), gpus=8)
    base = megatron_run(parse_megatron_args(MEGATRON), gpus=8)
    assert run.model.mtp_num_layers == 1 and "--mtp-num-layers" not in run.ignored
    assert estimate(run.model, run.config, "h100-sxm", run.assumptions).step_time_s > \
        estimate(base.model, base.config, "h100-sxm", base.assumptions).step_time_s


@pytest.mark.parametrize("cfg, A, what", [
    (dict(dp=8, global_batch=16, zero_stage=3), None, "ZeRO-3 / FSDP"),
    (dict(dp=8, ep=8, global_batch=16), Assumptions(overlap_moe_comm=True, moe_token_dispatcher="alltoall"),
     "--overlap-moe-expert-parallel-comm after a dense last layer"),
])
def test_what_is_not_priced_with_mtp_is_refused_in_one_line(cfg, A, what):
    model = (MOE.with_overrides(moe_layer_freq=(1,) * 7 + (0,)) if cfg.get("ep") else GPT).with_overrides(
        mtp_num_layers=1)
    for price in (estimate, simulate_at_scale):
        with pytest.raises(ParasimError, match=f"--mtp-num-layers 1: {what}") as err:
            price(model, ParallelConfig(**cfg), "h100-sxm", A)
        assert "\n" not in str(err.value)


def test_deepseek_v3_on_2048_h800_as_docs_moe_md_prices_it():
    """docs/moe.md's figures: the preset with Megatron's 1F1B (no DualPipe, which is refused) on 2048
    H800, flex dispatch, FP8: 14.8 s per step, 5.4 s of it exposed all-to-all; DeepSeek-AI's 180K H800
    GPU hours per trillion tokens are about 1,540 tokens/s per GPU, 0.36 of it here."""
    flags = ("--pipeline-model-parallel-size 16 --expert-model-parallel-size 64 --global-batch-size 4096 "
             "--use-distributed-optimizer --decoder-first-pipeline-num-layers 1 --recompute-granularity selective "
             "--moe-grouped-gemm --moe-token-dispatcher-type flex --fp8-format hybrid")
    run = megatron_run(parse_megatron_args(flags), gpus=2048, model="deepseek-v3")
    res = estimate(run.model, run.config, "h800", run.assumptions)
    assert round(res.step_time_s, 1) == 14.8 and round(res.breakdown.exposed_comm_s["ep"], 1) == 5.4
    published = 1e12 / (180e3 * 3600)
    assert round(published) == 1543
    assert round(res.tokens_per_s / 2048 / published, 2) == 0.36
