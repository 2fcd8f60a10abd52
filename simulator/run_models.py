"""The small models a real run trains unless told otherwise: one table for `parasim train`, the
Training playground and the Faults page (and anyone building a `TrainConfig` by name).

Each entry is a model configuration with the CLI flags that may change it; a flag of another model
(`--heads` for the MLP) is refused, not ignored (`model_from_flags`).
"""

from __future__ import annotations

from dataclasses import fields, replace

from .errors import ParasimError
from .models import GPTConfig, MLPConfig
from .parallel.experts import MoEGPTConfig

RUN_MODELS: dict[str, MLPConfig | GPTConfig] = {
    "gpt": GPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32),
    "mlp": MLPConfig(in_dim=64, hidden=256, layers=8, classes=8),
    "moe": MoEGPTConfig(layers=4, hidden=32, heads=4, seq_len=16, vocab=32, experts=4, top_k=1,
                        capacity_factor=1.25),
}
LABELS = {"gpt": "tiny GPT", "mlp": "MLP", "moe": "tiny MoE GPT"}   # the app's names
ABOUT = {"gpt": "a small GPT", "mlp": "a multi-layer perceptron", "moe": "a GPT with mixture-of-experts blocks"}
MEANING = {"layers": "transformer blocks (gpt, moe) or linear layers (mlp)", "hidden": "hidden size",
           "heads": "attention heads", "seq_len": "sequence length in tokens", "vocab": "vocabulary size",
           "experts": "experts per MoE block", "top_k": "experts per token, 1 or 2",
           "capacity_factor": "expert capacity factor", "in_dim": "input features", "classes": "output classes",
           "routing_groups": "MoE capacity groups per sequence; = cp routes each context rank's own tokens, as "
                             "Megatron-Core does"}
# CLI flag (argparse dest) -> model field, where the two names differ
FLAG_FIELD = {"seq": "seq_len"}


def describe(name: str) -> str:
    """One line: the model's fields, e.g. 'tiny GPT: layers 4, hidden 32, heads 4, seq_len 16, vocab 32'."""
    model = RUN_MODELS[name]
    shown = ", ".join(f"{f.name} {getattr(model, f.name)}" for f in fields(model)
                      if f.name not in ("activation", "expert_hidden"))
    return f"{LABELS[name]}: {shown}"


def flag_fields() -> dict[str, str]:
    """Every CLI sizing flag (its dest) and the model field it sets, over all the models."""
    names = {f.name for model in RUN_MODELS.values() for f in fields(model)} - {"activation", "expert_hidden"}
    by_field = {v: k for k, v in FLAG_FIELD.items()}
    return {by_field.get(n, n): n for n in sorted(names)}


def model_from_flags(name: str, given: dict) -> MLPConfig | GPTConfig:
    """`RUN_MODELS[name]` with the flags the user gave (dest -> value; None = not given) applied.
    A flag the model has no field for is refused in one line."""
    model = RUN_MODELS[name]
    own = {f.name for f in fields(model)}
    changes = {}
    for dest, value in given.items():
        if value is None:
            continue
        field = FLAG_FIELD.get(dest, dest)
        if field not in own:
            flag = "--" + dest.replace("_", "-")
            raise ParasimError(f"{flag} does not apply to --model {name} ({ABOUT[name]}); its sizes are "
                               f"{', '.join(sorted(own - {'activation', 'expert_hidden'}))}")
        changes[field] = value
    return replace(model, **changes)
