"""Distributed checkpoints: per-rank .npy shards + a JSON strategy file, atomic saves, resharding
onto another device count and strategy (8 devices pp=2 x dp=4 -> 4 devices pp=2 x dp=2, and
dp <-> pp <-> ZeRO), and `parasim checkpoint convert`."""

import json

import numpy as np
import pytest
from fault_tally import identical

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.faults import (
    Checkpoint,
    convert_checkpoint,
    latest_checkpoint,
    restore,
    save_checkpoint,
    train_resilient,
)
from simulator.faults.shards import state_shapes
from simulator.models import GPTConfig, MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.strategies import compile_strategy
from simulator.runtime.local import LocalRuntime
from simulator.training import gather_params

MLP = MLPConfig(in_dim=6, hidden=8, layers=4, classes=3)
BIG = TrainConfig(MLP, strategy="pp", devices=8, dp=4, pp=2, microbatches=2, global_batch=16, steps=4)
SMALL = TrainConfig(MLP, strategy="pp", devices=4, dp=2, pp=2, microbatches=2, global_batch=16, steps=4)


def _trained(cfg, root, every=2):
    return train_resilient(cfg, checkpoint_every=every, checkpoint_dir=root)


def test_strategy_file_records_layouts_and_shards(tmp_path):
    _trained(BIG, tmp_path)
    ck = Checkpoint.open(tmp_path)  # the latest: the trained state after the last step
    assert ck.step == 4 and ck.path.name == "step_00000004"
    assert Checkpoint.open(tmp_path / "step_00000002").step == 2  # and the periodic ones
    record = json.loads((ck.path / "strategy.json").read_text())
    assert record["devices"] == 8 and record["mesh"] == "Mesh(pp=2, dp=4, ep=1, cp=1, tp=1)"
    w0 = record["tensors"]["param/0/w"]
    assert w0["global_shape"] == [6, 8] and w0["layout"] == "replicated on ranks [0, 1, 2, 3]"
    assert [s["rank"] for s in w0["shards"]] == [0, 1, 2, 3] and w0["shards"][0]["box"] == [[0, 6], [0, 8]]
    assert record["tensors"]["param/3/w"]["layout"] == "replicated on ranks [4, 5, 6, 7]"
    assert set(record["tensors"]) == set(state_shapes(BIG))
    for s in w0["shards"]:  # plain .npy, loadable without pickle
        assert np.load(ck.path / s["file"], allow_pickle=False).shape == (6, 8)
    assert ck.config == BIG.resolved()


def test_reshard_8_devices_to_4_identical_weights(tmp_path):
    """Save on 8 devices (pp=2 x dp=4), resume on 4 (pp=2 x dp=2): the loaded weights are the
    saved ones bit for bit, and the continued training matches one device."""
    first = _trained(BIG, tmp_path / "big")
    ck = Checkpoint.open(tmp_path / "big" / "step_00000002")
    compiled = compile_strategy(SMALL.resolved())
    rt = LocalRuntime(4)
    restore(rt, compiled, ck)
    loaded = gather_params(compiled, rt)
    saved = [{n: ck.array(f"param/{li}/{n}") for n in layer} for li, layer in enumerate(loaded)]
    assert identical(loaded, saved)
    for r in range(4):  # optimizer state and step counter too
        got = rt.fetch(r, list(compiled.initial[r]))
        for name, value in got.items():
            assert np.array_equal(value, ck.array(name)), (r, name)
    resumed = train_resilient(SMALL, resume_from=ck.path)
    assert resumed.train.max_rel_weight_diff_vs_single < 1e-9
    assert len(resumed.train.losses) == 2
    np.testing.assert_allclose(resumed.train.losses, first.train.losses[2:], rtol=1e-12)


@pytest.mark.parametrize("src, dst", [
    (dict(strategy="dp", devices=4), dict(strategy="pp", devices=2)),
    (dict(strategy="pp", devices=2), dict(strategy="zero1", devices=2)),
    (dict(strategy="zero3", devices=2), dict(strategy="dp", devices=4)),
    (dict(strategy="zero2", devices=4), dict(strategy="zero3", devices=2)),
    (dict(strategy="layer", devices=4), dict(strategy="single", devices=1)),
])
def test_convert_between_strategies(tmp_path, src, dst):
    a = TrainConfig(MLP, global_batch=8, steps=3, **src)
    b = TrainConfig(MLP, global_batch=8, steps=3, **dst)
    _trained(a, tmp_path / "a")
    path = convert_checkpoint(tmp_path / "a", tmp_path / "b", b.resolved())
    src_ck, dst_ck = Checkpoint.open(tmp_path / "a"), Checkpoint.open(path)
    assert dst_ck.config.strategy == dst["strategy"] and dst_ck.step == src_ck.step == 3  # saved after the last step
    for name in state_shapes(a):
        assert np.array_equal(src_ck.array(name), dst_ck.array(name)), name
    resumed = train_resilient(b, resume_from=path)
    assert resumed.train.max_rel_weight_diff_vs_single < 1e-9


def test_tensor_parallel_checkpoint_resumes_on_a_pipeline(tmp_path):
    """Save tp=4 x dp=2 on 8 devices and resume on pp=2 x dp=2 on 4 devices: identical weights."""
    cfg = TrainConfig(GPTConfig(layers=2, hidden=8, heads=4, seq_len=4, vocab=8), strategy="hybrid", devices=8,
                      tp=4, dp=2, pp=1, global_batch=4, steps=3)
    _trained(cfg, tmp_path / "tp")
    target = TrainConfig(cfg.model, strategy="pp", devices=4, dp=2, pp=2, global_batch=4, steps=3)
    path = convert_checkpoint(tmp_path / "tp", tmp_path / "pp", target.resolved())
    src, dst = Checkpoint.open(tmp_path / "tp"), Checkpoint.open(path)
    assert "tensor-parallel" in src.record["tensors"]["param/1/w_qkv"]["layout"]
    for name in state_shapes(cfg):
        assert np.array_equal(src.array(name), dst.array(name)), name
    assert train_resilient(target, resume_from=path).train.max_rel_weight_diff_vs_single < 1e-9


def test_crash_mid_save_keeps_last_good_checkpoint(tmp_path):
    cfg = TrainConfig(MLP, strategy="dp", devices=2, global_batch=8, steps=3)
    compiled = compile_strategy(cfg.resolved())
    rt = LocalRuntime(2)
    rt.load(compiled.initial)
    save_checkpoint(rt, compiled, 1, tmp_path)
    good = Checkpoint.open(tmp_path).arrays()
    rt.load({r: {"param/0/w": np.full((6, 8), 7.0)} for r in range(2)})

    class Crash(Exception):
        pass

    written = []

    def crash_after_three(rel):
        written.append(rel)
        if len(written) == 3:
            raise Crash(rel)

    with pytest.raises(Crash):
        save_checkpoint(rt, compiled, 2, tmp_path, after_file=crash_after_three)
    assert latest_checkpoint(tmp_path).name == "step_00000001"
    after = Checkpoint.open(tmp_path).arrays()
    assert after.keys() == good.keys() and all(np.array_equal(after[k], good[k]) for k in good)
    assert not (tmp_path / "step_00000002").exists()
    written.clear()  # a crash after the strategy file but before the rename: still the old one
    with pytest.raises(Crash):
        save_checkpoint(rt, compiled, 2, tmp_path, after_file=lambda rel: rel == "strategy.json" and (_ for _ in ()).throw(Crash()))
    assert latest_checkpoint(tmp_path).name == "step_00000001"
    save_checkpoint(rt, compiled, 2, tmp_path)  # the next save cleans the leftovers
    assert latest_checkpoint(tmp_path).name == "step_00000002"
    assert not list(tmp_path.glob(".tmp-*"))
    assert np.array_equal(Checkpoint.open(tmp_path).array("param/0/w"), np.full((6, 8), 7.0))


def test_disagreeing_replicas_and_wrong_model_are_refused(tmp_path):
    cfg = TrainConfig(MLP, strategy="dp", devices=2, global_batch=8, steps=1)
    compiled = compile_strategy(cfg.resolved())
    rt = LocalRuntime(2)
    rt.load(compiled.initial)
    rt.load({1: {"param/0/b": np.ones(8)}})
    save_checkpoint(rt, compiled, 0, tmp_path)
    with pytest.raises(ParasimError, match="shards of param/0/b disagree"):
        Checkpoint.open(tmp_path).array("param/0/b")
    other = TrainConfig(MLPConfig(in_dim=5, hidden=8, layers=4, classes=3), strategy="dp", devices=2, global_batch=8)
    with pytest.raises(ParasimError, match="does not fit this model"):
        Checkpoint.open(tmp_path).shards_for(compile_strategy(other.resolved()))
    with pytest.raises(ParasimError, match="no checkpoint at"):
        Checkpoint.open(tmp_path / "nothing")


def test_cli_checkpoint_show_and_convert(tmp_path, capsys):
    assert main(["train", "--model", "mlp", "--in-dim", "6", "--hidden", "8", "--classes", "3", "--strategy", "pp",
                 "--devices", "8", "--dp", "4", "--pp", "2", "--microbatches", "2", "--batch", "16", "--steps", "4",
                 "--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "big"), "--json"]) == 0
    capsys.readouterr()
    assert main(["checkpoint", "convert", str(tmp_path / "big" / "step_00000002"), str(tmp_path / "small"),
                 "--to-strategy", "pp", "--devices", "4", "--dp", "2", "--pp", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step"] == 2 and out["to"] == "pp on 4"
    assert main(["checkpoint", "show", str(tmp_path / "small"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["devices"] == 4 and shown["tensors"]["param/0/w"]["layout"] == "replicated on ranks [0, 1]"
    assert main(["train", "--model", "mlp", "--in-dim", "6", "--hidden", "8", "--classes", "3", "--strategy", "pp",
                 "--devices", "4", "--dp", "2", "--pp", "2", "--microbatches", "2", "--batch", "16", "--steps", "4",
                 "--resume", str(tmp_path / "small"), "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["max_rel_weight_diff_vs_single"] < 1e-9 and len(resumed["losses"]) == 2
    assert main(["checkpoint", "convert", str(tmp_path / "big"), str(tmp_path / "x"), "--to-strategy", "pp",
                 "--devices", "3", "--pp", "2"]) == 2
    assert "do not multiply" in capsys.readouterr().err


@pytest.mark.parametrize("src, dst", [
    (["--strategy", "cp", "--devices", "2"], ["--to-strategy", "dp", "--dp", "2"]),           # cp=2 was carried over
    (["--strategy", "pp", "--devices", "2", "--microbatches", "2"], ["--to-strategy", "layer", "--pp", "2"]),
    (["--strategy", "dp", "--devices", "2"], ["--to-strategy", "hybrid", "--dp", "2", "--cp", "2", "--tp", "2"]),
], ids=["cp-to-dp", "pp-to-layer", "dp-to-hybrid-cp"])
def test_cli_convert_takes_the_degrees_as_train_does(tmp_path, capsys, src, dst):
    """Found converting every strategy into every other: --devices was required even with the degrees
    given, a cp source kept cp=2 for any target, a pipeline's micro-batches went into layer-wise MP."""
    gpt = ["--model", "gpt", "--layers", "2", "--hidden", "8", "--heads", "2", "--seq", "4", "--vocab", "8"]
    assert main(["train", *gpt, *src, "--steps", "2", "--checkpoint-every", "1", "--checkpoint-dir",
                 str(tmp_path / "a")]) == 0
    assert main(["checkpoint", "convert", str(tmp_path / "a"), str(tmp_path / "b"), *dst, "--json"]) == 0
    capsys.readouterr()
    strategy = dst[1]
    assert main(["train", *gpt, "--strategy", strategy, *dst[2:], "--steps", "3", "--resume", str(tmp_path / "b"),
                 "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["matches_single_device"] and len(resumed["losses"]) == 1
