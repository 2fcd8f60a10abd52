"""Dense layers in a mixture-of-experts model (Megatron-LM's --moe-layer-freq, `simulator.cost.layer_kinds`):
counted, priced by the closed form and the event clock alike, and refused in one line where not priced."""

from __future__ import annotations

import pytest
from test_cost_moe import DSV3_MLA, MEGATRON, MOE

from simulator.cost.analytic import estimate
from simulator.cost.layer_kinds import chunk_dense_layers, device_dense_layers
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.memory_report import stage_param_split
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import layer_params_on_rank, stage_params_on_rank
from simulator.cost.scale_sim import simulate_at_scale
from simulator.cost.search import search_training
from simulator.errors import ParasimError

FIRST2 = (0, 0) + (1,) * 6
MIXED = MOE.with_overrides(moe_layer_freq=FIRST2, ffn_hidden=8192)     # dense layers wider than an expert


def test_deepseek_v3_with_its_three_dense_layers_has_its_published_671b():
    """DeepSeek-V3 (technical report, abstract and Sec. 4.2): 671B parameters, 37B activated per
    token; its first 3 of 61 layers are dense (MLP 18432). With the pattern the count is 671.0B (703.8B
    when every layer is MoE); activated 37.6B with the input embedding's 0.93B, 36.6B without."""
    dsv3 = DSV3_MLA.with_overrides(moe_layer_freq=(0,) * 3 + (1,) * 58)
    assert dsv3.moe_layers == 58 and round(DSV3_MLA.params() / 1e9, 1) == 703.8
    assert round(dsv3.params() / 1e9, 1) == 671.0
    assert round(dsv3.active_params() / 1e9, 1) == 37.6
    assert round((dsv3.active_params() - dsv3.vocab * dsv3.hidden) / 1e9) == 37


def test_a_pattern_is_validated_and_an_all_moe_pattern_is_the_plain_model():
    assert MOE.with_overrides(moe_layer_freq=(1,) * 8) == MOE
    for bad in ((1,) * 7, (0,) * 8, (2,) + (1,) * 7):
        with pytest.raises(ParasimError, match="moe_layer_freq must give 0 or 1 for each of the 8 layers"):
            MOE.with_overrides(moe_layer_freq=bad)
    with pytest.raises(ParasimError, match="needs num_experts > 0"):
        MOE.with_overrides(num_experts=0, moe_layer_freq=FIRST2)


def test_the_dense_layers_are_placed_in_model_order_on_every_placement():
    cfg = ParallelConfig(pp=2, dp=4, ep=4, global_batch=32, schedule="interleaved", virtual_stages=2)
    alternate = MOE.with_overrides(moe_layer_freq=(0, 1) * 4)
    assert cfg.chunk_layers(8) == (2, 2, 2, 2)
    assert chunk_dense_layers(MIXED, cfg) == (2, 0, 0, 0) and device_dense_layers(MIXED, cfg) == (2, 0)
    assert chunk_dense_layers(alternate, cfg) == (1, 1, 1, 1) and device_dense_layers(alternate, cfg) == (2, 2)


def test_a_dense_layer_holds_its_mlp_and_no_experts():
    """Device 0 of p = 2 holds layers 0-3, two of them dense: the parameters per tensor rank and in
    memory are two MoE layers' and two dense layers' (`rank_params`, `memory_report`)."""
    t, ep = 2, 4
    moe_d, moe_e = layer_params_on_rank(MIXED, t, ep)
    plain_d, plain_e = layer_params_on_rank(MIXED.dense_layer(), t)
    assert plain_e == 0 and plain_d > moe_d
    dense, expert = stage_params_on_rank(MIXED, t, ep, 4, 1, 2, None, None, 2)   # device 1 holds no embedding
    assert (dense, expert) == (2 * moe_d + 2 * plain_d + stage_params_on_rank(MIXED, t, ep, 0, 1, 2)[0], 2 * moe_e)
    mem_dense, mem_expert = stage_param_split(MIXED, t, 4, False, False, ep, None, 2)
    assert mem_expert == pytest.approx(2 * stage_param_split(MIXED, t, 1, False, False, ep)[1], rel=1e-12)
    assert mem_dense == pytest.approx(2 * stage_param_split(MIXED, t, 1, False, False, ep)[0]
                                      + 2 * stage_param_split(MIXED.dense_layer(), t, 1, False, False)[0], rel=1e-12)


@pytest.mark.parametrize("cfg", [
    dict(tp=2, pp=2, dp=4, ep=4, sequence_parallel=True, global_batch=32, zero_stage=1),
    dict(pp=2, dp=8, ep=8, global_batch=64, schedule="interleaved", virtual_stages=2, recompute="full"),
    dict(tp=2, pp=4, dp=2, ep=2, sequence_parallel=True, global_batch=32, schedule="zb-h1"),
    dict(dp=8, ep=8, cp=2, global_batch=16),
    dict(dp=8, ep=8, global_batch=16, zero_stage=3, fsdp="fsdp2"),
    dict(tp=2, pp=2, dp=4, ep=4, sequence_parallel=True, global_batch=32, zero_stage=3, fsdp="fsdp2"),
    dict(dp=8, ep=4, global_batch=16, zero_stage=3, fsdp="megatron_fsdp"),
], ids=["tp2-sp-pp2-zero1", "interleaved-full-recompute", "zb-h1", "cp2", "fsdp2", "fsdp2-tp-pp", "megatron-fsdp"])
def test_the_closed_form_and_the_clock_price_the_dense_layers_alike(cfg):
    """Both clocks price each dense layer as the dense MLP it is (with FSDP a unit of its own size),
    within the 2 % of one model of a step (docs/step-model.md), and the dense layers change the price."""
    config = ParallelConfig(**cfg)
    A = Assumptions(overlap_grad_reduce=True)
    closed, clock = estimate(MIXED, config, "h100-sxm", A), simulate_at_scale(MIXED, config, "h100-sxm", A)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)
    every = estimate(MIXED.with_overrides(moe_layer_freq=()), config, "h100-sxm", A)
    assert every.step_time_s != closed.step_time_s
    assert closed.flops_per_step != every.flops_per_step


@pytest.mark.parametrize("pattern", [FIRST2, (0, 1) * 4], ids=["first-two-dense", "alternate"])
@pytest.mark.parametrize("cfg", [dict(dp=8, ep=8, global_batch=16),
                                 dict(tp=2, pp=2, dp=4, ep=4, global_batch=32, sequence_parallel=True,
                                      schedule="interleaved", virtual_stages=2)], ids=["pp1", "tp2-pp2-v2"])
def test_the_all_to_all_overlap_hides_under_the_dense_layers_too(pattern, cfg):
    """--overlap-moe-expert-parallel-comm with dense layers: the clock's merged pairs put a forward's
    dense layers before MoE layer i beside its attention, a backward's after it beside its attention's
    gradients (`moe_overlap.overlap_exposed_per_layer`); the closed form prices the same, within 2 %."""
    A = Assumptions(overlap_moe_comm=True, moe_token_dispatcher="alltoall")
    model, config = MIXED.with_overrides(moe_layer_freq=pattern), ParallelConfig(**cfg)
    closed, clock = estimate(model, config, "h100-sxm", A), simulate_at_scale(model, config, "h100-sxm", A)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)
    plain = Assumptions(moe_token_dispatcher="alltoall")
    assert closed.step_time_s < estimate(model, config, "h100-sxm", plain).step_time_s


def test_the_megatron_flag_sets_the_pattern_and_changes_the_price():
    base = megatron_run(parse_megatron_args(MEGATRON), gpus=8)
    run = megatron_run(parse_megatron_args(MEGATRON + " --moe-layer-freq ([0]*2+[1]*6)"), gpus=8)
    assert run.model.moe_layer_freq == FIRST2 and run.model.moe_layers == 6
    assert "--moe-layer-freq" not in run.ignored
    assert estimate(run.model, run.config, "h100-sxm", run.assumptions).step_time_s != \
        estimate(base.model, base.config, "h100-sxm", base.assumptions).step_time_s
    every = megatron_run(parse_megatron_args(MEGATRON + " --moe-layer-freq 1"), gpus=8)
    assert every.model == base.model


@pytest.mark.parametrize("cfg, A, what", [
    (dict(dp=8, ep=8, global_batch=16, zero_stage=3), None, "DeepSpeed ZeRO-3"),
])
def test_what_is_not_priced_with_dense_layers_is_refused_in_one_line(cfg, A, what):
    for price in (estimate, simulate_at_scale):
        with pytest.raises(ParasimError, match=f"--moe-layer-freq makes 2 of the 8 layers dense: {what}") as err:
            price(MIXED, ParallelConfig(**cfg), "h100-sxm", A)
        assert "\n" not in str(err.value)


def test_the_search_over_a_mixed_model_gives_the_exhaustive_answer():
    """The bound takes the lesser of a MoE and a dense layer's F, B and W (and the greater W where a
    zero-bubble schedule's bubble falls with W), so it prunes nothing the walk would keep."""
    kw = dict(zero_stages=(0, 1), schedules=("1f1b", "interleaved", "zb-h1"), top=3)
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k not in ("evaluated", "infeasible", "bounded")}  # noqa: E731
    for model in (MIXED, MIXED.with_overrides(mtp_num_layers=1)):       # and with an MTP module on the last stage
        bound = search_training(model, "h100-sxm", 16, 32, **kw)
        walk = search_training(model, "h100-sxm", 16, 32, prune=False, **kw)
        assert strip(bound) == strip(walk) and bound.evaluated < walk.evaluated
