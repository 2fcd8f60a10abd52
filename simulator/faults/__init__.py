"""Fault tolerance: fault injection, distributed checkpoints, recovery, multi-node Ray clusters."""

from .checkpoint import Checkpoint, convert_checkpoint, latest_checkpoint, restore, save_checkpoint
from .inject import Fault, parse_faults, random_faults
from .recovery import ResilientResult, train_resilient

__all__ = ["Checkpoint", "Fault", "ResilientResult", "convert_checkpoint", "latest_checkpoint", "parse_faults",
           "random_faults", "restore", "save_checkpoint", "train_resilient"]
