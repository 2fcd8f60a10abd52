"""Synthetic, learnable data sets generated in code; deterministic given (seed, step).

GPT: "modular counting". Each sequence starts at a random token x0 and advances by a random
stride k in {1, 2, 3}: x_t = (x0 + k t) mod V. The model predicts x_{t+1} from x_0..x_t; after two
tokens the stride is visible, so the loss can fall from ln V towards 0.

MLP: Gaussian clusters. `classes` centres drawn once from the seed (N(0, 1) per feature, so their
distance grows with in_dim); each point is its class centre plus N(0, 1) noise.
"""

import numpy as np

from ..errors import ParasimError
from .model import GPTConfig, MLPConfig

MAX_STRIDE = 3
CLUSTER_NOISE = 1.0


def get_batch(config, batch_size: int, step: int, seed: int = 0):
    """-> (x, targets). GPT: tokens (B, s) int64 and next tokens (B, s) int64.
    MLP: features (B, in_dim) float64 and labels (B,) int64. Same (seed, step) -> same batch."""
    if batch_size <= 0:
        raise ParasimError(f"get_batch: batch_size must be > 0, got {batch_size}")
    if step < 0:
        raise ParasimError(f"get_batch: step must be >= 0, got {step}")
    rng = np.random.default_rng([seed, 1, step])
    if isinstance(config, GPTConfig):
        V, s = config.vocab, config.seq_len
        start = rng.integers(0, V, size=(batch_size, 1))
        stride = rng.integers(1, MAX_STRIDE + 1, size=(batch_size, 1))
        seq = (start + stride * np.arange(s + 1)) % V  # (B, s+1)
        return seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)
    if isinstance(config, MLPConfig):
        centres = np.random.default_rng([seed, 0]).normal(size=(config.classes, config.in_dim))
        labels = rng.integers(0, config.classes, size=batch_size)
        x = centres[labels] + CLUSTER_NOISE * rng.normal(size=(batch_size, config.in_dim))
        return x, labels.astype(np.int64)
    raise ParasimError(f"get_batch: expected MLPConfig or GPTConfig, got {type(config).__name__}")
