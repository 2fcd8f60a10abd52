"""Model configs (plain data) and the single-device reference model built from them.

A config is a frozen dataclass of ints and strings, so it pickles to Ray actors and prints as
notation; `build_model(config)` is a pure function of it, so every device that rebuilds the model
gets the same layers, and `Model.init_params(seed)` gives the same parameters everywhere.
"""

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ParasimError
from ..vocabulary import with_aliases
from .functional import ACTIVATIONS
from .layers import CrossEntropy, Dense, Embedding, Layer, LMHead, TransformerBlock


def _check_positive(kind, obj, names):
    for n in names:
        v = getattr(obj, n)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ParasimError(f"{kind}: {n} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class MLPConfig:
    in_dim: int  # input features
    hidden: int  # width of the hidden layers
    layers: int  # number of linear layers (1 = logistic regression)
    classes: int  # output logits
    activation: str = "relu"  # "relu" or "gelu", after every linear but the last

    def __post_init__(self):
        _check_positive("MLPConfig", self, ("in_dim", "hidden", "layers", "classes"))
        if self.activation not in ACTIVATIONS:
            raise ParasimError(f"MLPConfig: activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.classes < 2:
            raise ParasimError(f"MLPConfig: classes must be >= 2, got {self.classes}")

    def __repr__(self):
        return f"MLP({self.in_dim}->{self.hidden}x{self.layers - 1}->{self.classes}, {self.activation})"

    def to_dict(self):
        return {"kind": "mlp", **asdict(self)}


@with_aliases(warn=False)   # GPTConfig(seq=16) and .seq / .seq_length: one vocabulary (simulator.vocabulary)
@dataclass(frozen=True)
class GPTConfig:
    layers: int  # L transformer blocks
    hidden: int  # h
    heads: int  # a, divides h
    seq_len: int  # s
    vocab: int  # V

    def __post_init__(self):
        _check_positive("GPTConfig", self, ("layers", "hidden", "heads", "seq_len", "vocab"))
        if self.hidden % self.heads:
            raise ParasimError(f"GPTConfig: heads {self.heads} must divide hidden {self.hidden} (remainder {self.hidden % self.heads})")

    def __repr__(self):
        return f"GPT(L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq_len}, V={self.vocab})"

    def to_dict(self):
        return {"kind": "gpt", **asdict(self)}


def config_from_dict(d: dict):
    """Inverse of `config.to_dict()` (for JSON on the CLI and in the app)."""
    d = dict(d)
    kind = d.pop("kind", None)
    cls = {"mlp": MLPConfig, "gpt": GPTConfig}.get(kind)
    if cls is None:
        raise ParasimError(f"model config: kind must be 'mlp' or 'gpt', got {kind!r}")
    try:
        return cls(**d)
    except TypeError as e:
        raise ParasimError(f"model config: {e}") from None


def _scale(scale, count):
    if scale is not None:
        return scale
    if count == 0:
        raise ParasimError("loss: every target is ignored (count 0), so the mean is undefined; pass scale")
    return 1.0 / count


@dataclass(frozen=True)
class Model:
    """A stack of layers and a loss; runs everything on one device (the reference for strategies).

    Parameters are a list with one dict per layer, in `layers` order.
    """

    config: MLPConfig | GPTConfig
    layers: tuple
    loss: CrossEntropy

    def __repr__(self):
        return f"Model({self.config!r}, {len(self.layers)} layers, P={self.param_count:,})"

    @property
    def param_count(self) -> int:
        return sum(layer.param_count() for layer in self.layers)

    def init_params(self, seed: int = 0) -> list:
        """Layer i draws from Generator(PCG64(SeedSequence([seed, i]))): deterministic, and a
        pipeline stage can initialise its own layers without creating the others."""
        return [layer.init(np.random.default_rng([seed, i])) for i, layer in enumerate(self.layers)]

    def forward(self, params, x):
        """-> (output of the last layer, list of caches)."""
        caches = []
        for layer, p in zip(self.layers, params):
            x, c = layer.forward(p, x)
            caches.append(c)
        return x, caches

    def forward_loss(self, params, x, targets, scale=None) -> float:
        """scale * sum of per-token losses; scale None means 1 / count (the mean)."""
        out, _ = self.forward(params, x)
        loss_sum, count, _ = self.loss.forward(out, targets)
        return loss_sum * _scale(scale, count)

    def loss_and_grads(self, params, x, targets, scale=None):
        """-> (loss, grads) with loss = scale * loss_sum and grads its gradient, one dict per layer."""
        out, caches = self.forward(params, x)
        loss_sum, count, lcache = self.loss.forward(out, targets)
        scale = _scale(scale, count)
        dy = self.loss.backward(lcache, scale)
        grads = [None] * len(self.layers)
        for i in reversed(range(len(self.layers))):
            dy, grads[i] = self.layers[i].backward(params[i], caches[i], dy)
        return loss_sum * scale, grads

    def forward_flops(self, batch: int) -> float:
        return sum(layer.forward_flops(batch) for layer in self.layers)

    def iteration_flops(self, batch: int) -> float:
        """Forward + backward matmul FLOPs without recomputation (3 x forward)."""
        return sum(layer.forward_flops(batch) + sum(layer.backward_flops(batch)) for layer in self.layers)


def build_model(config) -> Model:
    """GPT: (embedding, block0..block{L-1}, head). MLP: one Dense layer per linear (linear0..).
    A config with a `build_layers()` method (e.g. parallel.experts.MoEGPTConfig) builds its own."""
    if callable(getattr(config, "build_layers", None)):
        layers = tuple(config.build_layers())
    elif isinstance(config, GPTConfig):
        c = config
        layers = (
            Embedding("embedding", c.vocab, c.seq_len, c.hidden),
            *(TransformerBlock(f"block{i}", c.hidden, c.heads, c.seq_len) for i in range(c.layers)),
            LMHead("head", c.hidden, c.vocab, c.seq_len),
        )
    elif isinstance(config, MLPConfig):
        c = config
        dims = [c.in_dim] + [c.hidden] * (c.layers - 1) + [c.classes]
        layers = tuple(
            Dense(f"linear{i}", dims[i], dims[i + 1], c.activation if i < c.layers - 1 else None) for i in range(c.layers)
        )
    else:
        raise ParasimError(f"build_model: expected MLPConfig or GPTConfig, got {type(config).__name__}")
    assert all(isinstance(layer, Layer) for layer in layers)
    return Model(config, layers, CrossEntropy())
