"""Distributed checkpoints on disk: per-rank .npy shards plus a JSON strategy file, saved atomically.

Layout of a checkpoint directory ROOT:

    ROOT/latest.json                   {"step": k, "dir": "step_00000k"}  (replaced atomically)
    ROOT/step_00000k/strategy.json     config, per tensor: global shape, dtype, layout, shards
    ROOT/step_00000k/rank3/param.0.w.npy   rank 3's shard of param/0/w (np.save, no pickle)

Saving never corrupts the last good checkpoint (the write-then-rename discipline of databases and
of PyTorch DCP / Orbax): everything is written into a hidden temporary directory, each file
itself through a temporary name and `os.replace`; `strategy.json` is written last; only then is
the directory renamed to its own name (step_k, or step_k.<hex> when step k is saved again) and
`latest.json` replaced; superseded copies are deleted only after that, each first renamed to a
hidden `.tmp-drop-*` name so that a crash while deleting leaves no half checkpoint under a step
name. A crash at any point leaves `latest.json` pointing to a complete checkpoint, the old one or
the new one; the next save removes the hidden leftovers. Saves into one ROOT hold an exclusive
lock on ROOT/.lock (fcntl.flock, released by the kernel even on kill -9), so two runs sharing a
checkpoint folder never delete each other's files in progress.
Each shard's size, dtype, shape and SHA-256 are recorded and checked on load, its path must stay
inside the checkpoint (ckpt_files.py); `np.load(allow_pickle=False)`; the strategy file is JSON.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..limits import MAX_CKPT_POINTER_BYTES
from ..parallel.config import MAX_STEPS, TrainConfig
from ..parallel.replicated import Compiled
from ..parallel.strategies import compile_strategy
from .ckpt_files import confined, read_json, read_shard, write_json, write_shard
from .shards import (
    CheckpointShard,
    assemble,
    config_from_json,
    config_to_json,
    describe_layout,
    shard_layouts,
    state_shapes,
    zero_pieces,
)

FORMAT = "parasim-checkpoint/1"
LATEST = "latest.json"
STRATEGY = "strategy.json"
_STEP_DIR = re.compile(r"step_(\d+)(\.[0-9a-f]+)?$")


def _file_of(rank: int, name: str) -> str:
    return f"rank{rank}/{name.replace('/', '.')}.npy"


def _root(root) -> Path:
    """The checkpoint root, created if needed; one line when it cannot be (a file, read-only, /proc)."""
    if root is None or not str(root).strip():
        raise ParasimError("the checkpoint directory needs a name, got an empty string")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ParasimError(f"checkpoint directory {root} is a file, not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ParasimError(f"cannot create checkpoint directory {root}: {e.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ParasimError(f"checkpoint directory {root} is not writable")
    return root


def check_checkpoint_dir(root) -> Path:
    """Refuse up front a checkpoint directory that cannot be written (before any training)."""
    root = _root(root)
    probe = root / f".tmp-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        raise ParasimError(f"cannot write into checkpoint directory {root}: {e.strerror}") from None
    return root


def write_checkpoint(root, step: int, compiled: Compiled, shards: dict[int, dict[str, np.ndarray]],
                     after_file: Callable[[str], None] | None = None, keep_last: int | None = None) -> Path:
    """Write rank -> {name: shard} as checkpoint `step` under `root`; returns its directory.

    The new copy is written completely into a hidden temporary directory, then moved to its own
    name (step_k, or step_k.<hex> when step k is saved again), and only then does `latest.json`
    switch to it (atomically). Older copies are deleted after that switch, so a crash at any point
    leaves `latest.json` pointing at a complete checkpoint (the old or the new one); the next save
    removes the leftovers of a crashed one (never a directory `latest.json` points to).
    keep_last: keep only the N most recently written checkpoints (the latest always among them).
    `after_file(relative path)` is called after each file (tests use it to simulate a crash)."""
    root = _root(root)
    with _locked(root):
        _remove_leftovers(root)
        final = _write(root, step, compiled, shards, after_file)
        prune(root, keep_last)
    return final


@contextlib.contextmanager
def _locked(root: Path):
    """Hold ROOT/.lock exclusively (another run saving into ROOT waits for its save to end)."""
    try:
        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ParasimError(f"cannot write checkpoint lock {root / '.lock'}: {e.strerror}") from None
    try:
        with contextlib.suppress(OSError):     # a file system without locks: save unlocked
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)    # releases the lock


def _remove_leftovers(root: Path) -> None:
    """What a crashed save or delete left: hidden temporary folders and files, and step folders
    without strategy.json that `latest.json` does not point to (a delete interrupted by an older
    version, which removed in place)."""
    current = latest_checkpoint(root)
    stale = [*root.glob(".tmp-*"), *root.glob("*.part-*"),
             *(d for d in root.iterdir() if d.is_dir() and _STEP_DIR.match(d.name) and d != current
               and not (d / STRATEGY).exists())]
    for d in stale:
        shutil.rmtree(d, ignore_errors=True) if d.is_dir() else d.unlink(missing_ok=True)


def _write(root: Path, step: int, compiled: Compiled, shards: dict[int, dict[str, np.ndarray]],
           after_file: Callable[[str], None] | None) -> Path:
    """The new copy, complete under its own name, with `latest.json` pointing at it."""
    layouts = shard_layouts(compiled)
    shapes = state_shapes(compiled.config)
    tmp = root / f".tmp-step_{step:08d}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        tensors = {}
        for name, where in layouts.items():
            records = []
            for s in where:
                rec = write_shard(tmp, _file_of(s.rank, name), shards[s.rank][s.key])
                records.append({**s.to_json(), **rec})
                if after_file:
                    after_file(rec["file"])
            tensors[name] = {"global_shape": list(shapes[name]), "dtype": records[0]["dtype"],
                             "layout": describe_layout(shapes[name], where, zero_pieces(compiled, name)), "shards": records}
        cfg = compiled.config
        record = {"format": FORMAT, "step": int(step), "config": config_to_json(cfg),
                  "devices": cfg.devices, "strategy": cfg.strategy, "mesh": repr(compiled.mesh), "tensors": tensors}
        write_json(tmp / STRATEGY, record)
        if after_file:
            after_file(STRATEGY)
        final = root / f"step_{step:08d}"
        if final.exists():  # the same step saved again (resumed in place, replayed): a new copy beside it
            final = root / f"step_{step:08d}.{uuid.uuid4().hex[:8]}"
        os.replace(tmp, final)
        write_json(root / LATEST, {"step": int(step), "dir": final.name})
    except OSError as e:  # a full disk, a folder that went read-only: no half checkpoint left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise ParasimError(f"cannot write checkpoint step {step} to {root}: {e.strerror or e}") from None
    return final


def prune(root, keep_last: int | None = None) -> list[Path]:
    """Delete superseded copies of the latest step and, with keep_last, all but the N most
    recently written checkpoints. Never the one `latest.json` points to. Returns what was deleted."""
    if keep_last is not None and keep_last < 1:
        raise ParasimError(f"--keep-last must be >= 1 checkpoint, got {keep_last}")
    current = latest_checkpoint(root)
    if current is None:
        return []
    step = int(_STEP_DIR.match(current.name).group(1)) if _STEP_DIR.match(current.name) else None
    others = [d for d in Path(root).iterdir() if d != current and _STEP_DIR.match(d.name) and (d / STRATEGY).exists()]
    drop = [d for d in others if int(_STEP_DIR.match(d.name).group(1)) == step]
    rest = sorted((d for d in others if d not in drop), key=lambda d: (d / STRATEGY).stat().st_mtime, reverse=True)
    if keep_last is not None:
        drop += rest[keep_last - 1:]
    for d in drop:     # hidden first (atomic), then deleted: a crash in between leaves only a .tmp-*
        trash = Path(root) / f".tmp-drop-{d.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(d, trash)
        except OSError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
    return drop


def save_checkpoint(runtime, compiled: Compiled, step: int, root,
                    after_file: Callable[[str], None] | None = None, keep_last: int | None = None) -> Path:
    """Every rank's state shards, read from the runtime, saved as checkpoint `step`."""
    layouts = shard_layouts(compiled)
    names: dict[int, list[str]] = {}
    for name, where in layouts.items():
        for s in where:
            names.setdefault(s.rank, []).append(s.key)
    shards = {r: runtime.fetch(r, ns) for r, ns in names.items()}
    return write_checkpoint(root, step, compiled, shards, after_file, keep_last)


def latest_checkpoint(root) -> Path | None:
    """The directory `latest.json` points to, or None when no checkpoint was completed."""
    path = Path(root) / LATEST
    if not path.exists():
        return None
    rec = read_json(path, "checkpoint pointer", MAX_CKPT_POINTER_BYTES)
    d = confined(Path(root), rec.get("dir"))
    return d if (d / STRATEGY).exists() else None


@dataclass
class Checkpoint:
    """A saved checkpoint: its step, the config it was saved with, and its shards on disk."""

    path: Path
    step: int
    config: TrainConfig
    record: dict

    @classmethod
    def open(cls, path) -> "Checkpoint":
        """`path`: a step_k directory, or a root (then its latest checkpoint)."""
        path = Path(path)
        if not path.is_dir():
            raise ParasimError(f"no checkpoint at {path}: {'a file' if path.exists() else 'it does not exist'}, "
                               "not a checkpoint folder")
        if not (path / STRATEGY).exists():
            latest = latest_checkpoint(path)
            if latest is None:
                raise ParasimError(f"no checkpoint at {path}: neither {STRATEGY} nor a {LATEST} "
                                   f"pointing to a complete checkpoint")
            path = latest
        record = read_json(path / STRATEGY, "strategy file")
        if record.get("format") != FORMAT:
            raise ParasimError(f"{path / STRATEGY} has format {record.get('format')!r}, expected {FORMAT!r}")
        try:
            step = record["step"]
            if isinstance(step, bool) or not isinstance(step, int):
                raise ParasimError(f"{path / STRATEGY} records step {step!r}, not a whole number: the file is corrupted")
            ck = cls(path, step, config_from_json(record["config"]), record)
            for name, t in record["tensors"].items():
                ck.shards(name), tuple(int(x) for x in t["global_shape"])
            _check_metadata(ck)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, ParasimError):
                raise
            raise ParasimError(f"{path / STRATEGY} is not a valid strategy file ({type(e).__name__}: {e})") from None
        return ck

    def check_continues(self, cfg: TrainConfig) -> None:
        """Refuse, before any work, to resume `cfg` from this checkpoint when it was written by a
        run whose math differs (model, seed, batch, optimizer, learning rate, gradient mean or
        wire dtype): it would continue that run, not this one. The layout (strategy, devices,
        degrees, schedule) may differ: that is resharding. A step past the run's end is refused."""
        cfg = cfg.resolved()
        mine, theirs = config_to_json(cfg), config_to_json(self.config)
        for name in RUN_MATH:
            if mine[name] != theirs[name]:
                said = "model" if name == "model" else f"{name} {theirs[name]!r}"
                raise ParasimError(f"checkpoint {self.path} was written by another run: its {said} differs from this "
                                   f"run's ({mine[name]!r}); resuming it would continue that run, not this one "
                                   f"(give the same settings, or start afresh)")
        if self.step > cfg.steps:
            raise ParasimError(f"checkpoint {self.path} is at step {self.step}, past the end of this run "
                               f"({cfg.steps} steps): give --steps >= {self.step}")
        counter = self.array("opt/step")
        if counter.shape != () or counter != self.step:
            raise ParasimError(f"checkpoint {self.path} records step {self.step} but its optimizer's step counter "
                               f"is {counter.tolist()}: the files disagree")

    def optimizer_states(self) -> list[dict]:
        """The optimizer state as one device holds it: per layer {parameter: {state name: array}}."""
        out: list[dict] = []
        for name in self.record["tensors"]:
            parts = name.split("/")
            if parts[0] == "opt" and len(parts) == 4:
                li, n, s = int(parts[1]), parts[2], parts[3]
                out.extend({} for _ in range(li + 1 - len(out)))
                out[li].setdefault(n, {})[s] = self.array(name)
        return out

    def shards(self, name: str) -> list[CheckpointShard]:
        return [CheckpointShard.from_json(name, d) for d in self.record["tensors"][name]["shards"]]

    def array(self, name: str) -> np.ndarray:
        """The global tensor, assembled from the shards (each checked: size, SHA-256, dtype, shape;
        replicas checked bit for bit; NaN or inf refused: a checkpoint must not carry a divergence)."""
        if name not in self.record["tensors"]:
            raise ParasimError(f"checkpoint {self.path} has no tensor {name!r}")
        t = self.record["tensors"][name]
        pieces = [(s, read_shard(self.path, d)) for s, d in zip(self.shards(name), t["shards"])]
        for s, block in pieces:
            if block.dtype.kind in "fc" and not np.isfinite(block).all():
                raise ParasimError(f"checkpoint {self.path}: rank {s.rank}'s shard of {name} contains NaN or inf; "
                                   "resuming from it would not match one device")
        return assemble(name, tuple(t["global_shape"]), pieces)

    def arrays(self) -> dict[str, np.ndarray]:
        return {n: self.array(n) for n in self.record["tensors"]}

    def shards_for(self, compiled: Compiled) -> dict[int, dict[str, np.ndarray]]:
        """rank -> {key: shard} of this checkpoint re-cut for `compiled` (any device count and
        strategy, same model and optimizer)."""
        want = state_shapes(compiled.config)
        have = {n: tuple(t["global_shape"]) for n, t in self.record["tensors"].items()}
        if want != have:
            diff = sorted(set(want.items()) ^ set(have.items()))[:1]
            raise ParasimError(f"checkpoint {self.path} does not fit this model/optimizer: "
                               f"state tensors differ (first: {diff})")
        out: dict[int, dict[str, np.ndarray]] = {}
        for name, where in shard_layouts(compiled).items():
            value = self.array(name)
            for s in where:
                out.setdefault(s.rank, {})[s.key] = s.cut(value)
        return out


# the settings that change a run's math (the rest only lay it out): a checkpoint continues a run only if equal
RUN_MATH = ("model", "seed", "global_batch", "optimizer", "lr", "gradients_mean", "grad_dtype")


def _check_metadata(ck: Checkpoint) -> None:
    """Refuse a strategy file whose numbers do not fit together, before any shard is read: its
    step (0 <= step <= MAX_STEPS, equal to its folder's and latest.json's), its
    tensors (exactly the model's and optimizer's, at their shapes) and every shard (a rank of
    the run, a block inside the tensor)."""
    where, cfg = ck.path / STRATEGY, ck.config.resolved()
    if not 0 <= ck.step <= MAX_STEPS:
        raise ParasimError(f"{where} records step {ck.step}, outside 0..{MAX_STEPS} (the steps a run may train): "
                           "the file is corrupted")
    named = _STEP_DIR.match(ck.path.name)
    if named and int(named.group(1)) != ck.step:
        raise ParasimError(f"{where} records step {ck.step} in folder {ck.path.name}: the file is corrupted")
    pointer = ck.path.parent / LATEST
    if pointer.exists() and latest_checkpoint(ck.path.parent) == ck.path:
        said = read_json(pointer, "checkpoint pointer", MAX_CKPT_POINTER_BYTES).get("step")
        if said != ck.step:
            raise ParasimError(f"{pointer} says step {said!r}, {where} records step {ck.step}: the files disagree")
    want = state_shapes(cfg)
    have = {n: tuple(t["global_shape"]) for n, t in ck.record["tensors"].items()}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()), key=str)[:1]
        raise ParasimError(f"{where} lists state tensors that do not fit its own model/optimizer (first: {diff}): "
                           "the file is corrupted")
    for name, shape in want.items():
        size = int(np.prod(shape, dtype=np.int64))
        for s in ck.shards(name):
            inside = (s.box is not None and len(s.box) == len(shape)
                      and all(0 <= a <= b <= n for (a, b), n in zip(s.box, shape))) \
                or (s.flat is not None and 0 <= s.flat[0] <= s.flat[1] <= size) \
                or (s.index is not None and all(0 <= i < size for i in s.index)
                    and len(s.index) == int(np.prod(s.shape, dtype=np.int64)))
            if not 0 <= s.rank < cfg.devices or not inside:
                raise ParasimError(f"{where}: the shard of {name} on rank {s.rank} is not a block of a "
                                   f"{shape} tensor on one of {cfg.devices} devices: the file is corrupted")


def restore(runtime, compiled: Compiled, ckpt: Checkpoint) -> int:
    """Clear every device and load the checkpoint's state re-cut for `compiled`; returns its step."""
    shards = ckpt.shards_for(compiled)
    runtime.clear()
    load = {r: {**{n: v for n, v in compiled.initial[r].items() if n not in shards.get(r, {})},
                **shards.get(r, {})} for r in compiled.initial}
    runtime.load(load)
    return ckpt.step


def convert_checkpoint(src, dst, target: TrainConfig) -> Path:
    """Reshard a saved checkpoint for another strategy / device count (MindSpore's
    transform_checkpoints): assemble each global tensor, cut it by the target's layouts."""
    ckpt = Checkpoint.open(src)
    compiled = compile_strategy(target.resolved())
    return write_checkpoint(dst, ckpt.step, compiled, ckpt.shards_for(compiled))
