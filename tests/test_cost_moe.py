"""MoE as Megatron-Core runs it (issue 25 item 3; `simulator.cost.moe`): the expert layers' own grid
(MoE parallel folding), its groups, the dispatchers, capacity, and the Megatron flags that set them."""

from __future__ import annotations

import json
import math

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.model_presets import ModelSpec
from simulator.cost.moe import moe_collectives, moe_layouts
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_sim import simulate_at_scale
from simulator.errors import ParasimError
from simulator.parallel.degrees import Parallelism

# the shape of DeepSeek-V3 (DeepSeek-AI 2024, Table/Sec. 4.2: 61 layers, hidden 7168, 128 heads, 256
# routed experts of width 2048, top-8, vocabulary 129280), with plain attention for now
DSV3 = ModelSpec("dsv3-like", layers=61, hidden=7168, heads=128, seq=4096, vocab=129280, num_experts=256,
                 moe_router_topk=8, moe_ffn_hidden=2048, ffn_hidden=18432, gated_mlp=True, biases=False,
                 position_embedding=False, tied_embeddings=False, flash_attention=True, dropout=False)
MOE = ModelSpec("moe", layers=8, hidden=2048, heads=16, seq=1024, vocab=32000, num_experts=8, ffn_hidden=4096,
                kv_heads=8, biases=False, position_embedding=False, tied_embeddings=False, flash_attention=True)
TP2_EP32_PP8 = dict(tp=2, pp=8, dp=16, ep=32, sequence_parallel=True, global_batch=512, first_stage_layers=5,
                    zero_stage=1, recompute="full")


def test_the_published_tp2_ep32_pp8_layout_is_priced_with_expert_tensor_size_1():
    """The issue's refusal ("32 does not divide 16") was parasim's rule, not Megatron's: Megatron-Core
    needs etp x ep x pp to divide the world (parallel_state.py), so TP2 EP32 PP8 on 256 GPUs runs
    with --expert-tensor-parallel-size 1 and is refused with the default etp = tp = 2."""
    with pytest.raises(ParasimError, match=r"etp x ep = 2 x 32 = 64 to divide the tp x cp x dp = 2 x 1 x 16 = 32"):
        ParallelConfig(**TP2_EP32_PP8)
    cfg = ParallelConfig(etp=1, **TP2_EP32_PP8)
    A = Assumptions(overlap_grad_reduce=True, overlap_param_gather=True)
    closed, clock = estimate(DSV3, cfg, "h100-sxm", A), simulate_at_scale(DSV3, cfg, "h100-sxm", A, fold_tp=True)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)
    # the experts' all-to-all spans 32 ranks (4 nodes): its exposed time is in the breakdown of both
    assert closed.breakdown.exposed_comm_s["ep"] == pytest.approx(clock.breakdown.exposed_comm_s["ep"], rel=1e-6)
    assert closed.comm_time_by_kind["expert_all_to_all"] == pytest.approx(closed.breakdown.exposed_comm_s["ep"])
    assert closed.exposed_comm_s >= closed.breakdown.exposed_comm_s["ep"] > 0.3 * closed.step_time_s


@pytest.mark.parametrize("kw", [dict(tp=2, cp=2, dp=2, ep=2), dict(tp=2, dp=4, ep=8, etp=1),
                                dict(tp=4, dp=4, ep=4, etp=2), dict(tp=2, cp=2, dp=4, ep=16, etp=1, pp=2),
                                dict(tp=8, dp=2, ep=2, etp=4)])
def test_the_expert_groups_are_the_expert_meshs(kw):
    """ParallelConfig's groups (arithmetic on the rank, for 10^5-GPU configurations) are the groups of
    the expert mesh (`DeviceMesh.megatron_experts`, built rank by rank) for every rank of stage 0."""
    cfg = ParallelConfig(global_batch=kw.get("dp", 1), **kw)
    mesh = Parallelism(dp=cfg.dp, tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, etp=cfg.etp).expert_mesh
    for name, axis in (("ep_group", "ep"), ("etp_group", "tp"), ("edp_group", "edp")):
        groups = set(mesh.groups(axis))
        for i in range(cfg.tp):
            assert tuple(getattr(cfg, name)(i, 0)) in groups, (name, i)
    # folding: with etp = 1 the all-to-all group crosses the tensor-parallel ranks
    fold = ParallelConfig(tp=2, dp=4, ep=8, etp=1, global_batch=4)
    assert fold.ep_group(1) == list(range(8)) and fold.edp_group(1) == [1] and fold.etp_group(1) == [1]


def test_the_dispatchers_move_what_megatron_core_moves():
    """Per rank and layer (T = 1024 tokens, t = 2 with SP: 512 routed, k = 2, h = 2048, 16-bit):
    alltoall sends the 2 x 512 routed rows over ep and, with etp 2, all-gathers them over the
    expert-tensor group; allgather gathers the 512 hidden states over the etp x ep ranks."""
    cfg = ParallelConfig(tp=2, dp=4, ep=4, sequence_parallel=True, global_batch=4)
    rows = 2 * 2048 * 2 * 512
    d, c = moe_collectives(MOE, cfg, Assumptions())
    assert [(x.kind, x.group, x.nbytes) for x in d] == [("all_to_all", "ep", rows), ("all_gather", "etp", 2 * rows)]
    assert [(x.kind, x.group, x.nbytes) for x in c] == [("reduce_scatter", "etp", 2 * rows), ("all_to_all", "ep", rows)]
    d, c = moe_collectives(MOE, cfg, Assumptions(moe_token_dispatcher="allgather"))
    assert [(x.kind, x.group, x.nbytes) for x in d + c] == [("all_gather", "tp_ep", 2 * 2048 * 512 * 8),
                                                            ("reduce_scatter", "tp_ep", 2 * 2048 * 512 * 8)]
    padded = moe_collectives(MOE, cfg, Assumptions(capacity_factor=1.25, pad_to_capacity=True))[0]
    assert padded[0].nbytes == 1.25 * rows
    assert moe_collectives(MOE, cfg, Assumptions(capacity_factor=1.25))[0][0].nbytes == rows


def test_megatron_rules_refused_with_their_reason():
    with pytest.raises(ParasimError, match="needs sequence parallelism"):
        estimate(MOE, ParallelConfig(tp=2, dp=4, ep=8, etp=1, global_batch=4), "h100-sxm")
    with pytest.raises(ParasimError, match="pad_to_capacity needs a capacity_factor"):
        Assumptions(pad_to_capacity=True)
    with pytest.raises(ParasimError, match="needs a mixture-of-experts"):
        estimate(ModelSpec("dense", 2, 512, 8, 128, 1000), ParallelConfig(tp=2, etp=1, global_batch=1), "h100-sxm")


def test_valid_moe_layouts_for_search():
    # 8 experts on 16 GPUs with tp 2, pp 2: 8 ranks per stage, etp in {1, 2}, ep dividing 8 and 8 / etp
    assert moe_layouts(MOE, 16, tp=2, pp=2) == [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2)]
    assert moe_layouts(ModelSpec("dense", 2, 512, 8, 128, 1000), 8, tp=2) == [(1, 2)]
    for ep, etp in moe_layouts(MOE, 16, tp=2, pp=2):
        ParallelConfig(tp=2, pp=2, dp=4, ep=ep, etp=etp, sequence_parallel=True, global_batch=8)


MEGATRON = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 1024 --vocab-size 32000 "
            "--num-experts 8 --ffn-hidden-size 4096 --tensor-model-parallel-size 2 --sequence-parallel "
            "--expert-model-parallel-size 4 --global-batch-size 32")


def test_megatron_moe_flags_are_priced():
    base = megatron_run(parse_megatron_args(MEGATRON), gpus=8)
    assert base.assumptions.moe_token_dispatcher == "allgather"      # Megatron-LM's default
    assert base.config.expert_tp == 2
    runs = {flags: megatron_run(parse_megatron_args(MEGATRON + flags), gpus=8) for flags in (
        " --expert-tensor-parallel-size 1", " --moe-token-dispatcher-type alltoall",
        " --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity")}
    t0 = estimate(base.model, base.config, "h100-sxm", base.assumptions).step_time_s
    for flags, r in runs.items():
        assert "--" + flags.split()[0][2:] not in r.ignored
        assert estimate(r.model, r.config, "h100-sxm", r.assumptions).step_time_s != t0, flags
    with pytest.raises(ParasimError, match="must be > 0"):
        parse_megatron_args(MEGATRON + " --moe-expert-capacity-factor 0")


def test_simulate_takes_the_expert_tensor_size_from_either_spelling(capsys):
    argv = ["simulate", "--hardware", "h100-sxm", "--gpus", "8", "--json"]
    assert main(argv + MEGATRON.split() + ["--expert-tensor-parallel-size", "1"]) == 0
    mega = json.loads(capsys.readouterr().out)
    assert main(argv + MEGATRON.split() + ["--etp", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == mega["step_time_s"]
    assert main(argv + MEGATRON.split()) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] != mega["step_time_s"]


def test_shared_experts_are_a_tensor_parallel_mlp_every_token_passes():
    shared = MOE.with_overrides(moe_shared_expert_hidden=1024)
    mlp = 2 * 2048 * 1024                        # a GeLU MLP of width 1024, no biases (the model has none)
    assert shared.layer_params() - MOE.layer_params() == mlp
    assert shared.matmul_params() - MOE.matmul_params() == 8 * 2 * 2048 * 1024
    cfg = ParallelConfig(tp=2, dp=4, ep=4, sequence_parallel=True, global_batch=8)
    a, b = estimate(MOE, cfg, "h100-sxm"), estimate(shared, cfg, "h100-sxm")
    assert b.compute_time_s > a.compute_time_s and b.memory.model_state_bytes > a.memory.model_state_bytes
    with pytest.raises(ParasimError, match="need num_experts > 0"):
        ModelSpec("dense", 2, 512, 8, 128, 1000, moe_shared_expert_hidden=512)


def test_the_overlap_options_hide_what_their_formula_says():
    from simulator.cost.moe import exposed_moe_s
    off, on = Assumptions(), Assumptions(overlap_moe_comm=True)
    shared = Assumptions(shared_expert_overlap=True)
    assert exposed_moe_s(off, 1.2, 0.8, 2) == 4.0                        # blocking: both passes
    assert exposed_moe_s(on, 1.2, 0.8, 2) == 4.0                         # a layer run alone (not merged)
    # fc1 under the dispatch, fc2 under the combine; backward: fc2's gradient first, then fc1's
    assert exposed_moe_s(shared, 1.2, 0.8, 2, (0.5, 0.2), (1.0, 1.0)) == pytest.approx(0.7 + 0.6 + 0.2 + 0.0)
    model = MOE.with_overrides(layers=8)
    cfg = ParallelConfig(tp=2, pp=2, dp=4, ep=8, etp=1, sequence_parallel=True, global_batch=32,
                         schedule="interleaved", virtual_stages=2)
    base, hidden = estimate(model, cfg, "h100-sxm"), estimate(model, cfg, "h100-sxm", on)
    assert hidden.breakdown.exposed_comm_s["ep"] < base.breakdown.exposed_comm_s["ep"]
    assert hidden.compute_time_s == pytest.approx(base.compute_time_s, rel=1e-12)
    assert hidden.leaves_out == ()           # the clock merges the same pairs (test_cost_moe_overlap.py)
    assert hidden.comm_time_by_kind["expert_all_to_all"] == base.comm_time_by_kind["expert_all_to_all"]


@pytest.mark.parametrize("cfg_kw, A_kw, rule", [
    (dict(tp=2, pp=2, dp=4, ep=8, etp=1), dict(overlap_moe_comm=True), "needs virtual pipeline stages"),
    (dict(dp=8), dict(overlap_moe_comm=True), "only supported with expert model parallelism"),
    (dict(dp=8, ep=8), dict(overlap_moe_comm=True, moe_token_dispatcher="allgather"), "alltoall/flex"),
    (dict(dp=8, ep=8, recompute="full"), dict(overlap_moe_comm=True), "full recomputation disabled"),
    (dict(dp=8, ep=8), dict(shared_expert_overlap=True), "only works with shared experts"),
])
def test_overlap_options_are_refused_where_megatron_core_refuses_them(cfg_kw, A_kw, rule):
    kw = dict(sequence_parallel=True, **cfg_kw) if cfg_kw.get("tp", 1) > 1 else cfg_kw
    cfg = ParallelConfig(global_batch=kw.get("dp", 1) * 2, **kw)
    with pytest.raises(ParasimError, match=rule):
        estimate(MOE, cfg, "h100-sxm", Assumptions(**A_kw))


def test_megatron_overlap_and_shared_expert_flags_are_priced():
    flags = MEGATRON + " --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 1024"
    plain = megatron_run(parse_megatron_args(flags), gpus=8)
    over = megatron_run(parse_megatron_args(flags + " --moe-shared-expert-overlap"), gpus=8)
    assert plain.model.moe_shared_expert_hidden == 1024 and over.assumptions.shared_expert_overlap
    t = [estimate(r.model, r.config, "h100-sxm", r.assumptions).step_time_s for r in (plain, over)]
    assert t[1] < t[0]
    a2a = megatron_run(parse_megatron_args(MEGATRON + " --moe-token-dispatcher-type alltoall "
                                           "--overlap-moe-expert-parallel-comm"), gpus=8)
    assert a2a.assumptions.overlap_moe_comm


# DeepSeek-V3's attention (DeepSeek-AI 2024, Sec. 4.2: 128 heads, per-head 128 + 64 rotary for queries and
# keys, 128 for values, KV compression 512, query compression 1536) and its published size
DSV3_MLA = DSV3.with_overrides(kv_lora_rank=512, q_lora_rank=1536, qk_head_dim=128, qk_pos_emb_head_dim=64,
                               v_head_dim=128, moe_shared_expert_hidden=2048)


def test_multi_latent_attention_counts_deepseek_v3s_parameters():
    """DeepSeek-V3: 671B parameters in total, 37B activated per token (technical report, abstract and
    Sec. 4.2), without the 14B MTP module (its model card: 685B = 671B main + 14B MTP). Its first 3
    layers are dense (ffn 18432; --moe-layer-freq, which this model does not use: all 61 layers are
    MoE here), so the model here holds 3 layers' routed experts more and 3 dense MLPs fewer. A dense
    MLP of width 18432 = 9 x 2048 costs what 8 routed + 1 shared expert cost per token."""
    attn = DSV3_MLA.attention_params()
    # q: 7168 x 1536 + 1536 x 128 x 192; kv: 7168 x 576 + 512 x 128 x 256; out 128 x 128 x 7168; 2 norms
    assert attn == 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168 + 1536 + 512
    expected = 671e9 + 3 * 256 * 3 * 7168 * 2048 - 3 * 3 * 7168 * 18432
    assert DSV3_MLA.params() == pytest.approx(expected, rel=0.01)
    active = 37e9 + 3 * 3 * 7168 * 2048 * 9 - 3 * 3 * 7168 * 18432   # 3 dense layers priced as 8 + 1 experts
    assert DSV3_MLA.active_params() == pytest.approx(active, rel=0.03)


def test_mla_and_kv_channels_flags_are_priced():
    flags = MEGATRON + " --moe-token-dispatcher-type alltoall"
    base = megatron_run(parse_megatron_args(flags), gpus=8)
    mla = megatron_run(parse_megatron_args(flags + " --multi-latent-attention --kv-lora-rank 256 --q-lora-rank 512"),
                       gpus=8)
    kvc = megatron_run(parse_megatron_args(flags + " --kv-channels 64"), gpus=8)
    assert mla.model.multi_latent_attention and mla.model.core_dims == (192, 128) and kvc.model.head_dim == 64
    t = {n: estimate(r.model, r.config, "h100-sxm", r.assumptions) for n, r in (("base", base), ("mla", mla),
                                                                                  ("kvc", kvc))}
    assert len({r.step_time_s for r in t.values()}) == 3
    assert kvc.model.attention_params() == 2048 * (16 + 2 * 16) * 64 + 16 * 64 * 2048 + (16 + 32) * 64 + 2048


def test_mla_in_the_clock_agrees_with_the_closed_form():
    model = MOE.with_overrides(kv_lora_rank=256, q_lora_rank=512, qk_head_dim=64, qk_pos_emb_head_dim=32,
                               v_head_dim=64)
    cfg = ParallelConfig(tp=2, pp=2, dp=4, ep=8, etp=1, cp=2, sequence_parallel=True, global_batch=32,
                         cp_comm_type="a2a")
    closed, clock = estimate(model, cfg, "h100-sxm"), simulate_at_scale(model, cfg, "h100-sxm", fold_tp=True)
    assert closed.step_time_s == pytest.approx(clock.step_time_s, rel=0.02)


def test_moe_layer_freq_is_read_without_evaluating_it():
    from simulator.cost.moe import moe_layer_pattern
    assert moe_layer_pattern("([0]*3+[1]*5)", 8) == (0, 0, 0, 1, 1, 1, 1, 1)
    assert moe_layer_pattern("([1]*3+[0]*1)*2", 8) == (1, 1, 1, 0) * 2       # Megatron-LM's help example
    assert moe_layer_pattern("2", 4) == (1, 0, 1, 0) and moe_layer_pattern("[1,0]*2", 4) == (1, 0, 1, 0)
    for bad, rule in (("__import__('os')", "not part of a layer pattern"), ("[1]*7", "one 0 or 1 per layer"),
                      ("[1]*", "repeat count")):
        with pytest.raises(ParasimError, match=rule):
            moe_layer_pattern(bad, 8)


def test_an_all_moe_pattern_with_grouped_gemm_needs_no_note():
    every = megatron_run(parse_megatron_args(MEGATRON + " --moe-layer-freq [1]*8 --moe-grouped-gemm"), gpus=8)
    assert every.notes == () and "--moe-layer-freq" not in every.ignored
    assert "grouped GEMM" in megatron_run(parse_megatron_args(MEGATRON), gpus=8).notes[0]


def test_the_flag_table_states_what_the_layer_flags_refuse():
    """megatron_flags.txt lists --moe-layer-freq and --mtp-num-layers as priced, with what each
    refuses (tests/test_layer_kinds.py, tests/test_mtp.py); an all-MoE pattern is the default model."""
    from simulator.cost.megatron_flag_table import FLAG_EFFECTS
    assert "DeepSpeed ZeRO-3 is refused" in FLAG_EFFECTS["moe-layer-freq"][1]
    assert "ZeRO-3 / FSDP, and the all-to-all overlap after a dense last layer, refused" in \
        FLAG_EFFECTS["mtp-num-layers"][1]
    every = megatron_run(parse_megatron_args(MEGATRON + " --moe-layer-freq 1"), gpus=8)
    base = megatron_run(parse_megatron_args(MEGATRON), gpus=8)
    assert (every.model, every.config) == (base.model, base.config)


def test_flex_dispatches_once_per_node_as_deepep_measures_it():
    """DeepEP (github.com/deepseek-ai/DeepEP README at dd758caf, Performance: DeepSeek-V3's shape, 8K
    tokens, hidden 7168, top-8 of 256 experts; SM90 with CX7) measures a dispatch bottleneck of
    90 GB/s (RDMA) for EP 8 x 2 and 61 GB/s for EP 8 x 4, logical bandwidth counting each token once
    per node it goes to, the rank's own node included. parasim's RDMA leg of flex, the same bytes
    over the ranks of one in-node index on h100-sxm: 93.8 and 62.5 GB/s (recorded; 4.2 % and 2.5 % above)."""
    from simulator.cost.comm import collective_time_s
    from simulator.cost.hardware import get_hardware
    from simulator.cost.moe import moe_collective_time_s, nodes_hit
    assert nodes_hit(256, 8, 1) == pytest.approx(1.0)
    assert nodes_hit(256, 8, 256) == pytest.approx(8.0)          # one expert per node: every copy its own node
    assert nodes_hit(128, 8, 2) == pytest.approx(2 * (1 - math.comb(64, 8) / math.comb(128, 8)), rel=1e-12)
    hw = get_hardware("h100-sxm")
    for nodes, published, recorded in ((2, 90, 93.8), (4, 61, 62.5)):
        topo = hw.topology(8 * nodes)
        once = 2 * 7168 * 8192 * nodes_hit(256, 8, nodes)
        gbps = once / collective_time_s("all_to_all", once, [8 * i for i in range(nodes)], topo) / 1e9
        assert gbps == pytest.approx(recorded, abs=0.05) and gbps == pytest.approx(published, rel=0.05)
        rows = 2 * 7168 * 8192 * 8
        ep = list(range(8 * nodes))
        flex = moe_collective_time_s("all_to_all", "ep_flex", rows, ep, topo, "ring", 256, 8)
        plain = moe_collective_time_s("all_to_all", "ep", rows, ep, topo, "ring", 256, 8)
        assert flex < plain == collective_time_s("all_to_all", rows, ep, topo)
    one_node = hw.topology(8)
    assert moe_collective_time_s("all_to_all", "ep_flex", 1e8, range(8), one_node, "ring", 256, 8) == \
        collective_time_s("all_to_all", 1e8, range(8), one_node)


def test_flex_is_priced_alike_by_the_clock_and_the_closed_form():
    cfg = ParallelConfig(dp=16, ep=16, global_batch=64)            # 16 ranks over 2 nodes
    model = MOE.with_overrides(num_experts=64, moe_router_topk=4)
    A = [Assumptions(moe_token_dispatcher=d) for d in ("alltoall", "flex")]
    ana = [estimate(model, cfg, "h100-sxm", a) for a in A]
    clock = [simulate_at_scale(model, cfg, "h100-sxm", a, fold_tp=True) for a in A]
    assert ana[1].breakdown.exposed_comm_s["ep"] < ana[0].breakdown.exposed_comm_s["ep"]
    for a, c in zip(ana, clock):
        assert a.step_time_s == pytest.approx(c.step_time_s, rel=0.02)
        assert a.breakdown.exposed_comm_s["ep"] == pytest.approx(c.breakdown.exposed_comm_s["ep"], rel=1e-6)
