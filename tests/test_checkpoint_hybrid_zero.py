"""Checkpoints of ZeRO on a hybrid (tensor-parallel) run: each rank holds a flat piece of its
tensor-parallel slice of the optimizer state (stage 3: of the parameters too, as `.../own`). Saving,
resuming bit-identically, converting to one device and recovering from a killed device all work."""

import numpy as np
import pytest
from fault_tally import identical, tally_fixture

from simulator.faults import Checkpoint, convert_checkpoint, parse_faults, train_resilient
from simulator.faults.shards import shard_layouts, state_shapes
from simulator.models import GPTConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.experts import MoEGPTConfig
from simulator.parallel.strategies import compile_strategy
from simulator.training import train

tally = tally_fixture("test_checkpoint_hybrid_zero")
GPT = GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8)


def _cfg(zero, pp=1):
    return TrainConfig(GPT, strategy="hybrid", devices=4 * pp, dp=2, tp=2, pp=pp, zero_stage=zero,
                       microbatches=2, global_batch=4, steps=3)


@pytest.mark.parametrize("zero, pp", [(1, 1), (2, 1), (3, 1), (1, 2)])
def test_hybrid_zero_checkpoint_resumes_bit_identically(tmp_path, zero, pp):
    cfg = _cfg(zero, pp)
    full = train_resilient(cfg, checkpoint_every=1, checkpoint_dir=tmp_path)
    ck = Checkpoint.open(tmp_path / "step_00000001")
    assert set(ck.record["tensors"]) == set(state_shapes(cfg))
    # the optimizer state of a tensor-parallel weight: each rank a flat half of its TP slice
    m = ck.shards("opt/1/w_qkv/m")
    assert len(m) == 4 and all(len(s.shape) == 1 for s in m)
    assert sorted(np.concatenate([s.positions((8, 24)) for s in m])) == list(range(8 * 24))
    layout = {n: ck.record["tensors"][n]["layout"] for n in ("opt/1/w_qkv/m", "param/1/w_qkv")}
    assert layout["opt/1/w_qkv/m"].startswith("ZeRO flat pieces of tensor-parallel")
    assert layout["param/1/w_qkv"].startswith("ZeRO" if zero == 3 else "tensor-parallel shards")
    resumed = train_resilient(cfg, resume_from=ck.path)
    assert identical(resumed.train.params, full.train.params)
    np.testing.assert_array_equal(resumed.train.losses, full.train.losses[1:])
    assert resumed.train.max_rel_weight_diff_vs_single < 1e-9


@pytest.mark.parametrize("model, kw", [
    (GPT, dict(devices=4, dp=2, cp=2, zero_stage=1)),  # ZeRO over data x context, no tensor parallelism
    (MoEGPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8, experts=4, top_k=1),
     dict(devices=4, dp=4, ep=2, zero_stage=3)),  # expert rows in flat pieces over the expert-data ranks
])
def test_zero_over_context_and_expert_groups_resumes(tmp_path, model, kw):
    cfg = TrainConfig(model, strategy="hybrid", global_batch=4, steps=2, **kw)
    full = train_resilient(cfg, checkpoint_every=1, checkpoint_dir=tmp_path)
    resumed = train_resilient(cfg, resume_from=tmp_path / "step_00000001")
    assert identical(resumed.train.params, full.train.params)
    assert resumed.train.max_rel_weight_diff_vs_single < 1e-9


def test_stage3_records_the_parameter_shards_under_their_own_names():
    compiled = compile_strategy(_cfg(3).resolved())
    wte = shard_layouts(compiled)["param/0/wte"]
    assert {s.key for s in wte} == {"param/0/wte/own"}
    assert sum(int(np.prod(s.shape)) for s in wte) == 8 * 8  # dp x tp pieces, no overlap
    assert all(s.key == s.name for s in shard_layouts(compiled)["opt/0/wte/m"])


def test_hybrid_zero3_checkpoint_converts_to_one_device(tmp_path):
    cfg = _cfg(3)
    _ = train_resilient(cfg, checkpoint_every=3, checkpoint_dir=tmp_path / "a")
    one = TrainConfig(GPT, strategy="single", devices=1, global_batch=4, steps=3)
    path = convert_checkpoint(tmp_path / "a", tmp_path / "b", one.resolved())
    src, dst = Checkpoint.open(tmp_path / "a"), Checkpoint.open(path)
    for name in state_shapes(cfg):
        assert np.array_equal(src.array(name), dst.array(name)), name
    weights = train(cfg).params  # the trained weights, read back from the hybrid run
    assert identical([{n: dst.array(f"param/{li}/{n}") for n in layer} for li, layer in enumerate(weights)], weights)


def test_hybrid_zero1_recovers_a_killed_device_from_checkpoint(tally):
    r = tally.check(train_resilient(_cfg(1), faults=parse_faults("kill:3@2#5"), checkpoint_every=1, replicas=False))
    assert r.recoveries[0]["from"] == "checkpoint" and r.recoveries[0]["resume_step"] == 2
