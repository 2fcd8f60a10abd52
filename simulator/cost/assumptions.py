"""The software stack the cost model assumes (`Assumptions`), resolved against a model preset, and
the one statement of the assumptions that change an answer (`assumptions_of`), which every result
(simulate, search, memory, sweep, the app) prints.

Defaults come from the vocabulary table (`simulator.vocabulary.KNOBS`). FlashAttention defaults to
the model preset's own choice (`ModelSpec.flash_attention`: on for the Llama presets, off for the
GPT-3 / Megatron 2021 presets, whose papers ran without it): `Assumptions(flash_attention=None)`
means "the preset's", and `resolved(model)` fills it in. So `estimate(llama, cfg, hw)`, `parasim
simulate --model llama3-8b`, the same with Megatron-LM's flags, `sweep` and the app assume the same.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from simulator.cost.stack import OVERLAP_FIELDS, Stack, get_stack
from simulator.errors import ParasimError
from simulator.vocabulary import BY_NAME, DEFAULTS, KNOBS, PRESET


@dataclass(frozen=True)
class Assumptions:
    """What the cost model assumes about the software stack (defaults: Megatron-LM 2021 on A100,
    which is also what Megatron-LM does today unless told otherwise).

    - dtype: matmul/activation dtype (bf16 on A100).
    - fp8 = False: the linear layers' matmuls at the hardware's fp8 peak (Transformer Engine FP8 GEMMs,
      Micikevicius et al. 2022), with their casts; the attention core and output layer stay BF16; element-wise traffic, activations and communication stay 16-bit; MFU is still
      reported against the 16-bit peak (as NeMo/Megatron report it).
    - grad_reduce_bytes = 4: Megatron accumulates gradients in an fp32 `main_grad` buffer and
      all-reduces it in fp32 for bf16 training.
    - link_efficiency = None: the hardware preset's measured NCCL efficiency
      (`Hardware.link_efficiency`, 0.8 on the datasheet presets), the same one `parasim
      collective --hardware` uses; a number overrides it.
    - nvls = True: an all-reduce inside one node uses NVLink SHARP where the hardware has it
      (H100/H200 NVSwitch; `simulator.cost.comm`), as NCCL does by default.
    - overlap_grad_reduce = False (Megatron --overlap-grad-reduce): gradient buckets are reduced
      while the backward of the last micro-batch (ZeRO-2/3: of every micro-batch) runs; only the
      part longer than that backward is exposed.
    - overlap_param_gather = False (Megatron --overlap-param-gather; DeepSpeed ZeRO-3 prefetch):
      parameter all-gathers run under the forward (ZeRO-1/2: the first micro-batch's forward of
      the next step; ZeRO-3: each micro-batch's forward and backward, one layer ahead).
    - overlap_tp_comm = False (Megatron --tp-comm-overlap, Transformer Engine userbuffers): each
      TP collective is split into chunks pipelined with the GEMM next to it, so only the part
      longer than the layer's linear GEMMs is exposed.
    - flash_attention = None: the model preset's (`ModelSpec.flash_attention`; `resolved(model)`);
      True (Megatron --use-flash-attn; Dao et al. 2022, Dao 2023): the
      attention core is one fused kernel: no s^2 softmax/dropout traffic to HBM, the backward
      recomputes the scores (5 instead of 4 attention-core matmuls in fwd + bwd), and a causal
      mask skips the blocks above the diagonal (half the core's time).
    - capacity_factor = None: MoE expert capacity c T k / E; None is dropless. Under balanced
      routing no expert overflows, so c >= 1 changes the answer only with pad_to_capacity; c < 1
      drops the overflow (`simulator.cost.moe.expert_tokens`).
    - pad_to_capacity = False (Megatron --moe-pad-expert-input-to-capacity, which needs a capacity
      factor): every expert's input padded to c T k / E rows (`simulator.cost.moe`).
    - moe_token_dispatcher = "alltoall" (Megatron --moe-token-dispatcher-type; Megatron-LM's own
      default allgather is what its flags give): how tokens reach their experts (`simulator.cost.moe`).
    - overlap_moe_comm = False (Megatron --overlap-moe-expert-parallel-comm; DeepSeek-V3's DualPipe
      overlaps a forward and a backward chunk the same way, Sec. 3.2.1): a layer's dispatch and
      combine collectives run under the compute of the paired micro-batch (`simulator.cost.moe`).
    - shared_expert_overlap = False (Megatron --moe-shared-expert-overlap): the shared experts'
      forward runs under the dispatch/combine of the forward, their input gradients under the backward's.
    - collective_algo: the algorithm priced by `simulator.cost.comm` (ring, as NCCL for large S).
    - recipe = "megatron": the model-state bytes per parameter (`simulator.model_states.RECIPES`:
      megatron 2 + 4 + 12, mixed 2 + 2 + 12, fp32 4 + 4 + 8); `PRECISION` names the three
      consistent (dtype, gradient-reduction bytes, recipe) triples.
    - stage3_max_reuse_distance = 1e9 (DeepSpeed's ZeRO-3 config key and default, in elements):
      with full recomputation a ZeRO-3 sub-module whose parameters would be reused only after this
      many other elements were fetched is released and gathered a third time for its backward
      (`simulator.cost.zero3_fetch`; GPT-3 175B: 2/3 of every layer).
    - grad_accum_bytes = 0: HBM bytes moved per parameter of a stage after every micro-batch's
      backward to accumulate its gradient outside the weight-gradient GEMM (memory-bound, on the
      critical path of every stage). 0 is Megatron-LM's gradient-accumulation fusion (the GEMM adds
      into the fp32 `main_grad`). DeepSpeed's pipeline engine with bf16 (DeepSpeed PR #1801,
      pipe/engine.py `_exec_backward_pass` -> bf16_optimizer.py `update_hp_grads`, BLOOM's setup):
      18 = read the bf16 gradient (2), write its fp32 copy (4), read it and the fp32 accumulator
      (4 + 4), write the accumulator (4).
    - dp_grad_all_reduce = False: with ZeRO-1 the gradients are reduce-scattered. True: they are
      all-reduced in full and each rank then updates its shard, as DeepSpeed's BF16_Optimizer does
      (its own ZeRO-1 under `zero_optimization.stage` 0: pipe/engine.py `_bf16_reduce_grads` ->
      `buffered_allreduce_fallback` of the fp32 gradients, then `all_gather_dp_groups`).
    - causal_attention_flops = False: model FLOPs (model TFLOP/s, MFU) count the full attention core,
      PaLM's 6N + 12 L H Q T; True counts its causal half, 6N + 6 L H Q T, as NVIDIA's newer tables do
      (`simulator.cost.flops`). A FLOP convention only: no time changes.
    - stack = "megatron-core": the software stack (`simulator.cost.stack`, a preset name or a stack
      file): kernel efficiencies, per-kernel and per-step overheads, and the overlaps it performs.
      `resolved` turns on the overlaps the stack always performs and refuses one it cannot.
    """

    dtype: str = DEFAULTS["dtype"]
    grad_reduce_bytes: int = DEFAULTS["grad_reduce_bytes"]
    link_efficiency: float | None = DEFAULTS["link_efficiency"]
    overlap_grad_reduce: bool = DEFAULTS["overlap_grad_reduce"]
    overlap_tp_comm: bool = DEFAULTS["overlap_tp_comm"]
    collective_algo: str = DEFAULTS["collective_algo"]
    overlap_param_gather: bool = DEFAULTS["overlap_param_gather"]
    flash_attention: bool | None = None          # None: the model preset's (vocabulary default PRESET)
    fp8: bool = DEFAULTS["fp8"]
    nvls: bool = DEFAULTS["nvls"]
    capacity_factor: float | None = DEFAULTS["capacity_factor"]
    pad_to_capacity: bool = DEFAULTS["pad_to_capacity"]
    moe_token_dispatcher: str = DEFAULTS["moe_token_dispatcher"]
    overlap_moe_comm: bool = DEFAULTS["overlap_moe_comm"]
    shared_expert_overlap: bool = DEFAULTS["shared_expert_overlap"]
    recipe: str = DEFAULTS["recipe"]
    stage3_max_reuse_distance: float = DEFAULTS["stage3_max_reuse_distance"]
    grad_accum_bytes: float = DEFAULTS["grad_accum_bytes"]
    dp_grad_all_reduce: bool = DEFAULTS["dp_grad_all_reduce"]
    causal_attention_flops: bool = DEFAULTS["causal_attention_flops"]
    stack: str = DEFAULTS["stack"]

    def __post_init__(self):
        from simulator.model_states import recipe_bytes
        recipe_bytes(self.recipe)       # refuses unknown recipes with the known ones
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ParasimError(f"capacity_factor must be > 0 (or None for dropless), got {self.capacity_factor}")
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ParasimError("pad_to_capacity needs a capacity_factor (Megatron-Core: moe_expert_capacity_factor "
                               "must be set to use moe_pad_expert_input_to_capacity)")
        if self.moe_token_dispatcher not in BY_NAME["moe_token_dispatcher"].choices:
            raise ParasimError(f"unknown moe_token_dispatcher {self.moe_token_dispatcher!r}; known "
                               f"{', '.join(BY_NAME['moe_token_dispatcher'].choices)}")
        if self.link_efficiency is not None and not 0 < self.link_efficiency <= 1:
            raise ParasimError(f"link_efficiency must be in (0, 1], got {self.link_efficiency}")
        if not self.grad_accum_bytes >= 0:
            raise ParasimError(f"grad_accum_bytes must be >= 0 bytes per parameter, got {self.grad_accum_bytes}")
        if not self.stage3_max_reuse_distance > 0:
            raise ParasimError(f"stage3_max_reuse_distance must be > 0 elements, got {self.stage3_max_reuse_distance}")
        prof = self.profile             # refuses unknown stacks and bad stack files before any work
        for name, field_name in OVERLAP_FIELDS.items():
            if getattr(self, field_name) and name not in prof.overlaps:
                raise ParasimError(f"stack {prof.name} does not perform the {name} overlap ({field_name}); it performs: "
                                   f"{', '.join(prof.overlaps) or 'none'}")

    @property
    def param_bytes(self) -> int:
        """Bytes of one parameter as the step holds and all-gathers it (ZeRO-1/2's gather after the
        optimizer, ZeRO-3's and FSDP's before each layer): the recipe's parameter bytes
        (`simulator.model_states.RECIPES`; 2 in the 16-bit recipes, 4 in fp32)."""
        from simulator.model_states import recipe_bytes
        return recipe_bytes(self.recipe)[0]

    @property
    def profile(self) -> Stack:
        """The software stack's figures (`simulator.cost.stack.get_stack`)."""
        return get_stack(self.stack)

    @property
    def matmul_dtype(self) -> str:
        return "fp8" if self.fp8 else self.dtype

    def resolved(self, model) -> "Assumptions":
        """These assumptions with every preset-dependent one (PRESET in the vocabulary) taken from
        `model` where it was left None; idempotent. `from_preset` names the ones filled in."""
        missing = {f.name: getattr(model, f.name) for f in fields(self)
                   if getattr(self, f.name) is None and BY_NAME[f.name].default == PRESET}
        forced = {OVERLAP_FIELDS[o]: True for o in self.profile.always_overlaps if not getattr(self, OVERLAP_FIELDS[o])}
        if not missing and not forced:
            return self
        out = replace(self, **missing, **forced)
        object.__setattr__(out, "from_preset", (*self.from_preset, *missing))
        object.__setattr__(out, "preset_name", getattr(model, "name", "") if missing else self.preset_name)
        object.__setattr__(out, "from_stack", (*self.from_stack, *forced))
        return out

    # not fields: `resolved` sets them on the copy it returns (which knobs it took from which preset,
    # which overlaps the stack performs unasked)
    from_preset = ()
    preset_name = ""
    from_stack = ()


PRECISION = {
    "megatron": dict(dtype="bf16", grad_reduce_bytes=4, recipe="megatron"),
    "mixed": dict(dtype="bf16", grad_reduce_bytes=2, recipe="mixed"),
    "fp32": dict(dtype="fp32", grad_reduce_bytes=4, recipe="fp32"),
}
"""Precision recipes as `Assumptions` keywords: Megatron-LM's default (bf16 compute, fp32 main
gradients reduced in fp32, fp32 Adam: 18 bytes per parameter); plain mixed precision (16-bit
gradients reduced in 16 bits, fp32 master weights and Adam: 16 bytes, Micikevicius et al. 2018,
ZeRO Sec. 3.1); fp32 everywhere (matmuls at the fp32 peak, no TF32; 16 bytes). FP8 is the separate
`fp8` switch on top of a 16-bit recipe (Transformer Engine keeps 16-bit master copies)."""

MODERN = Assumptions(overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=True,
                     flash_attention=True)
"""What a Megatron-Core / NeMo run of a modern model turns on (FlashAttention, all three overlaps)."""


# the assumptions of a parallel configuration that change an answer, printed with the stack's
CONFIG_KNOBS = tuple(k.name for k in KNOBS if k.changes_answer and "stack" not in k.used_by)
STACK_KNOBS = tuple(k.name for k in KNOBS if k.changes_answer and "stack" in k.used_by)
# always printed in text (the rest only when not at their default)
HEADLINE = ("flash_attention", "recompute", "sequence_parallel", "dtype", "fp8", "recipe", "overlap_grad_reduce",
            "overlap_param_gather", "overlap_tp_comm", "causal_attention_flops", "stack")


def assumptions_of(model, assumptions: Assumptions | None = None, config=None, *, door: str = "argument",
                   searched: bool = False) -> dict[str, dict]:
    """{knob: {"value", "source"}} of every assumption that changes the answer (the vocabulary's
    `changes_answer` knobs): the software stack of `assumptions` resolved on `model`, and the
    configuration's recomputation and sequence parallelism. `source` is "preset NAME" (the model
    preset's own value), "default" (the vocabulary's default), `door` ("flag" on the command line,
    "argument" from Python, "setting" in the app) when given otherwise, or "searched" for what a
    search chose (`searched`)."""
    A = (assumptions or Assumptions()).resolved(model)
    out = {}
    for name in STACK_KNOBS:
        value = getattr(A, name)
        if name in A.from_preset:
            source = f"preset {A.preset_name}"
        elif name in A.from_stack:
            source = f"stack {A.profile.name}"
        else:
            source = "default" if value == DEFAULTS[name] else door
        out[name] = {"value": value, "source": source}
    out["stack"]["profile"] = f"{A.profile!r}: {A.profile.source}"   # its figures; each one's source: its file
    if config is not None:
        for name in CONFIG_KNOBS:
            value = getattr(config, name)
            source = "searched" if searched else ("default" if value == DEFAULTS[name] else door)
            out[name] = {"value": value, "source": source}
    return out


def _shown(value) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return "hardware preset's" if value is None else str(value)


def format_assumptions(rows: dict[str, dict], indent: str = "  ") -> str:
    """The text form of `assumptions_of`: the headline assumptions always, the others when not at
    their default; each with where it came from."""
    parts = [f"{name} {_shown(r['value'])} ({r['source']})" for name, r in rows.items()
             if name in HEADLINE or r["source"] != "default"]
    return f"{indent}assumptions      " + "; ".join(parts)
