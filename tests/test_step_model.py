"""One model of a step (issue 24 item 2): the closed form (`analytic.estimate`) and the event clock
(`scale_sim.simulate_at_scale`) give one breakdown that adds up to the step, hfu >= mfu, and the two
agree within 2 % on a broad grid or the closed form names what it leaves out (docs/step-model.md)."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.hardware import Hardware
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_sim import simulate_at_scale
from simulator.cost.step_breakdown import COMM_KINDS, LEAVES_OUT
from simulator.errors import ParasimError
from simulator.topology import Link

GPT = ModelSpec("gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257)
# large untied vocabulary, GQA, SwiGLU, no biases, rotary: the shape of a modern model
BIGV = ModelSpec("bigv", layers=8, hidden=2048, heads=16, seq=2048, vocab=256000, kv_heads=4, tied_embeddings=False,
                 gated_mlp=True, ffn_hidden=5632, biases=False, position_embedding=False)
MOE = ModelSpec("moe", layers=8, hidden=2048, heads=16, seq=1024, vocab=32000, num_experts=8, ffn_hidden=4096,
                kv_heads=8, biases=False, position_embedding=False, tied_embeddings=False)
FLASH = Assumptions(flash_attention=True)
OVERLAP = Assumptions(overlap_grad_reduce=True, overlap_param_gather=True)
PIPE = dict(tp=2, pp=4, dp=2, global_batch=64)
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-h2", 1),
             # played with each chunk's own times (`ScheduleSpec.per_chunk`); zb-v and dualpipev V-shaped
             ("looped-bfs", 2), ("interleaved-zb", 2), ("zb-v", 2), ("dualpipev", 2)]

GRID = ([(f"gpt-{s}", GPT, "a100-80gb", Assumptions(), dict(schedule=s, virtual_stages=v, **PIPE)) for s, v in SCHEDULES]
        + [(f"bigv-{s}", BIGV, "h100-sxm", FLASH, dict(schedule=s, virtual_stages=v, **PIPE)) for s, v in SCHEDULES]
        + [("gpt-uneven", GPT, "a100-80gb", Assumptions(), dict(first_stage_layers=1, last_stage_layers=1, **PIPE)),
           ("bigv-interleaved-sp-full", BIGV, "h100-sxm", FLASH,
            dict(tp=4, pp=2, dp=2, global_batch=32, schedule="interleaved", virtual_stages=2, sequence_parallel=True,
                 recompute="full")),
           ("gpt-selective", GPT, "a100-80gb", Assumptions(), dict(recompute="selective", **PIPE)),
           ("gpt-cp-p2p", GPT, "a100-80gb", Assumptions(), dict(tp=2, pp=2, dp=2, cp=2, global_batch=16)),
           ("gpt-cp-a2a", GPT, "a100-80gb", Assumptions(), dict(tp=2, pp=2, dp=2, cp=2, cp_comm_type="a2a",
                                                                global_batch=16)),
           ("moe-ep4", MOE, "h100-sxm", FLASH, dict(tp=2, pp=2, dp=4, ep=4, global_batch=32)),
           ("moe-ep2-sp", MOE, "h100-sxm", FLASH, dict(tp=2, dp=4, ep=2, global_batch=32, sequence_parallel=True)),
           # MoE parallel folding: the experts' group spans the tensor- and data-parallel ranks (etp 1)
           ("moe-fold-ep8-etp1", MOE, "h100-sxm", FLASH, dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32,
                                                              sequence_parallel=True)),
           ("moe-allgather", MOE, "h100-sxm", Assumptions(flash_attention=True, moe_token_dispatcher="allgather"),
            dict(tp=2, dp=4, ep=4, global_batch=32, sequence_parallel=True)),
           ("moe-shared-experts", MOE.with_overrides(moe_shared_expert_hidden=2048, moe_ffn_hidden=1024), "h100-sxm",
            FLASH, dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True)),
           # --overlap-moe-expert-parallel-comm: merged backward / forward pairs (simulator.cost.moe_overlap)
           ("moe-overlap-interleaved", MOE, "h100-sxm", Assumptions(flash_attention=True, overlap_moe_comm=True),
            dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True, schedule="interleaved",
                 virtual_stages=2)),
           ("moe-overlap-pp1", MOE, "h100-sxm", Assumptions(flash_attention=True, overlap_moe_comm=True),
            dict(dp=8, ep=8, global_batch=32)),
           ("moe-shared-overlap", MOE.with_overrides(moe_shared_expert_hidden=2048, moe_ffn_hidden=1024), "h100-sxm",
            Assumptions(flash_attention=True, shared_expert_overlap=True),
            dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True)),
           ("moe-padded", MOE, "h100-sxm", Assumptions(flash_attention=True, capacity_factor=1.25, pad_to_capacity=True),
            dict(tp=2, pp=2, dp=4, ep=4, global_batch=32, sequence_parallel=True)),
           ("gpt-zero1-pp-overlap", GPT, "a100-80gb", OVERLAP, dict(tp=2, pp=2, dp=4, global_batch=32, zero_stage=1)),
           ("gpt-tp-overlap", GPT, "h100-sxm", Assumptions(overlap_tp_comm=True),
            dict(tp=4, pp=2, dp=2, global_batch=32, sequence_parallel=True))]
        + [(f"gpt-zero{z}{'-overlap' if o else ''}", GPT, "a100-80gb", OVERLAP if o else Assumptions(),
            dict(dp=8, global_batch=32, zero_stage=z)) for z in range(4) for o in (False, True)]
        # FSDP (simulator.cost.fsdp): FSDP2 with and without resharding, x TP x PP (parameters kept
        # unsharded, one reduce-scatter per step), interleaved, x CP, full recomputation, Megatron-FSDP
        + [(f"fsdp-{name}", model, hw, A, dict(zero_stage=3, **kw)) for name, model, hw, A, kw in (
            ("fsdp2", GPT, "a100-80gb", Assumptions(), dict(dp=8, global_batch=32, fsdp="fsdp2")),
            ("fsdp2-never", GPT, "a100-80gb", Assumptions(), dict(dp=8, global_batch=32, fsdp="fsdp2",
                                                                  reshard_after_forward="never")),
            ("fsdp2-tp-pp", GPT, "a100-80gb", Assumptions(), dict(tp=2, pp=2, dp=4, global_batch=32, fsdp="fsdp2")),
            ("fsdp2-tp-pp-always", GPT, "a100-80gb", Assumptions(), dict(tp=2, pp=2, dp=4, global_batch=32,
                                                                         fsdp="fsdp2", reshard_after_forward="always")),
            ("fsdp2-interleaved", BIGV, "h100-sxm", FLASH, dict(tp=2, pp=2, dp=4, global_batch=32, fsdp="fsdp2",
                                                               schedule="interleaved", virtual_stages=2)),
            ("fsdp2-cp", GPT, "a100-80gb", Assumptions(), dict(tp=2, dp=2, cp=2, global_batch=16, fsdp="fsdp2",
                                                              cp_comm_type="a2a")),
            ("fsdp2-full", BIGV, "h100-sxm", FLASH, dict(dp=8, global_batch=32, fsdp="fsdp2", recompute="full")),
            ("fsdp2-hsdp", GPT, "a100-80gb", Assumptions(), dict(dp=8, global_batch=32, fsdp="fsdp2", dp_replicate=2)),
            ("fsdp2-ep", MOE, "h100-sxm", FLASH, dict(tp=2, dp=4, ep=4, global_batch=32, fsdp="fsdp2")),
            ("fsdp2-ep-fold-pp", MOE, "h100-sxm", FLASH, dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32,
                                                             sequence_parallel=True, fsdp="fsdp2")),
            ("megatron", GPT, "a100-80gb", Assumptions(), dict(dp=8, global_batch=32, fsdp="megatron_fsdp")),
            ("megatron-overlap-pp", BIGV, "h100-sxm", Assumptions(flash_attention=True, overlap_grad_reduce=True,
                                                                   overlap_param_gather=True),
             dict(tp=2, pp=2, dp=4, global_batch=32, fsdp="megatron_fsdp", recompute="full")))])


GRID_BY_NAME = {g[0]: g for g in GRID}


@pytest.fixture(scope="module")
def priced():
    """Each grid configuration priced both ways (about 8 s for the whole grid)."""
    out = {}
    for name, model, hw, A, kw in GRID:
        cfg = ParallelConfig(**kw)
        out[name] = (estimate(model, cfg, hw, A),
                     simulate_at_scale(model, cfg, hw, A, fold_tp=True, overlap_grad_reduce=A.overlap_grad_reduce))
    return out


@pytest.mark.parametrize("name", [g[0] for g in GRID])
def test_the_breakdown_adds_up_to_the_step_in_both_models(priced, name):
    for res in priced[name]:
        b = res.breakdown
        assert b.step_s == pytest.approx(res.step_time_s, rel=1e-9)
        assert min(b.parts().values()) >= -1e-12 * res.step_time_s
        assert res.compute_time_s == b.compute_s and res.exposed_comm_s == pytest.approx(b.exposed_total_s, rel=1e-12)
        assert res.bubble_fraction == pytest.approx(b.bubble_s / res.step_time_s, rel=1e-9)


@pytest.mark.parametrize("name", [g[0] for g in GRID])
def test_no_more_communication_is_exposed_than_there_is(priced, name):
    """The closed form's totals are the bottleneck device's, of which the breakdown exposes a part
    (the simulate text's "communication X total, Y exposed" once showed Y > X: the totals were the
    mean over the stages, the exposed part the slowest stage's)."""
    ana, _ = priced[name]
    assert ana.exposed_comm_s <= ana.comm_time_s * (1 + 1e-12), (ana.exposed_comm_s, dict(ana.comm_time_by_kind))


@pytest.mark.parametrize("name", [g[0] for g in GRID])
def test_hfu_is_at_least_mfu(priced, name):
    for res in priced[name]:
        assert res.hfu >= res.mfu > 0


@pytest.mark.parametrize("name", [g[0] for g in GRID])
def test_closed_form_agrees_with_the_clock_or_names_what_it_leaves_out(priced, name):
    ana, clock = priced[name]
    assert set(ana.leaves_out) <= set(LEAVES_OUT)
    gap = abs(ana.step_time_s / clock.step_time_s - 1)
    assert gap <= 0.02 or ana.leaves_out, f"{name}: closed form {ana.step_time_s:.5g} s, clock {clock.step_time_s:.5g} s"
    # what both count alike: the slowest stage's kernels, and its optimizer
    cfg, model = ParallelConfig(**GRID_BY_NAME[name][4]), GRID_BY_NAME[name][1]
    if len(set(cfg.stage_layers(model.layers))) == 1:     # with uneven stages the two may pick different bottlenecks
        assert ana.breakdown.optimizer_s == pytest.approx(clock.breakdown.optimizer_s, rel=1e-9)
        assert ana.breakdown.compute_s == pytest.approx(clock.breakdown.compute_s, rel=1e-6)


def test_without_named_departures_the_grid_is_within_2_percent(priced):
    # the played schedules name their asynchronous exchanges (async-p2p), FSDP with a pipeline how
    # it stretches the fill and drain (fsdp-pipeline); on this grid both differ little: they are
    # held to 2 % here too
    plain = [n for n, (ana, _) in priced.items() if set(ana.leaves_out) <= {"async-p2p", "fsdp-pipeline"}]
    assert len(plain) >= 45       # every schedule on GPT and on a 256k untied GQA model, uneven stages, cp a2a, ep, ZeRO 0-1, FSDP
    for n in plain:
        ana, clock = priced[n]
        assert ana.step_time_s == pytest.approx(clock.step_time_s, rel=0.02), n


def test_exposed_communication_includes_the_expert_all_to_all(priced):
    for res in priced["moe-ep4"]:
        assert res.breakdown.exposed_comm_s["ep"] > 0
        assert res.exposed_comm_s >= res.breakdown.exposed_comm_s["ep"] + res.breakdown.exposed_comm_s["tp"]
    ana, clock = priced["moe-ep4"]
    assert ana.breakdown.exposed_comm_s["ep"] == pytest.approx(clock.breakdown.exposed_comm_s["ep"], rel=1e-6)
    assert set(clock.breakdown.exposed_comm_s) == set(COMM_KINDS)


def test_compute_excludes_tensor_parallel_communication():
    """The issue's gpt3-175b t8 p8 d8 on 512 A100: the parts used to add up to 21.3 s for a 19.5 s step."""
    cfg = ParallelConfig(tp=8, pp=8, dp=8, global_batch=512, recompute="full")
    res = estimate("gpt3-175b", cfg, "a100-80gb")
    parts = res.breakdown.parts()
    assert res.compute_time_s + res.exposed_comm_s + res.bubble_time_s + res.optimizer_time_s == pytest.approx(
        res.step_time_s, rel=1e-9)
    assert parts["exposed_tp"] > 0 and sum(parts.values()) == pytest.approx(res.step_time_s, rel=1e-12)


FREE_NET = Hardware("free-net", {"bf16": 100e12}, 80e9, 2e12, 8, Link(0.0, 1e30), Link(0.0, 1e30))


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 8, 4), (2, 6, 3)])
def test_executed_interleaved_bubble_is_p_minus_1_over_v_m(p, m, v):
    """Megatron-LM's interleaved 1F1B, executed on the clock with free communication and equal
    chunks: idle (p-1) chunk-(F+B) of m v, i.e. bubble / ideal = (p-1)/(v m) (Narayanan et al. 2021
    Sec. 2.2), which the closed form charges."""
    model = ModelSpec("even", layers=2 * p * v, hidden=512, heads=8, seq=256, vocab=1024)
    cfg = ParallelConfig(pp=p, global_batch=m, schedule="interleaved", virtual_stages=v)
    res = simulate_at_scale(model, cfg, FREE_NET, logits=False, optimizer=False)
    assert res.breakdown.bubble_s / res.breakdown.compute_s == pytest.approx((p - 1) / (v * m), rel=1e-9)


# The two configurations, recorded after the fix: the clock used to run each data-parallel
# gradient reduction blocking inside each stage's cooldown (without --overlap-grad-reduce), which held
# back every earlier stage once per stage: 20.9 s on the clock for 14.2 s closed form (gpt3-175b), 12.5 s
# for 9.50 s (the 96-layer model). Megatron-LM reduces after the whole schedule (finalize_model_grads).
# The closed form's stage-boundary exchanges are now the bottleneck device's own, over their real links.
GPT3_ARGV = ["simulate", "--model", "gpt3-175b", "--hardware", "a100-80gb", "--gpus", "512", "--tp", "8", "--pp", "8",
             "--schedule", "interleaved", "--virtual-stages", "2", "--global-batch", "512"]
BIG_ARGV = ["simulate", "--gpus", "1536", "--hardware", "h100-sxm", "--num-layers", "96", "--hidden-size", "18432",
            "--num-attention-heads", "144", "--group-query-attention", "--num-query-groups", "8",
            "--vocab-size", "256000", "--untie-embeddings-and-output-weights", "--swiglu", "--seq-length", "4096",
            "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "12",
            "--num-layers-per-virtual-pipeline-stage", "4", "--micro-batch-size", "1", "--global-batch-size", "768",
            "--use-flash-attn", "--sequence-parallel", "--use-distributed-optimizer", "--bf16"]


@pytest.mark.parametrize("argv,recorded", [(GPT3_ARGV, (14.2878, 14.288)), (BIG_ARGV, (9.9201, 9.9222))],
                         ids=["gpt3-175b", "96-layer-256k"])
def test_the_reported_configurations_at_their_recorded_values(tmp_path, capsys, argv, recorded):
    assert main(argv + ["--trace", str(tmp_path / "t.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    closed, clock = out["step_time_s"], out["event_clock"]["step_time_s"]
    assert (round(closed, 4), round(clock, 4)) == recorded
    assert out["breakdown"]["step_s"] == pytest.approx(closed, rel=1e-9)
    assert out["event_clock"]["breakdown"]["step_s"] == pytest.approx(clock, rel=1e-9)


# ring attention (cp p2p) where its transfers show: cp across nodes, wide K/V, short cores
WIDE = ModelSpec("wide", layers=8, hidden=4096, heads=32, seq=2048, vocab=50257)
RING = [dict(dp=2, cp=8, global_batch=16), dict(tp=2, pp=2, cp=4, global_batch=8), dict(tp=8, cp=4, global_batch=8),
        dict(tp=8, cp=2, global_batch=8)]


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("kw", RING, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_the_ring_is_priced_step_by_step_alike(kw, flash):
    """The closed form charges each ring step what its kernel does not hide (`analytic._layer_comm`);
    the clock runs Transformer Engine's order (`cp_attention.ring_order`): within 4 % (docs/step-model.md)."""
    cfg, A = ParallelConfig(**kw), Assumptions(flash_attention=flash)
    ana, clock = estimate(WIDE, cfg, "a100-80gb", A), simulate_at_scale(WIDE, cfg, "a100-80gb", A, fold_tp=True)
    assert ana.leaves_out == ("ring-attention-overlap",)
    assert ana.step_time_s == pytest.approx(clock.step_time_s, rel=0.04)
    assert ana.breakdown.compute_s == pytest.approx(clock.breakdown.compute_s, rel=1e-6)


def _random_pipelines(seed: int, n: int):
    """n pipelines drawn from presets, degrees, every priced schedule, ZeRO 0-1, SP, FlashAttention
    and the overlaps, on H100 and A100 (configurations that do not exist are skipped)."""
    import random

    rng = random.Random(seed)
    models = ["gpt3-1.3b", "gpt3-13b", "llama3-8b", "llama3-70b", "megatron-7.5b", "gpt3-175b"]
    schedules = [("1f1b", 1), ("interleaved", 2), ("interleaved", 4), ("zb-h1", 1), ("zb-h2", 1), ("gpipe", 1),
                 ("looped-bfs", 2), ("interleaved-zb", 2), ("zb-v", 2), ("dualpipev", 2)]
    out = []
    while len(out) < n:
        s, v = rng.choice(schedules)
        tp, mb, dp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2]), rng.choice([1, 2, 4, 8])
        kw = dict(tp=tp, pp=rng.choice([2, 4, 8]), dp=dp, micro_batch_size=mb, schedule=s, virtual_stages=v,
                  global_batch=dp * mb * rng.choice([4, 8, 16, 32]), zero_stage=rng.choice([0, 1]),
                  sequence_parallel=tp > 1 and rng.random() < 0.5)
        A = Assumptions(flash_attention=rng.random() < 0.5, overlap_grad_reduce=rng.random() < 0.5,
                        overlap_param_gather=rng.random() < 0.5)
        model, hw = rng.choice(models), rng.choice(["h100-sxm", "a100-80gb"])
        try:
            cfg = ParallelConfig(**kw)
            ana = estimate(model, cfg, hw, A)
        except ParasimError:
            continue
        out.append((model, hw, A, cfg, ana))
    return out


def test_random_pipelines_agree_or_name_what_differs():
    """Configurations nobody listed: within 2 %, or the closed form names the difference; the named
    asynchronous exchanges only ever make the clock's step shorter."""
    for model, hw, A, cfg, ana in _random_pipelines(5, 120):
        clock = simulate_at_scale(model, cfg, hw, A, fold_tp=True, overlap_grad_reduce=A.overlap_grad_reduce)
        gap = ana.step_time_s / clock.step_time_s - 1
        assert abs(gap) <= 0.02 or ana.leaves_out, (model, hw, cfg, A, gap)
        if ana.leaves_out == ("async-p2p",):
            assert gap > -0.02, (model, hw, cfg, gap)
