"""Checkpoints under crashes and tampering: atomic at every os.replace / rmtree, every shard checked
(size, SHA-256, dtype, shape), paths confined, bad folders refused in one line, --keep-last, MoE."""

import hashlib
import io
import json
import os
import shutil
import threading

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.faults import Checkpoint, latest_checkpoint, save_checkpoint, train_resilient
from simulator.models import MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.experts import MoEGPTConfig
from simulator.parallel.strategies import compile_strategy
from simulator.runtime.local import LocalRuntime

MLP = MLPConfig(in_dim=6, hidden=8, layers=2, classes=3)
CFG = TrainConfig(MLP, strategy="dp", devices=2, global_batch=8, steps=2).resolved()
CLI_MLP = ["train", "--model", "mlp", "--in-dim", "6", "--hidden", "8", "--layers", "2", "--classes", "3",
           "--strategy", "dp", "--devices", "2", "--json"]


class Crash(BaseException):
    pass


def _runtime(value):
    compiled = compile_strategy(CFG)
    rt = LocalRuntime(2)
    rt.load(compiled.initial)
    rt.load({r: {"param/0/w": np.full((6, 8), value)} for r in range(2)})
    return rt, compiled


def _crash_at(monkeypatch, target, name, k):
    """Make the k-th call of target.name raise Crash (a kill at that instant)."""
    real, calls = getattr(target, name), [0]

    def wrapped(*a, **kw):
        calls[0] += 1
        if calls[0] == k:
            raise Crash(f"{name} #{k}")
        return real(*a, **kw)

    monkeypatch.setattr(target, name, wrapped)
    return calls


@pytest.mark.parametrize("same_step", [True, False], ids=["resave-in-place", "next-step"])
def test_a_crash_at_any_replace_or_delete_leaves_a_complete_latest(tmp_path, monkeypatch, same_step):
    old_rt, compiled = _runtime(1.0)
    save_checkpoint(old_rt, compiled, 3, tmp_path)
    new_rt, _ = _runtime(2.0)
    new_step = 3 if same_step else 4
    with monkeypatch.context() as m:  # count the calls of one clean save
        replaces = _crash_at(m, os, "replace", 0)
        deletes = _crash_at(m, shutil, "rmtree", 0)
        save_checkpoint(new_rt, compiled, new_step, tmp_path / "probe")
    assert replaces[0] > 3
    for name, total in (("replace", replaces[0]), ("rmtree", deletes[0])):
        for k in range(1, total + 1):
            root = tmp_path / f"{name}{k}"
            shutil.copytree(tmp_path, root, ignore=shutil.ignore_patterns("probe", "replace*", "rmtree*"))
            with monkeypatch.context() as m:
                _crash_at(m, os if name == "replace" else shutil, name, k)
                try:
                    save_checkpoint(new_rt, compiled, new_step, root)
                except Crash:
                    pass
            w = Checkpoint.open(root).array("param/0/w")  # latest.json always names a complete copy
            assert np.array_equal(w, np.full((6, 8), 1.0)) or np.array_equal(w, np.full((6, 8), 2.0)), (name, k)
            save_checkpoint(new_rt, compiled, new_step, root)  # the next save cleans up and succeeds
            assert np.array_equal(Checkpoint.open(root).array("param/0/w"), np.full((6, 8), 2.0))
            assert not list(root.glob(".tmp-*")) and not list(root.glob("*.part-*"))
            assert len(list(root.glob(f"step_{new_step:08d}*"))) == 1  # superseded copies are gone


def test_a_crash_halfway_through_deleting_an_old_checkpoint_leaves_no_half_step(tmp_path, monkeypatch):
    """kill -9 while --keep-last deletes an old checkpoint left a step folder without its strategy
    file, which no later save recognised or removed (found by killing real runs)."""
    rt, compiled = _runtime(1.0)
    for step in (1, 2):
        save_checkpoint(rt, compiled, step, tmp_path, keep_last=2)
    real = shutil.rmtree

    def half_delete(path, *a, **kw):     # the strategy file goes first, then the process dies
        os.remove(os.path.join(path, "strategy.json"))
        raise Crash(str(path))

    with monkeypatch.context() as m:
        m.setattr(shutil, "rmtree", half_delete)
        with pytest.raises(Crash):
            save_checkpoint(rt, compiled, 3, tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00000002", "step_00000003"]
    assert real is shutil.rmtree
    (tmp_path / "step_00000000").mkdir()         # the same leftover, as an older version left it
    (tmp_path / "step_00000000" / "rank0").mkdir()
    save_checkpoint(rt, compiled, 4, tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".lock") == \
        ["latest.json", "step_00000003", "step_00000004"]


def test_two_runs_saving_into_one_folder_do_not_delete_each_others_files(tmp_path):
    """Each save removes the temporary folders a crashed save left; without the folder's lock it
    removed another live run's save in progress ("cannot write checkpoint ...: No such file")."""
    errors = []

    def saver(value):
        rt, compiled = _runtime(value)
        try:
            for step in range(12):
                save_checkpoint(rt, compiled, step, tmp_path, keep_last=3)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=saver, args=(v,)) for v in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    w = Checkpoint.open(tmp_path).array("param/0/w")
    assert np.array_equal(w, np.full((6, 8), 1.0)) or np.array_equal(w, np.full((6, 8), 2.0))
    assert not list(tmp_path.glob(".tmp-*")) and len(list(tmp_path.glob("step_*"))) == 3


def _saved(tmp_path):
    rt, compiled = _runtime(1.0)
    path = save_checkpoint(rt, compiled, 1, tmp_path)
    record = json.loads((path / "strategy.json").read_text())
    return path, record


def _rewrite(path, record):
    (path / "strategy.json").write_text(json.dumps(record))


def test_every_shard_is_checked(tmp_path):
    path, record = _saved(tmp_path)
    entry = record["tensors"]["param/0/w"]["shards"][0]
    assert set(entry) >= {"file", "nbytes", "dtype", "shape", "sha256"}
    f = path / entry["file"]
    good = f.read_bytes()
    flipped = bytearray(good)
    flipped[-1] ^= 1
    for data, msg in ((bytes(flipped), "SHA-256"), (good[:-8], "truncated"), (b"", "truncated")):
        f.write_bytes(data)
        with pytest.raises(ParasimError, match=msg):
            Checkpoint.open(tmp_path).array("param/0/w")
    f.unlink()
    with pytest.raises(ParasimError, match="missing"):
        Checkpoint.open(tmp_path).array("param/0/w")
    # a float32 file or a pickled array, even with a matching checksum (an old or hand-made record)
    for arr, kw, msg in ((np.ones((6, 8), np.float32), {}, "holds float32"),
                         (np.array([{"x": 1}], dtype=object), {"allow_pickle": True}, "not a plain .npy")):
        buf = io.BytesIO()
        np.save(buf, arr, **kw)
        f.write_bytes(buf.getvalue())
        entry.update(nbytes=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest())
        _rewrite(path, record)
        with pytest.raises(ParasimError, match=msg):
            Checkpoint.open(tmp_path).array("param/0/w")


def test_a_planted_nan_is_refused_even_with_a_fresh_checksum(tmp_path):
    path, record = _saved(tmp_path)
    entry = record["tensors"]["param/0/w"]["shards"][1]
    bad = np.full((6, 8), 1.0)
    bad[2, 3] = np.nan
    buf = io.BytesIO()
    np.save(buf, bad)
    (path / entry["file"]).write_bytes(buf.getvalue())
    entry.update(nbytes=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    _rewrite(path, record)
    with pytest.raises(ParasimError, match="NaN or inf"):
        Checkpoint.open(tmp_path).array("param/0/w")


@pytest.mark.parametrize("bad", ["../../../outside.npy", "/etc/passwd", "rank0/../../x.npy", ""])
def test_shard_paths_stay_inside_the_checkpoint(tmp_path, bad):
    path, record = _saved(tmp_path / "ck")
    (tmp_path / "outside.npy").write_bytes(b"")
    record["tensors"]["param/0/w"]["shards"][0]["file"] = bad
    _rewrite(path, record)
    with pytest.raises(ParasimError, match="inside it|outside it"):
        Checkpoint.open(tmp_path / "ck").array("param/0/w")


def test_corrupted_pointer_and_strategy_files_are_one_line(tmp_path):
    path, record = _saved(tmp_path)
    (tmp_path / "latest.json").write_text('{"step": 1, "dir": "../elsewhere"}')
    with pytest.raises(ParasimError, match="not a relative path inside it"):
        Checkpoint.open(tmp_path)
    (tmp_path / "latest.json").write_text("{not json")
    with pytest.raises(ParasimError, match="not valid JSON"):
        Checkpoint.open(tmp_path)
    for text, msg in (("[]", "not a JSON object"), ("", "not valid JSON"),
                      (json.dumps({**record, "config": {"model": {"kind": "GPTConfig", "x": 1}}}), "unknown fields"),
                      (json.dumps({**record, "tensors": {"a": {}}}), "not a valid strategy file")):
        (path / "strategy.json").write_text(text)
        with pytest.raises(ParasimError, match=msg):
            Checkpoint.open(path)


def test_bad_checkpoint_folders_fail_up_front_in_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    cases = [(str(tmp_path / "file"), "is a file"), ("", "needs a name"), ("/proc/parasim", "cannot create")]
    if not os.access(ro, os.W_OK):  # root may write anywhere
        cases.append((str(ro), "not writable"))
    for path, msg in cases:
        assert main([*CLI_MLP, "--checkpoint-dir", path]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1
    for path in (str(tmp_path / "file"), str(tmp_path / "nothing")):
        assert main([*CLI_MLP, "--resume", path]) == 2
        assert "no checkpoint at" in capsys.readouterr().err


def test_keep_last_prunes_old_checkpoints(tmp_path, capsys):
    assert main([*CLI_MLP, "--steps", "5", "--checkpoint-every", "1", "--checkpoint-dir", str(tmp_path),
                 "--keep-last", "2"]) == 0
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00000004", "step_00000005"]
    assert latest_checkpoint(tmp_path).name == "step_00000005"
    assert main([*CLI_MLP, "--keep-last", "0", "--checkpoint-dir", str(tmp_path)]) == 2
    assert main([*CLI_MLP, "--keep-last", "2"]) == 2


def test_moe_expert_parallel_checkpoints_are_readable_convertible_resumable(tmp_path, capsys):
    moe = MoEGPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8, experts=4, top_k=1)
    cfg = TrainConfig(moe, strategy="ep", devices=2, ep=2, global_batch=4, steps=3)
    r = train_resilient(cfg, checkpoint_every=1, checkpoint_dir=tmp_path / "ep",
                        faults=__import__("simulator.faults", fromlist=["parse_faults"]).parse_faults("1@2"))
    assert r.faults_recovered == 1 and r.train.check_failure() is None
    assert main(["checkpoint", "show", str(tmp_path / "ep"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["strategy"] == "ep" and any("blocks" in t["layout"] for t in shown["tensors"].values())
    assert main(["checkpoint", "convert", str(tmp_path / "ep"), str(tmp_path / "dp"), "--to-strategy", "dp",
                 "--devices", "2"]) == 0
    for target in (TrainConfig(moe, strategy="dp", devices=2, global_batch=4, steps=4),
                   TrainConfig(moe, strategy="ep", devices=4, ep=2, global_batch=4, steps=4)):
        src = tmp_path / ("dp" if target.strategy == "dp" else "ep")
        resumed = train_resilient(target, resume_from=src)
        assert resumed.train.check_failure() is None and len(resumed.train.losses) == 1
