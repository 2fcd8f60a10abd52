"""Distributed checkpoints on disk: per-rank .npy shards plus a JSON strategy file, saved atomically.

Layout of a checkpoint directory ROOT:

    ROOT/latest.json                   {"step": k, "dir": "step_00000k"}  (replaced atomically)
    ROOT/step_00000k/strategy.json     config, per tensor: global shape, dtype, layout, shards
    ROOT/step_00000k/rank3/param.0.w.npy   rank 3's shard of param/0/w (np.save, no pickle)

Saving never corrupts the last good checkpoint (the write-then-rename discipline of databases and
of PyTorch DCP / Orbax): everything is written into a hidden temporary directory, each file
itself through a temporary name and `os.replace`; `strategy.json` is written last; only then is
the directory renamed to step_k and `latest.json` replaced. A crash at any point leaves either
the old `latest.json` (pointing to a complete checkpoint) or the new one.
Loading reads with `np.load(allow_pickle=False)`; the strategy file is plain JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..parallel.config import TrainConfig
from ..parallel.replicated import Compiled
from ..parallel.strategies import compile_strategy
from .shards import (
    CheckpointShard,
    assemble,
    config_from_json,
    config_to_json,
    describe_layout,
    shard_layouts,
    state_shapes,
)

FORMAT = "parasim-checkpoint/1"
LATEST = "latest.json"
STRATEGY = "strategy.json"


def _file_of(rank: int, name: str) -> str:
    return f"rank{rank}/{name.replace('/', '.')}.npy"


def _atomic_write(path: Path, write: Callable) -> None:
    part = path.with_name(path.name + f".part-{uuid.uuid4().hex[:8]}")
    with open(part, "wb") as f:
        write(f)
    os.replace(part, path)  # atomic on POSIX: readers see the old file or the new one, never half


def _write_json(path: Path, obj) -> None:
    _atomic_write(path, lambda f: f.write(json.dumps(obj, indent=1).encode()))


def write_checkpoint(root, step: int, compiled: Compiled, shards: dict[int, dict[str, np.ndarray]],
                     after_file: Callable[[str], None] | None = None) -> Path:
    """Write rank -> {name: shard} as checkpoint `step` under `root`; returns its directory.
    `after_file(relative path)` is called after each file (tests use it to simulate a crash)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a crashed save
        shutil.rmtree(stale, ignore_errors=True)
    layouts = shard_layouts(compiled)
    shapes = state_shapes(compiled.config)
    tmp = root / f".tmp-step_{step:08d}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    tensors = {}
    for name, where in layouts.items():
        dtype = None
        for s in where:
            block = np.ascontiguousarray(shards[s.rank][name])
            dtype = str(block.dtype)
            rel = _file_of(s.rank, name)
            (tmp / rel).parent.mkdir(exist_ok=True)
            _atomic_write(tmp / rel, lambda f, b=block: np.save(f, b, allow_pickle=False))
            if after_file:
                after_file(rel)
        tensors[name] = {"global_shape": list(shapes[name]), "dtype": dtype,
                         "layout": describe_layout(shapes[name], where),
                         "shards": [{**s.to_json(), "file": _file_of(s.rank, name)} for s in where]}
    cfg = compiled.config
    record = {"format": FORMAT, "step": int(step), "config": config_to_json(cfg),
              "devices": cfg.devices, "strategy": cfg.strategy, "mesh": repr(compiled.mesh), "tensors": tensors}
    _write_json(tmp / STRATEGY, record)
    if after_file:
        after_file(STRATEGY)
    final = root / f"step_{step:08d}"
    if final.exists():  # the same step saved again (after a replay): swap it out
        old = root / f".tmp-old-{uuid.uuid4().hex[:8]}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _write_json(root / LATEST, {"step": int(step), "dir": final.name})
    return final


def save_checkpoint(runtime, compiled: Compiled, step: int, root,
                    after_file: Callable[[str], None] | None = None) -> Path:
    """Every rank's state shards, read from the runtime, saved as checkpoint `step`."""
    layouts = shard_layouts(compiled)
    names: dict[int, list[str]] = {}
    for name, where in layouts.items():
        for s in where:
            names.setdefault(s.rank, []).append(name)
    shards = {r: runtime.fetch(r, ns) for r, ns in names.items()}
    return write_checkpoint(root, step, compiled, shards, after_file)


def latest_checkpoint(root) -> Path | None:
    """The directory `latest.json` points to, or None when no checkpoint was completed."""
    path = Path(root) / LATEST
    if not path.exists():
        return None
    d = Path(root) / json.loads(path.read_text())["dir"]
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
        if not (path / STRATEGY).exists():
            latest = latest_checkpoint(path)
            if latest is None:
                raise ParasimError(f"no checkpoint at {path}: neither {STRATEGY} nor a {LATEST} "
                                   f"pointing to a complete checkpoint")
            path = latest
        record = json.loads((path / STRATEGY).read_text())
        if record.get("format") != FORMAT:
            raise ParasimError(f"{path / STRATEGY} has format {record.get('format')!r}, expected {FORMAT!r}")
        return cls(path, int(record["step"]), config_from_json(record["config"]), record)

    def shards(self, name: str) -> list[CheckpointShard]:
        return [CheckpointShard.from_json(name, d) for d in self.record["tensors"][name]["shards"]]

    def array(self, name: str) -> np.ndarray:
        """The global tensor, assembled from the shards (replicas checked bit for bit)."""
        if name not in self.record["tensors"]:
            raise ParasimError(f"checkpoint {self.path} has no tensor {name!r}")
        t = self.record["tensors"][name]
        pieces = [(s, np.load(self.path / d["file"], allow_pickle=False))
                  for s, d in zip(self.shards(name), t["shards"])]
        return assemble(name, tuple(t["global_shape"]), pieces)

    def arrays(self) -> dict[str, np.ndarray]:
        return {n: self.array(n) for n in self.record["tensors"]}

    def shards_for(self, compiled: Compiled) -> dict[int, dict[str, np.ndarray]]:
        """rank -> {name: shard} of this checkpoint re-cut for `compiled` (any device count and
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
                out.setdefault(s.rank, {})[name] = s.cut(value)
        return out


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
