"""GPT size and FLOP formulas (Narayanan et al. 2021, eq. 3).

Parameters:   P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) = 12 L h^2 + 13 L h + (V + s) h.
  12h^2 + 13h per block (see block.py) plus token and position embeddings, with the output
  projection TIED to the token embedding. Our model unties it and adds the final layer norm, so
      model.param_count = P + V h (W_out) + 2 h (final ln gain and bias)   exactly.

FLOPs per iteration (eq. 3), matmuls only, B = global batch in sequences:
  forward per block 24 B s h^2 + 4 B s^2 h, logits 2 B s h V; backward = 2 x forward.
  without recomputation: F = 72 B s L h^2 (1 + s/(6h) + V/(12 L h))   (3 forwards)
  with full recomputation: F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h)) (blocks run forward twice;
  the logit layer is not recomputed, hence V/(16Lh) there and V/(12Lh) without recomputation:
  both give the logit term 6 B s h V).
"""

from ..errors import ParasimError


def _check(**sizes):
    bad = {k: v for k, v in sizes.items() if v <= 0}
    if bad:
        raise ParasimError("GPT formula: sizes must be > 0, got " + ", ".join(f"{k}={v}" for k, v in bad.items()))


def gpt_param_count(layers: int, hidden: int, seq_len: int, vocab: int) -> int:
    """P = 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)), evaluated in integers."""
    _check(layers=layers, hidden=hidden, seq_len=seq_len, vocab=vocab)
    L, h = layers, hidden
    return 12 * L * h * h + 13 * L * h + (vocab + seq_len) * h


def gpt_model_param_count(layers: int, hidden: int, seq_len: int, vocab: int) -> int:
    """Parameters of build_model(GPTConfig(...)): formula + untied V h head + 2 h final norm."""
    return gpt_param_count(layers, hidden, seq_len, vocab) + vocab * hidden + 2 * hidden


def gpt_iteration_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int, recompute: bool = False) -> float:
    """Narayanan et al. 2021 eq. 3: 96 B s L h^2 (1 + s/(6h) + V/(16 L h)) with full recomputation,
    72 B s L h^2 (1 + s/(6h) + V/(12 L h)) without."""
    _check(batch=batch, seq_len=seq_len, layers=layers, hidden=hidden, vocab=vocab)
    B, s, L, h, V = batch, seq_len, layers, hidden, vocab
    if recompute:
        return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))


def gpt_config_flops(config, batch: int, recompute: bool = False) -> float:
    """gpt_iteration_flops for a GPTConfig."""
    c = config
    return gpt_iteration_flops(batch, c.seq_len, c.layers, c.hidden, c.vocab, recompute)
