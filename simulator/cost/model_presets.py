"""Transformer model presets (GPT-style and Llama-style) with sources, and published runs.

`ModelSpec` describes a decoder-only transformer by (L layers, h hidden, a heads, s sequence,
V vocabulary) plus the two Llama departures from GPT:
- SwiGLU MLP (Shazeer 2020): three h x f matrices (gate, up, down) instead of two, with f about
  8h/3 rounded (11008 for h = 4096), so MLP FLOPs and parameters are 3 h f instead of 8 h^2;
- grouped-query attention (Ainslie et al. 2023): `kv_heads` < `heads`, so the K and V
  projections are h x (h kv_heads / heads) each.
Llama has no biases, RMSNorm (one h vector per norm), rotary positions (no position table)
and an untied output matrix. The cost model prices these exactly as matmul shapes; what it
approximates is the element-wise traffic (counted as for GPT: GeLU vs SiLU-and-multiply,
LayerNorm vs RMSNorm are treated alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ParasimError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn_hidden: int = 0           # 0 -> 4 h (GPT)
    kv_heads: int = 0             # 0 -> heads (multi-head attention)
    gated_mlp: bool = False       # SwiGLU: gate, up, down
    biases: bool = True           # GPT linear biases and LayerNorm beta
    position_embedding: bool = True
    tied_embeddings: bool = True
    source: str = ""

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "seq", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ParasimError(f"model {self.name}: {f} must be a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise ParasimError(f"model {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden < 1 or self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ParasimError(f"model {self.name}: kv_heads {self.kv_heads} must divide heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Per layer: QKV h(h + 2 kv) + proj h^2 + MLP (2 or 3) h f, biases, two norms."""
        h, f, kv = self.hidden, self.ffn_hidden, self.kv_dim
        weights = h * (h + 2 * kv) + h * h + (3 if self.gated_mlp else 2) * h * f
        biases = (h + 2 * kv) + h + f + h if self.biases else 0
        norms = 2 * (2 * h if self.biases else h)
        return weights + biases + norms

    def params(self) -> int:
        """All parameters. For GPT this is 12 L h^2 (1 + 13/(12h) + (V+s)/(12 L h)) (REFERENCES 5)."""
        h = self.hidden
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        pos = self.seq * h if self.position_embedding else 0
        final_norm = 2 * h if self.biases else h
        # the GPT formula omits the final LayerNorm (2h): kept out to match it exactly
        return self.layers * self.layer_params() + emb + pos + (0 if self.biases else final_norm)

    def matmul_params(self) -> int:
        """N of PaLM's 6N: parameters that take part in matmuls (no position table, no input lookup
        when the output matrix is untied)."""
        emb_lookup = 0 if self.tied_embeddings else self.vocab * self.hidden
        pos = self.seq * self.hidden if self.position_embedding else 0
        return self.params() - emb_lookup - pos

    def model_flops_per_token(self) -> float:
        """PaLM (Chowdhery et al. 2022, App. B): 6 N + 12 L H Q T, H Q = h heads x head dim, T = s."""
        return 6 * self.matmul_params() + 12 * self.layers * self.hidden * self.seq

    def __repr__(self) -> str:
        extra = ""
        if self.gated_mlp or self.kv_heads != self.heads:
            extra = f", f={self.ffn_hidden}, kv_heads={self.kv_heads}{', SwiGLU' if self.gated_mlp else ''}"
        return (f"{self.name}(L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq}, "
                f"V={self.vocab}{extra}; {self.params() / 1e9:.4g}B params)")


@dataclass(frozen=True)
class PublishedRun:
    """A published training run to validate against (REFERENCES section 5)."""

    model: str
    tp: int
    pp: int
    gpus: int
    global_batch: int
    tflops_per_gpu: float
    source: str

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


_MEGATRON = "Narayanan et al. 2021 (Megatron-LM, SC21), Table 1: s = 2048, V = 51200"
# (name, billions, heads, hidden, layers, t, p, gpus, batch, TFLOP/s per GPU)
_TABLE1 = (
    ("megatron-1.7b", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("megatron-3.6b", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("megatron-7.5b", 32, 4096, 36, 4, 1, 128, 512, 142),
    ("megatron-18.4b", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("megatron-39.1b", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("megatron-76.1b", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("megatron-145.6b", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("megatron-310.1b", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("megatron-529.6b", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("megatron-1t", 160, 25600, 128, 8, 64, 3072, 3072, 163),
)

_MODELS = {name: ModelSpec(name, L, h, a, 2048, 51200, source=_MEGATRON)
           for name, a, h, L, *_ in _TABLE1}
_MODELS["gpt3-175b"] = ModelSpec(
    "gpt3-175b", 96, 12288, 96, 2048, 51200,
    source="Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048); "
           "vocabulary padded to 51200 as in Narayanan et al. 2021 Table 2")
_MODELS["llama-7b"] = ModelSpec(
    "llama-7b", 32, 4096, 32, 2048, 32000, ffn_hidden=11008, gated_mlp=True, biases=False,
    position_embedding=False, tied_embeddings=False,
    source="Touvron et al. 2023 (LLaMA) Table 2: 32 layers, dim 4096, 32 heads, context 2048, "
           "SwiGLU 11008, vocab 32000")
_MODELS["llama-70b"] = ModelSpec(
    "llama-70b", 80, 8192, 64, 4096, 32000, ffn_hidden=28672, kv_heads=8, gated_mlp=True,
    biases=False, position_embedding=False, tied_embeddings=False,
    source="Touvron et al. 2023 (Llama 2): 80 layers, dim 8192, 64 heads, GQA 8 KV heads, context "
           "4096, SwiGLU 28672, vocab 32000")
_MODELS["llama-405b"] = ModelSpec(
    "llama-405b", 126, 16384, 128, 8192, 128256, ffn_hidden=53248, kv_heads=8, gated_mlp=True,
    biases=False, position_embedding=False, tied_embeddings=False,
    source="Llama Team 2024 (The Llama 3 Herd of Models) Table 3: 126 layers, dim 16384, 128 heads, "
           "8 KV heads, FFN 53248, vocab 128256, pre-training context 8192")

PUBLISHED_RUNS = tuple(PublishedRun(name, t, p, g, B, tf, _MEGATRON) for name, _a, _h, _L, t, p, g, B, tf in _TABLE1) + (
    PublishedRun("gpt3-175b", 8, 12, 1536, 1536, 141,
                 "Narayanan et al. 2021 Table 2 (PTD-P, 175B on 1536 A100, t=8 p=12 d=16)"),)


def model_names() -> tuple[str, ...]:
    return tuple(_MODELS)


def get_model(name: str) -> ModelSpec:
    """The preset called `name`; refuses unknown names, listing the known ones."""
    if isinstance(name, ModelSpec):
        return name
    key = str(name).strip().lower()
    if key not in _MODELS:
        raise ParasimError(f"unknown model preset {name!r}; known: {', '.join(_MODELS)}")
    return _MODELS[key]
