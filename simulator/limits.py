"""The bounds on work parasim accepts: one home, consumed by the Python API, the CLI and the app.

Every input that sets how much work a run does (devices, layers, micro-batches, bytes, steps,
files) is checked against these numbers before the work starts, and a refusal names the rule and
the numbers (`check`). The bounds are generous for an educational simulator on one machine (the
2-core, 24 GiB reference machine) and small enough that no accepted input runs for minutes or
takes gigabytes before it is refused.

Waiting bounds of the Ray runtime live here too: every wait on an actor is finite, also when the
caller gives no `timeout_s`.
"""

from __future__ import annotations

import os
import stat

from .errors import ParasimError

# ---- waits on the Ray runtime (simulator/runtime/ray_runtime.py) ------------------------------
RAY_WAIT_S = 300.0       # the bounded wait of one run (a step) when no timeout_s is given
FAILURE_GRACE_S = 5.0    # after a failure: how long the other calls may take to stop before their actors are killed
ACTOR_START_S = 120.0    # a new actor's first answer (actors start slowly on a busy machine)


def check(what: str, value, bound, unit: str = "", rule: str = "") -> None:
    """Refuse `value` above `bound`: one line naming the rule and both numbers."""
    if value > bound:
        why = f" ({rule})" if rule else ""
        raise ParasimError(f"{what} of {value:,}{unit} is more than the {bound:,}{unit} parasim accepts{why}")

# ---- meshes (simulator/mesh.py) ------------------------------------------------------------
MAX_MESH_DEVICES = 1 << 20       # a mesh lists every device id (about 100 bytes each)

# ---- collective plans (simulator/collectives/algorithms.py) --------------------------------
MAX_TRANSFERS = 2_000_000        # chunk transfers of one plan (Transfer objects, ~200 B each; ~8 s to build at the bound)

# ---- real runs (TrainConfig, `parasim train`, `parasim collective`): numpy on emulated devices ---
MAX_STEPS = 100_000              # training steps of one run
MAX_BATCH = 1_000_000            # samples of one global batch
MAX_RUN_DEVICES = 256            # emulated devices of a real run (a ring moves 2n(n-1) chunks)
MAX_LAYERS = 256                 # the model's layers (each is several instructions per device and micro-batch)
MAX_PARAMS = 20_000_000          # parameter elements of the model (x4 with gradient and Adam's m, v: 640 MB)
MAX_ACTIVATIONS = 200_000_000    # batch x the widest activation of a layer x layers, in elements (1.6 GB)
MAX_COLLECTIVE_BYTES = 2_000_000_000  # a real collective's inputs plus outputs over all devices
MAX_SCHEDULE_SLOTS = 1_000_000   # a pipeline schedule's stages x micro-batches x chunks (its actions)
MAX_SEARCH_GPUS = 131_072        # `parasim search` enumerates the factorisations of this many devices (Llama 3: 24,576)
MAX_EXPLAIN_DEVICES = 65_536     # `parasim explain` lists the device groups of a mesh of this many devices

# ---- checkpoint files (simulator/faults/ckpt_files.py): checked with fstat before reading -------
MAX_CKPT_POINTER_BYTES = 64 * 1024     # latest.json: {"step": k, "dir": "step_k"}
MAX_CKPT_JSON_BYTES = 256 * 2**20      # strategy.json (indexed shards list element positions)
MAX_CKPT_SHARD_BYTES = 4 * 2**30       # one .npy shard (its record's size is checked too)
MAX_SCHEDULE_FILE_BYTES = 1 * 2**20     # a hand-written pipeline schedule (--schedule-file)


def read_bounded(path, what: str, max_bytes: int, kind: str = "the file", nbytes: int | None = None) -> bytes:
    """The bytes of `path` if it is a regular file of at most `max_bytes` (and exactly `nbytes`
    when given), checked before reading; else one line. Never blocks on a FIFO or device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ParasimError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ParasimError(f"{what} {path} is a folder, not a file") from None
    except OSError as e:
        raise ParasimError(f"cannot read {what} {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ParasimError(f"{what} {path} is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise ParasimError(f"{what} {path} is not a regular file (a FIFO, socket or device): refused")
        if st.st_size > max_bytes:
            raise ParasimError(f"{what} {path} has {st.st_size:,} bytes, more than the {max_bytes:,} {kind} may have: "
                               "refused before reading")
        if nbytes is not None and st.st_size != nbytes:
            raise ParasimError(f"{what} {path} has {st.st_size} bytes, {nbytes} were saved: "
                               "the file is truncated or replaced")
        try:
            data = f.read(st.st_size + 1)
        except OSError as e:
            raise ParasimError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(data) != st.st_size:
        raise ParasimError(f"{what} {path} changed size while it was read: refused")
    return data
