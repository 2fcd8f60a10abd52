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

# ---- checkpoint files (simulator/faults/ckpt_files.py): checked with fstat before reading -------
MAX_CKPT_POINTER_BYTES = 64 * 1024     # latest.json: {"step": k, "dir": "step_k"}
MAX_CKPT_JSON_BYTES = 256 * 2**20      # strategy.json (indexed shards list element positions)
MAX_CKPT_SHARD_BYTES = 4 * 2**30       # one .npy shard (its record's size is checked too)
