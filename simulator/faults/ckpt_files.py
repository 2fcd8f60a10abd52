"""The files of a checkpoint: atomic writes, checked shards, paths confined to the checkpoint.

- Every file is written under a temporary name and moved into place with `os.replace` (atomic on
  POSIX against a crash of the process: a reader sees the old file or the new one, never half).
  The JSON files are fsync'ed before the rename.
- A shard is saved with `np.save(allow_pickle=False)`; its record keeps the file's size in bytes,
  dtype, shape and SHA-256. Loading re-checks all four before trusting a byte (a flipped bit, a
  truncated or empty file, a float32 file in place of a float64 one, a pickled object array are
  refused with one line naming the file).
- A file named by a strategy file must stay inside the checkpoint directory: absolute paths and
  '..' are refused (a strategy file is data, not a way to read the rest of the disk).
- Every file is opened without blocking (O_NONBLOCK: a FIFO in a file's place cannot stall the
  open) and read only if it is a regular file of at most the bound for its kind
  (limits.MAX_CKPT_POINTER_BYTES, MAX_CKPT_JSON_BYTES, MAX_CKPT_SHARD_BYTES; a shard's size is also its
  record's), checked with fstat before a byte is read. JSON nested past the parser's depth is
  refused in one line (Python's reader raises RecursionError).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import uuid
from pathlib import Path, PurePosixPath
from typing import Callable

import numpy as np

from ..errors import ParasimError
from ..limits import MAX_CKPT_JSON_BYTES, MAX_CKPT_SHARD_BYTES, read_bounded


def atomic_write(path: Path, data: bytes, sync: bool = False) -> None:
    part = path.with_name(path.name + f".part-{uuid.uuid4().hex[:8]}")
    try:
        with open(part, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=1).encode(), sync=True)


def read_json(path: Path, what: str, max_bytes: int = MAX_CKPT_JSON_BYTES) -> dict:
    """A JSON object from `path` (a regular file of at most max_bytes), or one line saying why it
    cannot be one."""
    data = read_bounded(path, what, max_bytes, "a checkpoint's file")
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ParasimError(f"{what} {path} is nested deeper than a JSON reader follows: the file is corrupted") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ParasimError(f"{what} {path} is not valid JSON ({e}): the file is corrupted") from None
    if not isinstance(obj, dict):
        raise ParasimError(f"{what} {path} holds a {type(obj).__name__}, not a JSON object: the file is corrupted")
    return obj


def shard_bytes(block: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(block), allow_pickle=False)  # (ascontiguousarray would make 0-d 1-d)
    return buf.getvalue()


def write_shard(directory: Path, rel: str, block: np.ndarray) -> dict:
    """Save `block` as directory/rel; returns its record {file, nbytes, dtype, shape, sha256}."""
    block = np.asarray(block)
    data = shard_bytes(block)
    (directory / rel).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / rel, data)
    return {"file": rel, "nbytes": len(data), "dtype": str(block.dtype), "shape": list(np.shape(block)),
            "sha256": hashlib.sha256(data).hexdigest()}


def confined(directory: Path, rel) -> Path:
    """directory/rel, refusing a path that leaves `directory` (absolute, '..', a symlink out)."""
    if not isinstance(rel, str) or not rel or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts \
            or "\\" in rel:
        raise ParasimError(f"checkpoint {directory} names file {rel!r}, which is not a relative path inside it")
    path = directory / rel
    base = directory.resolve()
    if base not in path.resolve().parents:
        raise ParasimError(f"checkpoint {directory} names file {rel!r}, which resolves outside it")
    return path


def read_shard(directory: Path, entry: dict, check: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
    """The array of one shard record, after checking its size, SHA-256 (when recorded), dtype and shape."""
    path = confined(directory, entry.get("file"))
    nbytes = entry.get("nbytes")
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
        raise ParasimError(f"checkpoint shard {path}: its record's size {nbytes!r} is not a byte count")
    if not path.exists() and not path.is_symlink():
        raise ParasimError(f"checkpoint shard {path} is missing")
    data = read_bounded(path, "checkpoint shard", MAX_CKPT_SHARD_BYTES, "a checkpoint's file", nbytes)
    if "sha256" in entry and hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise ParasimError(f"checkpoint shard {path} fails its SHA-256 check: the file was changed after saving")
    try:
        value = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ParasimError(f"checkpoint shard {path} is not a plain .npy array ({e})") from None
    if "dtype" in entry and str(value.dtype) != entry["dtype"]:
        raise ParasimError(f"checkpoint shard {path} holds {value.dtype}, {entry['dtype']} was saved")
    if "shape" in entry and list(value.shape) != list(entry["shape"]):
        raise ParasimError(f"checkpoint shard {path} has shape {value.shape}, {tuple(entry['shape'])} was saved")
    return value
