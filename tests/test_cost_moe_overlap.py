"""--overlap-moe-expert-parallel-comm on the event clock and in the closed form (issue 25 item 3;
`simulator.cost.moe_overlap`): Megatron-Core's merged backward / forward pairs, their order of
instructions, and the two models agreeing with the overlap on."""

from __future__ import annotations

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.model_presets import ModelSpec
from simulator.cost.moe_overlap import interleave, overlap_pairs, pair_exposed_s
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_program import build_scale_program
from simulator.cost.scale_sim import simulate_at_scale
from simulator.parallel.schedule_registry import make_schedule
from simulator.program import Collective, Compute

MOE = ModelSpec("moe", layers=8, hidden=2048, heads=16, seq=1024, vocab=32000, num_experts=8, ffn_hidden=4096,
                kv_heads=8, biases=False, position_embedding=False, tied_embeddings=False, flash_attention=True)
ON = Assumptions(overlap_moe_comm=True)


def test_pairs_are_a_backward_and_the_next_forward_as_megatron_shifts_them():
    """Megatron-Core schedules one extra warm-up forward with the overlap (schedules.py: "to ensure
    the forward and backward computations are independent"): with p = 1, F0 alone, then (B j, F j+1)."""
    acts = make_schedule("1f1b", 1, 4).actions[0]
    assert [a.kind + str(a.microbatch) for a in acts] == ["F0", "BW0", "F1", "BW1", "F2", "BW2", "F3", "BW3"]
    assert overlap_pairs(acts) == [(0,), (2, 1), (4, 3), (6, 5), (7,)]
    # interleaved, 2 stages: the first device's warm-up forwards stay alone, its steady state merges
    sched = make_schedule("interleaved", 2, 8, 2)
    for k, acts in enumerate(sched.actions):
        pairs = [x for x in overlap_pairs(acts) if len(x) == 2]
        assert pairs and all(acts[f].kind == "F" and acts[b].kind in ("B", "BW")
                             and acts[f].microbatch != acts[b].microbatch and b == f - 1 for f, b in pairs)
        alone = [acts[x[0]] for x in overlap_pairs(acts) if len(x) == 1]
        assert len(alone) + 2 * len(pairs) == len(acts) == 2 * 8 * 2


def _labels(block):
    out = []
    for ins in block:
        if isinstance(ins, Compute):
            out.append(ins.op)
        elif ins.tag in ("ep", "etp", "tp_ep"):
            out.append(f"{ins.tag}:{ins.kind}:{'nb' if not ins.blocking else 'b'}")
    return out


def test_a_merged_layer_runs_in_megatron_cores_order():
    """TransformerLayerSchedulePlan.run: combine_bwd | pre-dispatch fwd | mlp bwd | dispatch | dispatch_bwd
    | mlp fwd | combine | pre-dispatch bwd, the MoE collectives on the comm stream (non-blocking)."""
    model = MOE.with_overrides(layers=2)
    cfg = ParallelConfig(dp=4, ep=4, global_batch=8)       # p = 1: one chunk of 2 layers, m = 2
    labels = _labels(build_scale_program(model, cfg, ON).code[0])
    a2a, blocking = "ep:all_to_all:nb", "ep:all_to_all:b"
    # pre-dispatch: the attention and the router (Megatron-Core's TopKRouter, before the dispatch)
    pre_f, pre_b = ["attn_fwd", "router_fwd"], ["router_bgrad+router_wgrad", "attn_bgrad+attn_wgrad"]
    f0 = (pre_f + [blocking, "mlp_fwd", blocking]) * 2 + ["logits_fwd"]          # F0 alone: blocking
    layer = [a2a, *pre_f, "mlp_bgrad+mlp_wgrad", a2a, a2a, "mlp_fwd", a2a, *pre_b]
    merged = ["logits_bgrad+logits_wgrad"] + layer * 2 + ["logits_fwd"]          # (BW0, F1) merged
    bw1 = ["logits_bgrad+logits_wgrad", "pack"] + [blocking, "mlp_bgrad+mlp_wgrad", blocking, *pre_b, "pack"] * 2
    assert labels[:len(f0 + merged + bw1)] == f0 + merged + bw1


def test_interleave_keeps_every_instruction_once():
    def coll(x, tag):
        return Collective("all_to_all", x, x, (0,), nbytes=8, tag=tag, blocking=False)
    f = [Compute("fa", (), ("x",)), coll("x", "ep"), Compute("fm", (), ("x",)), coll("x", "ep"), Compute("tail", (), ())]
    b = [Compute("bl", (), ("g",)), coll("g", "ep"), Compute("bm", (), ("g",)), coll("g", "ep"),
         Compute("ba", (), ("g",))]
    out = interleave(f, b)
    assert sorted(map(id, out)) == sorted(map(id, f + b))
    assert [i.op if isinstance(i, Compute) else i.tensor for i in out] == ["bl", "g", "fa", "bm", "x", "g", "fm", "x", "ba",
                                                                  "tail"]


def test_a_merged_pair_hides_what_the_other_actions_compute():
    assert pair_exposed_s(1.0, 1.0, 1.0, 1.0, 0.5, 0.5) == 0.0
    assert pair_exposed_s(1.0, 2.0, 0.5, 1.0, 1.5, 1.0) == pytest.approx(0.5 + 0.0 + 0.5 + 0.0)


CASES = {
    "interleaved-fold": (MOE, dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True,
                                   schedule="interleaved", virtual_stages=2)),
    "pp1-ep8": (MOE, dict(dp=8, ep=8, global_batch=32)),
    "interleaved-pp4-ep2": (MOE, dict(tp=1, pp=4, dp=2, ep=2, global_batch=32, schedule="interleaved",
                                      virtual_stages=2)),
    "shared-experts": (MOE.with_overrides(moe_shared_expert_hidden=2048, moe_ffn_hidden=1024),
                       dict(tp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True)),
}


SHARED = MOE.with_overrides(moe_shared_expert_hidden=2048, moe_ffn_hidden=1024)
SHARED_ON = Assumptions(shared_expert_overlap=True)
CASES.update({
    "shared-overlap-pp2": (SHARED, dict(tp=2, pp=2, dp=4, ep=8, etp=1, global_batch=32, sequence_parallel=True),
                           SHARED_ON),
    "shared-overlap-full": (SHARED, dict(dp=8, ep=4, global_batch=32, recompute="full"), SHARED_ON),
})


@pytest.mark.parametrize("name", list(CASES))
def test_the_closed_form_and_the_clock_agree_with_the_overlap_on(name):
    model, kw, *A = CASES[name]
    cfg, on_A = ParallelConfig(**kw), (A or [ON])[0]
    off = [estimate(model, cfg, "h100-sxm"), simulate_at_scale(model, cfg, "h100-sxm", fold_tp=True)]
    on = [estimate(model, cfg, "h100-sxm", on_A), simulate_at_scale(model, cfg, "h100-sxm", on_A, fold_tp=True)]
    assert on[0].leaves_out == ()
    assert on[0].step_time_s == pytest.approx(on[1].step_time_s, rel=0.02), name
    for a, b in zip(off, on):       # both hide all-to-all time, and count the same collectives and kernels
        assert b.breakdown.exposed_comm_s["ep"] < a.breakdown.exposed_comm_s["ep"]
        assert b.step_time_s < a.step_time_s
        assert b.compute_time_s == pytest.approx(a.compute_time_s, rel=1e-9)
    assert on[1].comm_time_by_kind["expert_all_to_all"] == pytest.approx(off[1].comm_time_by_kind["expert_all_to_all"],
                                                                         rel=1e-9)


def test_with_fsdp_the_closed_form_names_the_clocks_one_stream():
    """FSDP's gathers and reduce-scatters and the MoE collectives share the clock's one asynchronous
    stream (`clock`): the closed form names it (`step_breakdown.LEAVES_OUT`), as the clock is slower."""
    model = MOE.with_overrides(moe_shared_expert_hidden=2048, moe_ffn_hidden=1024)
    cfg = ParallelConfig(dp=8, ep=8, global_batch=32, zero_stage=3, fsdp="fsdp2")
    for A in (ON, Assumptions(shared_expert_overlap=True)):
        ana, clock = estimate(model, cfg, "h100-sxm", A), simulate_at_scale(model, cfg, "h100-sxm", A, fold_tp=True)
        assert ana.leaves_out == ("moe-overlap-one-stream",) and ana.step_time_s < clock.step_time_s
    assert estimate(model, cfg, "h100-sxm").leaves_out == ()
