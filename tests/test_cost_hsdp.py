"""Hybrid sharding (HSDP, issue 25 item 3): FSDP inside a shard group of d c / R ranks, the gradient
shards all-reduced across the R replicas (`simulator.cost.fsdp`), torchtitan's
data_parallel_replicate_degree and Megatron's --num-distributed-optimizer-instances."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.comm import collective_time_s
from simulator.cost.fsdp import replica_all_reduce_s
from simulator.cost.hardware import get_hardware
from simulator.cost.megatron_args import megatron_run, parse_megatron_args
from simulator.cost.memory_report import memory_report
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.rank_params import layer_params_on_rank
from simulator.cost.scale_program import build_scale_program
from simulator.cost.scale_sim import simulate_at_scale
from simulator.errors import ParasimError
from simulator.program import Collective

GPT = ModelSpec("gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257)


def _cfg(**kw):
    return ParallelConfig(**{"zero_stage": 3, "fsdp": "fsdp2", **kw})


def test_groups_follow_torchtitans_mesh_replicate_outside_shard():
    cfg = _cfg(tp=2, dp=8, cp=2, dp_replicate=2, global_batch=8)
    assert cfg.shard_size == 8 and repr(cfg).endswith("fsdp2 hsdp 2x8)")
    shard, other = cfg.shard_group(0, 0, 0), cfg.shard_group(0, 0, 1)
    assert len(shard) == 8 and not set(shard) & set(other)
    assert sorted(shard + other) == sorted(cfg.dp_cp_group(0, 0))         # the replicas partition d x c
    assert cfg.replicate_group(0, 0) == [shard[0], other[0]]
    assert cfg.shard_group(0, 0) == cfg.dp_cp_group(0, 0)[:8]               # replica 0: dp indices 0-3, all cp


def test_hsdp_adds_one_replica_all_reduce_per_unit_reduction_and_the_clock_agrees():
    """Llama 3 8B on 32 H100 as 4 nodes: HSDP 4 x 8 gathers and reduce-scatters inside a node and
    all-reduces each shard (4 bytes x P_u / 8) across the 4 nodes; closed form and clock agree."""
    m, A = get_model("llama3-8b"), Assumptions(stack="torchtitan")
    base = dict(dp=32, micro_batch_size=2, global_batch=128, recompute="selective")
    flat, hsdp = _cfg(**base), _cfg(**base, dp_replicate=4)
    hw = get_hardware("h100-sxm")
    topo = hw.topology(32, A.resolved(m).link_efficiency)
    ar = collective_time_s("all_reduce", 4 * m.layer_params() / 8, hsdp.replicate_group(), topo, "ring")
    prog = build_scale_program(m, hsdp, A, fold_tp=True)
    coll = [i for dev in prog.code for i in dev if isinstance(i, Collective)]
    rs = [i for i in coll if i.kind == "reduce_scatter" and i.tag == "dp"]
    ars = [i for i in coll if i.kind == "all_reduce" and i.tag == "dpr"]
    assert len(ars) == len(rs) == hsdp.microbatches * m.layers + 1         # one after each reduce-scatter
    assert int(4 * m.layer_params() / 8) in {i.nbytes for i in ars}
    assert not [i for i in build_scale_program(m, flat, A, fold_tp=True).code[0] if getattr(i, "tag", "") == "dpr"]
    by_kind = estimate(m, hsdp, "h100-sxm", A).comm_time_by_kind["data_parallel"]
    by_flat = estimate(m, flat, "h100-sxm", A).comm_time_by_kind["data_parallel"]
    assert by_kind != by_flat
    for cfg in (flat, hsdp):
        cf = estimate(m, cfg, "h100-sxm", A)
        ck = simulate_at_scale(m, cfg, "h100-sxm", A, fold_tp=True)
        assert ck.step_time_s == pytest.approx(cf.step_time_s, rel=0.02)
    assert replica_all_reduce_s(hsdp, A.resolved(m), topo, m.layer_params()) == pytest.approx(ar, rel=1e-12)
    assert replica_all_reduce_s(flat, A.resolved(m), topo, m.layer_params()) == 0.0
    assert ar > collective_time_s("all_reduce", 4 * m.layer_params() / 8, hsdp.shard_group(), topo, "ring")  # across nodes


def test_model_states_shard_inside_a_replica():
    """Parameters, gradients and optimizer states shard over d c / R ranks: HSDP 4 x 4 holds 4 times
    flat FSDP's 16-way shard; the unsharded units in flight are the same."""
    cfg, flat = _cfg(dp=16, global_batch=16, dp_replicate=4), _cfg(dp=16, global_batch=16)
    mem, mem_flat = (memory_report(GPT, c, "a100-80gb") for c in (cfg, flat))
    for part in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"):
        assert getattr(mem, part) == pytest.approx(4 * getattr(mem_flat, part), rel=1e-12)
    assert mem.buffer_bytes == mem_flat.buffer_bytes
    assert estimate(GPT, cfg, "a100-80gb").memory.total_bytes == pytest.approx(mem.total_bytes, rel=1e-12)


@pytest.mark.parametrize("kw,match", [
    (dict(zero_stage=1, fsdp="none", dp=8, dp_replicate=2), "priced for FSDP only"),
    (dict(dp=6, dp_replicate=4), "dp_replicate=4 must divide dp=6"),
    (dict(dp=8, dp_replicate=0), "dp_replicate must be a positive integer"),
])
def test_bad_hybrid_sharding_is_refused_in_one_line(kw, match):
    with pytest.raises(ParasimError, match=match) as err:
        ParallelConfig(**{"zero_stage": 3, "fsdp": "fsdp2", **kw})
    assert "\n" not in str(err.value)


def test_megatrons_flag_and_parasims_flag_give_the_same_price(capsys):
    run = megatron_run(parse_megatron_args(["--use-megatron-fsdp", "--num-distributed-optimizer-instances", "2"]),
                       gpus=8, model="llama3-8b")
    assert (run.config.fsdp, run.config.dp_replicate, run.config.shard_size) == ("megatron_fsdp", 2, 4)
    with pytest.raises(ParasimError, match="--num-distributed-optimizer-instances 2 is priced with FSDP only"):
        megatron_run(parse_megatron_args(["--use-distributed-optimizer", "--num-distributed-optimizer-instances", "2"]),
                     gpus=8, model="llama3-8b")
    argv = ["simulate", "--model", "gpt3-1.3b", "--hardware", "a100-80gb", "--gpus", "16", "--global-batch", "16",
            "--zero", "3", "--fsdp", "fsdp2", "--dp-replicate", "2", "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    cfg = ParallelConfig(dp=16, global_batch=16, zero_stage=3, fsdp="fsdp2", dp_replicate=2)
    assert got["step_time_s"] == estimate("gpt3-1.3b", cfg, "a100-80gb").step_time_s
    assert main(argv[:-3] + ["--dp-replicate", "3", "--json"]) == 2
    assert "dp_replicate=3 must divide dp=16" in capsys.readouterr().err


MOE = ModelSpec("moe", layers=8, hidden=2048, heads=16, seq=1024, vocab=32000, num_experts=8, ffn_hidden=4096,
                kv_heads=8, biases=False, position_embedding=False, tied_embeddings=False)


def test_fsdp_with_expert_parallelism_shards_the_experts_over_the_expert_data_parallel_group():
    """tp 2, dp 4, ep 4, etp 1 on 8 GPUs: the expert-data-parallel group has t d / (etp ep) = 2 ranks, so a
    unit's experts are gathered 2 ways and its dense parameters 4 ways; the experts' model states
    shard 2 ways (as ZeRO-3 over their group), the dense ones 4 ways."""
    cfg = _cfg(tp=2, dp=4, ep=4, etp=1, global_batch=32, sequence_parallel=True)
    assert len(cfg.edp_group()) == 2
    prog = build_scale_program(MOE, cfg, Assumptions(flash_attention=True), fold_tp=True)
    coll = [i for i in prog.code[0] if isinstance(i, Collective)]
    dense, expert = layer_params_on_rank(MOE, 2, 4, 1)
    gathers = {i.tag: i.nbytes for i in coll if i.kind == "all_gather" and i.tag in ("dp", "edp")}
    assert gathers == {"dp": int(2 * dense / 4), "edp": int(2 * expert / 2)}
    reductions = {(i.tag, i.nbytes) for i in coll if i.kind == "reduce_scatter"}
    assert ("edp", int(4 * expert)) in reductions and ("dp", int(4 * dense)) in reductions
    mem, flat = memory_report(MOE, cfg, "h100-sxm"), memory_report(MOE, ParallelConfig(tp=2, dp=4, ep=4, etp=1, global_batch=32, sequence_parallel=True),
                                                                     "h100-sxm")
    assert mem.model_state_bytes < flat.model_state_bytes / 2
    with pytest.raises(ParasimError, match="dp_replicate=2 with expert parallelism ep=4 is not priced"):
        _cfg(tp=2, dp=4, ep=4, global_batch=32, dp_replicate=2)
