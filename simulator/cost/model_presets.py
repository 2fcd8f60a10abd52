"""Transformer model presets (GPT-3, Megatron-LM, Llama 1/2/3) with their real shapes and sources.

`ModelSpec` describes a decoder-only transformer by (L layers, h hidden, a heads, s sequence,
V vocabulary) plus the departures of modern models from GPT, each a field (Megatron-LM's
argument name in brackets; `ModelSpec` also answers to that name):
- `ffn_hidden` [--ffn-hidden-size] f, 4h when 0 (GPT);
- `kv_heads` [--num-query-groups] grouped-query attention (Ainslie et al. 2023): K and V
  projections are h x (h kv_heads / heads) each; 0 means kv_heads = heads;
- `gated_mlp` [--swiglu] SwiGLU (Shazeer 2020): three h x f matrices (gate, up, down);
- `tied_embeddings` [not --untie-embeddings-and-output-weights]: the output layer reuses the
  input embedding; Llama unties them (two V x h matrices);
- `vocab_divisible_by` [--make-vocab-size-divisible-by, default 128]: Megatron-LM pads the
  vocabulary to a multiple of 128 t (`padded_vocab(t)`; Megatron-LM
  `megatron/core/tokenizers/utils/build_tokenizer.py: vocab_size_with_padding`);
- `num_experts`, `moe_router_topk`, `moe_ffn_hidden` [--num-experts, --moe-router-topk,
  --moe-ffn-hidden-size]: mixture of experts in every layer (0 experts: dense);
- `moe_layer_freq` [--moe-layer-freq]: 1 or 0 per layer, MoE or dense (a dense layer's MLP is
  ffn_hidden wide, as Megatron-Core builds it); empty: every layer MoE (`dense_layer`, `moe_layers`);
- `mtp_num_layers` [--mtp-num-layers]: multi-token prediction modules (DeepSeek-V3 Sec. 2.2), each a
  layer of the last layer's kind, a 2h -> h projection and three norms, on the last stage (`mtp_layer`);
- `moe_shared_expert_hidden` [--moe-shared-expert-intermediate-size]: the total width of the shared
  experts every token passes through beside its routed ones (DeepSeekMoE; 0: none), split over tp;
- `kv_channels` [--kv-channels]: the attention head width (0: h / a); the query and output widths
  become a x kv_channels;
- `kv_lora_rank`, `q_lora_rank`, `qk_head_dim`, `qk_pos_emb_head_dim`, `v_head_dim`
  [--multi-latent-attention with --kv-lora-rank, --q-lora-rank, --qk-head-dim, --qk-pos-emb-head-dim,
  --v-head-dim]: multi-head latent attention (DeepSeek-V2, Sec. 2.1; Megatron-Core
  MLASelfAttention), on when kv_lora_rank > 0: queries through an h x q_lora_rank down-projection
  and its up-projection (or one h x a (qk + rope) matrix when q_lora_rank is 0), keys and values
  through an h x (kv_lora_rank + rope) down-projection and a kv_lora_rank x a (qk + v)
  up-projection, the output a v x h; the down-projections are replicated over the tensor-parallel
  ranks (Megatron-Core builds them "duplicated"), the rest split as usual (`attention_linears`);
  the attention core has query/key head width qk + rope and value width v;
- `flash_attention` [--use-flash-attn]: the preset's software stack trains with FlashAttention
  (the Llama presets; not the GPT-3 / Megatron 2021 ones, whose papers ran without it); the
  default of `Assumptions.flash_attention` (`simulator.cost.assumptions`);
- `dropout` [--attention-dropout, --hidden-dropout; both 0 -> False]: whether dropout masks are
  kept for the backward (`cost.memory`). Presets keep Megatron-LM's default (0.1: masks kept, as its
  memory estimator counts them); Llama's own training has no dropout (`dropout=False`).
Llama has no biases, RMSNorm (one h vector per norm), rotary positions (no position table).
The cost model prices these exactly as matmul shapes; what it approximates is the
element-wise traffic (GeLU vs SiLU-and-multiply, LayerNorm vs RMSNorm are treated alike).

Any field of a preset can be overridden (`get_model("llama3-70b", seq=4096)`; Megatron names
work too: `get_model("llama3-8b", seq_length=4096)`), and `ModelSpec(...)` builds custom models.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields, replace

from simulator.cost.model_counts import ModelCounts
from simulator.errors import ParasimError
from simulator.vocabulary import ALIASES

# Megatron-LM argument name -> ModelSpec field
MEGATRON_NAMES = {"num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
                  "seq_length": "seq", "vocab_size": "vocab", "ffn_hidden_size": "ffn_hidden",
                  "num_query_groups": "kv_heads", "swiglu": "gated_mlp",
                  "make_vocab_size_divisible_by": "vocab_divisible_by",
                  "moe_ffn_hidden_size": "moe_ffn_hidden",
                  "moe_shared_expert_intermediate_size": "moe_shared_expert_hidden"}
# MLA and --kv-channels keep Megatron-LM's names as fields (kv_lora_rank > 0 is --multi-latent-attention)


@dataclass(frozen=True)
class ModelSpec(ModelCounts):
    name: str
    layers: int                   # L transformer layers
    hidden: int                   # h
    heads: int                    # a attention heads
    seq: int                      # s sequence length
    vocab: int                    # V as the tokenizer has it (padded by `padded_vocab`)
    ffn_hidden: int = 0           # f; 0 -> 4 h (GPT)
    kv_heads: int = 0             # query groups; 0 -> heads (multi-head attention)
    gated_mlp: bool = False       # SwiGLU: gate, up, down
    biases: bool = True           # GPT linear biases and LayerNorm beta (False: Llama, RMSNorm)
    position_embedding: bool = True   # learned position table (False: rotary)
    tied_embeddings: bool = True
    vocab_divisible_by: int = 128     # Megatron-LM --make-vocab-size-divisible-by
    num_experts: int = 0              # 0: dense MLP
    moe_router_topk: int = 2          # Megatron-LM default
    moe_ffn_hidden: int = 0           # 0 -> ffn_hidden
    moe_shared_expert_hidden: int = 0  # Megatron --moe-shared-expert-intermediate-size (0: none)
    moe_layer_freq: tuple = ()        # Megatron --moe-layer-freq: 1 (MoE) or 0 (dense) per layer; (): all MoE
    mtp_num_layers: int = 0           # Megatron --mtp-num-layers: multi-token prediction modules
    kv_channels: int = 0              # Megatron --kv-channels: head width (0: hidden / heads)
    kv_lora_rank: int = 0             # Megatron --kv-lora-rank (> 0: multi-latent attention)
    q_lora_rank: int = 0              # Megatron --q-lora-rank (0: no query down-projection)
    qk_head_dim: int = 128            # Megatron --qk-head-dim (MLA)
    qk_pos_emb_head_dim: int = 64     # Megatron --qk-pos-emb-head-dim (MLA rotary part)
    v_head_dim: int = 128             # Megatron --v-head-dim (MLA)
    dropout: bool = True              # Megatron's default 0.1 dropouts keep their masks (False: Llama)
    # the preset's software stack: trained with FlashAttention (Megatron --use-flash-attn). The
    # cost model assumes it unless told otherwise (`Assumptions.flash_attention` None); False for
    # the GPT-3 / Megatron 2021 presets, whose papers ran without it, and for custom models
    # (Megatron-LM's default)
    flash_attention: bool = False
    source: str = ""

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "seq", "vocab", "vocab_divisible_by"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ParasimError(f"model {self.name}: {f} must be a positive integer, got {v!r}")
        for f in ("ffn_hidden", "kv_heads", "num_experts", "moe_router_topk", "moe_ffn_hidden",
                  "moe_shared_expert_hidden", "kv_channels", "kv_lora_rank", "q_lora_rank", "qk_head_dim",
                  "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ParasimError(f"model {self.name}: {f} must be a non-negative integer, got {v!r}")
        if self.hidden % self.heads:
            raise ParasimError(f"model {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.moe_ffn_hidden == 0:
            object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden)
        if self.heads % self.kv_heads:
            raise ParasimError(f"model {self.name}: kv_heads {self.kv_heads} must divide heads {self.heads}")
        if self.moe_shared_expert_hidden and not self.num_experts:
            raise ParasimError(f"model {self.name}: shared experts (moe_shared_expert_hidden "
                               f"{self.moe_shared_expert_hidden}) need num_experts > 0")
        freq = tuple(self.moe_layer_freq)
        if freq and (len(freq) != self.layers or set(freq) - {0, 1} or not self.num_experts or 1 not in freq):
            raise ParasimError(f"model {self.name}: moe_layer_freq must give 0 or 1 for each of the {self.layers} "
                               f"layers, at least one 1, and needs num_experts > 0; got {len(freq)} entries")
        object.__setattr__(self, "moe_layer_freq", () if all(freq) else tuple(int(x) for x in freq))
        if self.num_experts and not 1 <= self.moe_router_topk <= self.num_experts:
            raise ParasimError(f"model {self.name}: moe_router_topk {self.moe_router_topk} must be in "
                               f"1..num_experts = {self.num_experts}")

    # Megatron-LM names for the same fields
    @property
    def num_layers(self) -> int:
        return self.layers

    @property
    def hidden_size(self) -> int:
        return self.hidden

    @property
    def num_attention_heads(self) -> int:
        return self.heads

    @property
    def seq_length(self) -> int:
        return self.seq

    @property
    def ffn_hidden_size(self) -> int:
        return self.ffn_hidden

    @property
    def num_query_groups(self) -> int:
        return self.kv_heads

    @property
    def swiglu(self) -> bool:
        return self.gated_mlp

    @property
    def untie_embeddings_and_output_weights(self) -> bool:
        return not self.tied_embeddings

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def multi_latent_attention(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def core_dims(self) -> tuple[int, int]:
        """(query/key, value) head widths of the attention core."""
        if self.multi_latent_attention:
            return self.qk_head_dim + self.qk_pos_emb_head_dim, self.v_head_dim
        return self.head_dim, self.head_dim

    @property
    def qkv_widths(self) -> tuple[int, int, int]:
        """Widths of the query, key and value tensors the attention core reads (per token, all heads):
        what context parallelism moves."""
        qk, v = self.core_dims
        if self.multi_latent_attention:
            return self.heads * qk, self.heads * qk, self.heads * v
        return self.heads * qk, self.kv_dim, self.kv_dim

    def attention_linears(self) -> tuple[tuple[str, int, int, str], ...]:
        """(name, in, out, split) of the attention's linear layers in execution order; split is
        "column" (out / t), "row" (in / t) or "replicated" (module docstring)."""
        h, a = self.hidden, self.heads
        if self.multi_latent_attention:
            qk, v = self.core_dims
            q = ((("q_down", h, self.q_lora_rank, "replicated"), ("q_up", self.q_lora_rank, a * qk, "column"))
                 if self.q_lora_rank else (("q", h, a * qk, "column"),))
            return q + (("kv_down", h, self.kv_lora_rank + self.qk_pos_emb_head_dim, "replicated"),
                        ("kv_up", self.kv_lora_rank, a * (self.qk_head_dim + v), "column"),
                        ("proj", a * v, h, "row"))
        hd = self.head_dim
        return ("qkv", h, (a + 2 * self.kv_heads) * hd, "column"), ("proj", a * hd, h, "row")

    def padded_vocab(self, tp: int = 1) -> int:
        """V rounded up to a multiple of vocab_divisible_by x tp, as Megatron-LM pads it
        (`vocab_size_with_padding`): 128256 -> 129024 at t = 8, 32000 -> 32768, 50257 -> 51200."""
        multiple = self.vocab_divisible_by * tp
        return -(-self.vocab // multiple) * multiple

    def with_overrides(self, **overrides) -> "ModelSpec":
        """A copy with fields replaced (field or Megatron-LM names); unknown names are refused
        with the closest known one."""
        known = {f.name for f in fields(self)}
        kw = {}
        for key, value in overrides.items():
            if key == "untie_embeddings_and_output_weights":
                key, value = "tied_embeddings", not value
            key = MEGATRON_NAMES.get(key, ALIASES.get(key, key))   # seq_len (GPTConfig, torchtitan) -> seq
            if key not in known:
                near = difflib.get_close_matches(key, sorted(known | set(MEGATRON_NAMES)), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(sorted(known))}"
                raise ParasimError(f"model {self.name}: no field {key!r}{hint}")
            kw[key] = value
        if "ffn_hidden" not in kw and "hidden" in kw and self.ffn_hidden == 4 * self.hidden:
            kw["ffn_hidden"] = 0          # a GPT-shaped model keeps f = 4 h
        if "kv_heads" not in kw and "heads" in kw and self.kv_heads == self.heads:
            kw["kv_heads"] = 0            # multi-head attention stays multi-head
        if "moe_ffn_hidden" not in kw and self.moe_ffn_hidden == self.ffn_hidden:
            kw["moe_ffn_hidden"] = 0
        return replace(self, **kw)

    def __repr__(self) -> str:
        extra = ""
        if self.gated_mlp or self.kv_heads != self.heads:
            extra = f", f={self.ffn_hidden}, kv_heads={self.kv_heads}{', SwiGLU' if self.gated_mlp else ''}"
        if self.num_experts:
            extra += f", experts={self.num_experts} top-{self.moe_router_topk}" + (
                f" in {self.moe_layers} of {self.layers} layers" if self.moe_layer_freq else "")
        if self.mtp_num_layers:
            extra += f", MTP {self.mtp_num_layers}"
        if not self.dropout:
            extra += ", no dropout"
        return (f"{self.name}(L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq}, "
                f"V={self.vocab}{extra}; {self.params() / 1e9:.4g}B params)")


@dataclass(frozen=True)
class PublishedRun:
    """A published training run to validate against (each cites its paper and table)."""

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

_GPT3 = ("Brown et al. 2020 (GPT-3) Table 2.1: n_layers, d_model, n_heads, context 2048; GPT-2 BPE "
         "vocabulary 50257 (Megatron-LM pads it to 51200 at t = 8)")
# (name, layers, d_model, heads); Table 2.1 prints 24 heads for XL and d_model 5140 for 13B, which
# do not divide into its 128-wide heads: we use 16 heads (d_head 128) and 5120 (40 x 128)
for _name, _L, _h, _a in (("gpt3-125m", 12, 768, 12), ("gpt3-350m", 24, 1024, 16), ("gpt3-760m", 24, 1536, 16),
                          ("gpt3-1.3b", 24, 2048, 16), ("gpt3-2.7b", 32, 2560, 32), ("gpt3-6.7b", 32, 4096, 32),
                          ("gpt3-13b", 40, 5120, 40)):
    _MODELS[_name] = ModelSpec(_name, _L, _h, _a, 2048, 50257, source=_GPT3)
_MODELS["gpt3-175b"] = ModelSpec(
    "gpt3-175b", 96, 12288, 96, 2048, 51200,
    source="Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048); "
           "vocabulary padded to 51200 as in Narayanan et al. 2021 Table 2")

_LLAMA = dict(gated_mlp=True, biases=False, position_embedding=False, tied_embeddings=False, flash_attention=True)
_LLAMA2 = "Touvron et al. 2023 (Llama 2) Table 1 and model cards: context 4096, vocab 32000, SwiGLU, untied, RMSNorm"
_LLAMA3 = ("Llama Team 2024 (The Llama 3 Herd of Models) Table 3 and the Llama 3/3.1 configs: vocab 128256, "
           "pre-training context 8192, 8 KV heads (GQA), SwiGLU, untied, RMSNorm")
_MODELS["llama-7b"] = ModelSpec(
    "llama-7b", 32, 4096, 32, 2048, 32000, ffn_hidden=11008, **_LLAMA,
    source="Touvron et al. 2023 (LLaMA) Table 2: 32 layers, dim 4096, 32 heads, context 2048, "
           "SwiGLU 11008, vocab 32000")
# (name, layers, hidden, heads, kv heads, ffn, seq, vocab, source)
for _name, _L, _h, _a, _kv, _f, _s, _V, _src in (
        ("llama2-7b", 32, 4096, 32, 32, 11008, 4096, 32000, _LLAMA2),
        ("llama2-13b", 40, 5120, 40, 40, 13824, 4096, 32000, _LLAMA2),
        ("llama2-70b", 80, 8192, 64, 8, 28672, 4096, 32000, _LLAMA2),
        ("llama3-8b", 32, 4096, 32, 8, 14336, 8192, 128256, _LLAMA3),
        ("llama3-70b", 80, 8192, 64, 8, 28672, 8192, 128256, _LLAMA3),
        ("llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256, _LLAMA3)):
    _MODELS[_name] = ModelSpec(_name, _L, _h, _a, _s, _V, ffn_hidden=_f, kv_heads=_kv, **_LLAMA, source=_src)
# Llama 3.1 keeps the Llama 3 shapes (its 128k context is a final continued-training stage)
for _size in ("8b", "70b", "405b"):
    _MODELS[f"llama3.1-{_size}"] = replace(_MODELS[f"llama3-{_size}"], name=f"llama3.1-{_size}")
_MODELS["deepseek-v3"] = ModelSpec(
    "deepseek-v3", 61, 7168, 128, 4096, 129280, ffn_hidden=18432, num_experts=256, moe_router_topk=8,
    moe_ffn_hidden=2048, moe_shared_expert_hidden=2048, moe_layer_freq=(0,) * 3 + (1,) * 58, mtp_num_layers=1,
    kv_lora_rank=512, q_lora_rank=1536, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, dropout=False,
    **_LLAMA,
    source="DeepSeek-AI 2024 (DeepSeek-V3 technical report, arXiv 2412.19437) Sec. 4.2: 61 layers, hidden 7168, "
           "128 heads, MLA (KV rank 512, query rank 1536, head 128 + 64 rotary, value 128), the first 3 layers "
           "dense (FFN 18432), the rest 1 shared + 256 routed experts of 2048, top-8, vocabulary 129280, "
           "pre-training context 4096, one MTP module; 671B parameters (its node-limited routing and "
           "auxiliary-loss-free balancing are not priced: tokens are routed uniformly)")
# earlier names, kept
_MODELS["llama-70b"] = replace(_MODELS["llama2-70b"], name="llama-70b")
_MODELS["llama-405b"] = replace(_MODELS["llama3-405b"], name="llama-405b")

PUBLISHED_RUNS = tuple(PublishedRun(name, t, p, g, B, tf, _MEGATRON) for name, _a, _h, _L, t, p, g, B, tf in _TABLE1) + (
    PublishedRun("gpt3-175b", 8, 12, 1536, 1536, 141,
                 "Narayanan et al. 2021 Table 2 (PTD-P, 175B on 1536 A100, t=8 p=12 d=16)"),)


def model_names() -> tuple[str, ...]:
    return tuple(_MODELS)


def get_model(name, **overrides) -> ModelSpec:
    """The preset called `name` (or a ModelSpec), with any fields overridden
    (`ModelSpec.with_overrides`); refuses unknown names, suggesting the closest preset."""
    if isinstance(name, ModelSpec):
        spec = name
    else:
        key = str(name).strip().lower()
        if key not in _MODELS:
            near = difflib.get_close_matches(key, list(_MODELS), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ParasimError(f"unknown model preset {name!r}; {hint}known: {', '.join(_MODELS)}")
        spec = _MODELS[key]
    return spec.with_overrides(**overrides) if overrides else spec
