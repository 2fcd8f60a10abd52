"""Hybrid data x tensor x pipeline parallelism on the (pp, dp, tp) mesh: equal to one device for
every combination, the groups of each axis visible in the program and the Chrome trace, and one
run on Ray actors."""

import pytest

from simulator.models import GPTConfig, MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.hybrid import axis_groups, hybrid_mesh
from simulator.program import Collective, Send
from simulator.training import train

GPT = GPTConfig(layers=3, hidden=16, heads=4, seq_len=8, vocab=16)  # 5 model layers: emb, 3 blocks, head

CASES = [
    ("hybrid", dict(devices=8, dp=2, tp=2, pp=2, microbatches=2)),  # 5 layers on 2 stages: 3 + 2 (uneven)
    ("sp", dict(devices=8, dp=2, tp=2, pp=2, microbatches=2, bucket_mb=0.002)),
    ("hybrid", dict(devices=6, dp=1, tp=2, pp=3, microbatches=4, schedule="gpipe")),  # 2 + 2 + 1, not a power of 2
    ("hybrid", dict(devices=6, dp=3, tp=2, pp=1, global_batch=6)),
    ("hybrid", dict(devices=4, dp=1, tp=2, pp=2, microbatches=4, schedule="interleaved", virtual_stages=2)),
    ("hybrid", dict(devices=8, dp=1, tp=4, pp=2, microbatches=2)),
]


@pytest.mark.parametrize("strategy,kw", CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CASES)])
def test_every_combination_equals_one_device(strategy, kw):
    kw = dict(kw)
    r = train(TrainConfig(GPT, strategy=strategy, global_batch=kw.pop("global_batch", 8), steps=3, **kw))
    assert r.config.dp * r.config.tp * r.config.pp == r.config.devices
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)


def test_hybrid_without_tensor_axis_is_data_x_pipeline_for_any_model():
    mlp = MLPConfig(in_dim=8, hidden=16, layers=4, classes=4)
    r = train(TrainConfig(mlp, strategy="hybrid", devices=4, dp=2, pp=2, microbatches=2, global_batch=8, steps=2))
    assert r.config.tp == 1 and r.max_rel_weight_diff_vs_single < 1e-9


def test_mesh_order_tensor_fastest_then_data_then_pipeline():
    cfg = TrainConfig(GPT, strategy="hybrid", devices=8, dp=2, tp=2, pp=2)
    assert repr(hybrid_mesh(cfg)) == "Mesh(pp=2, dp=2, ep=1, cp=1, tp=2)"
    assert axis_groups(cfg) == {"tp": [(0, 1), (2, 3), (4, 5), (6, 7)], "dp": [(0, 2), (1, 3), (4, 6), (5, 7)],
                                "pp": [(0, 4), (1, 5), (2, 6), (3, 7)]}


def test_each_axis_communicates_on_its_own_groups():
    cfg = TrainConfig(GPT, strategy="hybrid", devices=8, dp=2, tp=2, pp=2, microbatches=2, global_batch=8, steps=1)
    r = train(cfg)
    groups = axis_groups(cfg)
    prog = r.compiled.program
    tensor = {ins.group for code in prog.code for ins in code if isinstance(ins, Collective) and "/" in ins.tag
              and not ins.tag.startswith("grad/")}
    data = {ins.group for code in prog.code for ins in code if isinstance(ins, Collective) and ins.tag.startswith("grad/")}
    assert tensor == set(groups["tp"]) and data == set(groups["dp"])
    sends = {tuple(sorted((rank, ins.dst))) for rank, code in enumerate(prog.code) for ins in code if isinstance(ins, Send)}
    assert sends == set(groups["pp"])
    # the Chrome trace names every collective's group
    chrome = r.trace.to_chrome()["traceEvents"]
    traced = {tuple(e["args"]["group"]) for e in chrome if e.get("ph") == "X" and "group" in e["args"]}
    assert traced == set(groups["tp"]) | set(groups["dp"])


def test_tensor_ranks_send_their_share_between_stages_with_or_without_sp():
    # Megatron-LM's scatter-gather (Narayanan et al. 2021, Sec. 4.1): without SP each tensor rank
    # sends 1/t of the activation and the next stage all-gathers it; with SP it is already 1/t
    kw = dict(devices=4, dp=1, tp=2, pp=2, microbatches=2, global_batch=4, steps=1)
    tp = train(TrainConfig(GPT, strategy="hybrid", **kw))
    sp = train(TrainConfig(GPT, strategy="sp", **kw))
    assert sp.trace.bytes_by_collective()["send"] == tp.trace.bytes_by_collective()["send"]
    gathers = [i for code in tp.compiled.program.code for i in code
               if isinstance(i, Collective) and i.tag.startswith("gather act/")]
    # per micro-batch: the activation into stage 1 and its gradient into stage 0, on each of 2 tensor ranks
    assert len(gathers) == 2 * 2 * 2 and tp.max_rel_weight_diff_vs_single < 1e-9


@pytest.mark.ray
def test_hybrid_on_ray_equals_one_device_and_the_local_runtime(ray_runtime):
    cfg = TrainConfig(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=8), strategy="hybrid", devices=8,
                      dp=2, tp=2, pp=2, microbatches=2, global_batch=8, steps=1)
    on_ray = train(cfg, runtime=ray_runtime)
    local = train(cfg)
    assert on_ray.max_rel_weight_diff_vs_single < 1e-9
    assert on_ray.losses == local.losses
    assert on_ray.trace.makespan_s == local.trace.makespan_s


def _opt_bytes(result, device):
    return max(s.bytes_by_category.get("opt", 0) for s in result.trace.memory if s.device == device)


@pytest.mark.parametrize("kw", [dict(devices=8, dp=2, tp=2, pp=2, microbatches=2),
                                dict(devices=6, dp=3, tp=2, pp=1, global_batch=12),
                                dict(devices=4, dp=2, tp=2, strategy="sp")])
def test_zero1_over_the_data_axis_shards_optimizer_state_and_keeps_the_math(kw):
    """Megatron's distributed optimizer in 3-D: same weights as one device, the optimizer state of
    each rank cut N_d ways, and the data-parallel bytes of one AllReduce split into RS + AG."""
    cfg = TrainConfig(GPT, **{"strategy": "hybrid", "global_batch": 8, "steps": 2, **kw})
    plain, zero = train(cfg), train(TrainConfig(**{**cfg.__dict__, "zero_stage": 1}))
    assert zero.max_rel_weight_diff_vs_single < 1e-9
    dp = cfg.dp
    for d in range(cfg.devices):  # Adam's m and v, cut dp ways (+ the 8-byte step counter)
        assert abs((_opt_bytes(zero, d) - 8) - (_opt_bytes(plain, d) - 8) / dp) <= 16 * 8 * dp
    pb, zb = plain.trace.bytes_by_collective(), zero.trace.bytes_by_collective()
    dp_bytes = pb["all_reduce"] - zb.get("all_reduce", 0)  # what the data axis moved
    assert dp_bytes > 0
    added = sum(zb[k] - pb.get(k, 0) for k in ("reduce_scatter", "all_gather"))  # sp has its own RS/AG
    assert added == pytest.approx(dp_bytes, rel=0.05)


def test_zero_stages_2_and_3_are_refused_with_pipelines():
    with pytest.raises(Exception, match="stage 1 \\(the distributed optimizer\\)"):
        TrainConfig(GPT, strategy="hybrid", devices=8, dp=2, tp=2, pp=2, zero_stage=2).resolved()
