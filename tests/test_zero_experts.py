"""ZeRO-1/2/3 with expert parallelism (Megatron-Core's distributed optimizer: dense parameters sharded
over the data x context group, expert parameters over their expert-data group), and stages 2-3 on
tensor- and context-parallel lanes: equal to one device, model states and bytes as the ZeRO formulas
per group."""

import numpy as np
import pytest

from simulator.errors import ParasimError
from simulator.models import GPTConfig, build_model, get_batch
from simulator.parallel.config import TrainConfig
from simulator.parallel.experts import EXPERT_PARAMS, MoEGPTConfig
from simulator.parallel.hybrid import axis_groups
from simulator.parallel.strategies import compile_strategy
from simulator.parallel.zero import model_state_formula_bytes, model_state_report, shard_sizes
from simulator.program import Collective
from simulator.runtime import make_runtime
from simulator.training import train

MOE = MoEGPTConfig(layers=2, hidden=8, heads=4, seq_len=8, vocab=16, experts=4, top_k=2, capacity_factor=1.0)
GPT = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=16)


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("model,kw", [
    (MOE, dict(devices=4, dp=4, ep=2, microbatches=2)),
    (MOE, dict(devices=8, dp=2, cp=2, tp=2, ep=2)),
    (MOE, dict(devices=8, dp=4, tp=2, ep=4)),  # ep = dp: each expert-data group is one rank
    (GPT, dict(devices=8, dp=2, cp=2, tp=2)),
    (MOE, dict(devices=4, dp=1, cp=4, ep=2)),  # dp = 1: sharded over the context ranks (Megatron: dp x cp)
], ids=["moe-dp4-ep2-m2", "moe-dp2-cp2-tp2-ep2", "moe-dp4-tp2-ep4", "gpt-dp2-cp2-tp2", "moe-cp4-ep2"])
def test_zero_stages_on_the_5d_mesh_equal_one_device(model, kw, stage):
    r = train(TrainConfig(model, strategy="hybrid", zero_stage=stage, global_batch=8, steps=2, **kw))
    assert r.config.zero_stage == stage
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)


def test_zero1_with_experts_and_a_pipeline_equals_one_device():
    r = train(TrainConfig(MOE, strategy="hybrid", devices=8, dp=4, pp=2, ep=2, zero_stage=1, microbatches=2,
                          global_batch=8, steps=2))
    assert r.max_rel_weight_diff_vs_single < 1e-9


def _one_step(stage):
    cfg = TrainConfig(MOE, strategy="hybrid", devices=4, dp=4, ep=2, zero_stage=stage, global_batch=8).resolved()
    c = compile_strategy(cfg)
    with make_runtime("local", 4) as rt:
        rt.load(c.initial)
        rt.load(c.feed(*get_batch(MOE, 8, 0)))
        return cfg, c, rt.run(c.program)


def _sizes(cfg):
    """(layer, name) -> (elements on one rank, is an expert tensor)."""
    out = {}
    for li, layer in enumerate(build_model(MOE).layers):
        for n, s in layer.param_shapes().items():
            expert = n in EXPERT_PARAMS and hasattr(layer, "experts")
            out[(li, n)] = (int(np.prod(s)) // (cfg.ep if expert else 1), expert)
    return out


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_model_states_per_rank_are_the_zero_formulas_per_group(stage):
    """Dense tensors cut over the 4 data ranks, expert tensors (E/ep experts each) over the 2 ranks of
    their expert-data group: exact np.array_split bytes on every rank, and the ZeRO formula of each
    group (float64 Adam: 8 + 8 + 16 bytes per parameter) summed over the ranks."""
    cfg, c, res = _one_step(stage)
    edp = {r: g for g in axis_groups(cfg)["edp"] for r in g}
    sizes = _sizes(cfg)
    measured = model_state_report(c.program, res.memory)
    for r, m in enumerate(measured):
        mine = {k: shard_sizes(n, 2 if e else 4)[edp[r].index(r) if e else r] for k, (n, e) in sizes.items()}
        whole = sum(n for n, _ in sizes.values())
        assert m["param"] == 8 * (whole if stage < 3 else sum(mine.values()))
        # one default bucket, reduced in two parts (`GradSync._parts`): the dense gradients packed
        # beside the full gradient, then, with the dense ones scattered to this rank's shards, the
        # experts' packed beside theirs; the peak is the larger of the two moments
        dense = sum(n for n, e in sizes.values() if not e)
        dense_mine = sum(mine[k] for k, (_, e) in sizes.items() if not e)
        assert m["grad_peak"] == 8 * max(whole + dense, dense_mine + 2 * (whole - dense))
        assert m["grad_at_update"] == 8 * sum(mine.values())
        assert m["opt"] == 16 * sum(mine.values()) + 8
        assert m["grad_end"] == 0
    psi_dense = sum(n for n, e in sizes.values() if not e)
    psi_expert = sum(n for n, e in sizes.values() if e)  # on one rank: E/ep experts
    # stage 1 keeps the full gradient until the reduce-scatter (its bytes, asserted per rank above)
    total = sum(m["param"] + m["opt"] - 8 + (8 * whole if stage < 2 else m["grad_at_update"]) for m in measured)
    formula = model_state_formula_bytes(psi_dense, 4, stage) + model_state_formula_bytes(psi_expert, 2, stage)
    assert total == pytest.approx(4 * formula, rel=1e-12)


@pytest.mark.parametrize("stage,gathers", [(1, 1), (2, 1), (3, 2)])
def test_bytes_by_collective_are_the_ring_volumes_of_each_group(stage, gathers):
    """Ring ReduceScatter / AllGather of S bytes over N ranks: the group sends (N - 1) S in all.
    Dense: one group of 4; experts: two groups of 2, each with its own E/ep experts. Stage 3 gathers
    before forward and again before backward."""
    cfg, c, res = _one_step(stage)
    sizes = _sizes(cfg)
    dense = 3 * 8 * sum(n for n, e in sizes.values() if not e)
    expert = 2 * 1 * 8 * sum(n for n, e in sizes.values() if e)
    train_r = train(TrainConfig(MOE, strategy="hybrid", devices=4, dp=4, ep=2, zero_stage=stage, global_batch=8, steps=1))
    by = train_r.trace.bytes_by_collective()
    assert by["reduce_scatter"] == dense + expert
    assert by["all_gather"] == gathers * (dense + expert)
    assert "all_reduce" not in by  # ZeRO replaces the gradient AllReduce
    groups = axis_groups(cfg)
    # one coalesced reduce-scatter per bucket part: the dense gradients (the router's among them)
    # over the 4 data ranks, the experts' over their expert-data group (`GradSync._parts`)
    rs = {(i.tensor, i.group) for code in c.program.code for i in code
          if isinstance(i, Collective) and i.kind == "reduce_scatter"}
    assert {g for t, g in rs if "/experts" in t} == set(groups["edp"])
    assert {g for t, g in rs if "/experts" not in t} == {(0, 1, 2, 3)}
    packed = {t: ins.inputs for code in c.program.code for ins in code
              if type(ins).__name__ == "Compute" and ins.op == "shard_pack" for t in ins.outputs}
    assert any("w_router" in g for t, ins in packed.items() if "/experts" not in t for g in ins)
    assert all("w_fc" in g or "w_proj" in g or "b_" in g for t, ins in packed.items() if "/experts" in t
               for g in ins)


@pytest.mark.parametrize("kw,words", [
    (dict(devices=4, dp=2, pp=2, ep=2, microbatches=2, zero_stage=2), "DeepSpeed refuses ZeRO-2/3 with pipeline"),
    (dict(devices=8, dp=2, pp=2, tp=2, zero_stage=3, model=GPT), "drop --zero or use pp=1"),
    (dict(devices=4, dp=4, ep=2, zero_stage=1, bucket_mb=1.0), "drop --bucket-mb"),
])
def test_zero_stages_2_3_with_a_pipeline_are_refused_in_one_line(kw, words):
    kw = {"model": MOE, "strategy": "hybrid", "global_batch": 8, **kw}
    with pytest.raises(ParasimError, match=words) as e:
        compile_strategy(TrainConfig(kw.pop("model"), **kw).resolved())
    assert "\n" not in str(e.value)
