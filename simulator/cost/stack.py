"""Software stacks as data: what a training framework's kernels achieve, what it costs per kernel and
per step outside them, and which communication it overlaps.

A stack is a file, simulator/cost/stack_presets/<name>.toml (megatron-core, nemo, torchtitan,
deepspeed), or a user's file of the same fields passed by path wherever a name goes (`--stack
my.toml`, `Assumptions(stack="my.toml")`, sweep's `stack=`, the Scale explorer), read by the same safe
reader as hardware files (`hardware_files.read_table`). The default is `megatron-core`
(`simulator.vocabulary`), the stack every figure of docs/validation.md was calibrated on.

Fields (units in the names):
  name, source              the stack's name and a summary of where its figures come from
  gemm_peak_fraction        plateau of a large 16-bit GEMM, as a fraction of the dense peak
  gemm_peak_fraction_fp8    the same for FP8 GEMMs
  memory_efficiency         fraction of the HBM bandwidth an element-wise kernel streams at
  attention_efficiency      the fused attention core's rate relative to FlashAttention-2's as the
                            roofline prices it (1: FlashAttention-2; `scale_kernels.Kernel.time_s`)
  norm_bytes, residual_bytes   HBM bytes a layer norm / residual add (with bias and dropout where
                            the model has them) moves per hidden element in the forward
  rope_bytes                ... the rotary embedding per query and key element (rotary models)
  kv_repeat_bytes           ... per element of K and V and of their copies repeated to every query
                            head (grouped-query attention whose attention kernel wants equal heads)
  attention_copy_bytes      ... per element of the attention output copied to the layout the
                            projection reads
  swiglu_bytes              ... the gated activation per element of the MLP's f (an ungated GeLU
                            moves 4: `scale_kernels.GELU_BYTES`); the backward of each moves
                            twice its forward (`scale_kernels.layer_kernels`)
  selective_recompute       what recompute="selective" repeats in the backward: attention_core
                            (Megatron's --recompute-granularity selective) or every_other_matmul
                            (torchtitan's op-level policy: every element-wise op and every second
                            matmul of a block, `simulator.cost.sac`)
  kernel_gap_us             GPU time lost between two dependent kernels, per kernel launched
                            (`scale_kernels.Kernel.launches`)
  step_overhead_ms          host work per step outside the kernels (optimizer launches, loss and
                            grad-norm bookkeeping, the next batch): on the critical path except
                            while the GPU still drains the step's exposed data-parallel
                            communication, which it runs under (`exposed_step_overhead_s`)
  overlaps                  the overlaps the stack can perform when asked: tp_comm (async TP /
                            --tp-comm-overlap), grad_reduce (--overlap-grad-reduce), param_gather
                            (--overlap-param-gather; ZeRO-3/FSDP: prefetch)
  always_overlaps           those it performs without being asked (its recipes' or its design's)
  sources                   a table with one entry per figure and overlap list: a URL and what it
                            says, or "assumed" and why
Every field is required (a stack states all it assumes); unknown fields, missing sources, values
out of range and overlaps a stack cannot perform are refused in one line.

The closed form and the event clock both read the stack through `Assumptions.profile`: kernels
through `compute` and `scale_kernels.Kernel.time_s`, the step overhead through
`exposed_step_overhead_s` (the breakdown's `other`), the overlaps through `Assumptions.resolved`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from numbers import Real

from simulator.cost.hardware_files import read_table, tomllib
from simulator.errors import ParasimError
from simulator.vocabulary import DEFAULTS

# overlap name -> the Assumptions field (and Megatron-LM flag) it stands for
OVERLAP_FIELDS = {"tp_comm": "overlap_tp_comm", "grad_reduce": "overlap_grad_reduce",
                  "param_gather": "overlap_param_gather"}
FRACTIONS = ("gemm_peak_fraction", "gemm_peak_fraction_fp8", "memory_efficiency")
BYTES = ("norm_bytes", "residual_bytes", "rope_bytes", "kv_repeat_bytes", "attention_copy_bytes", "swiglu_bytes")
NUMBERS = (*FRACTIONS, "attention_efficiency", "kernel_gap_us", "step_overhead_ms", *BYTES)
CHOICES = {"selective_recompute": ("attention_core", "every_other_matmul")}
LISTS = ("overlaps", "always_overlaps")
SOURCED = (*NUMBERS, *CHOICES, *LISTS)        # the fields whose source the [sources] table names
FIELDS = ("name", "source", *NUMBERS, *CHOICES, *LISTS, "sources")


@dataclass(frozen=True)
class Stack:
    """One software stack's figures (module docstring); `sources` as (field, text) pairs."""

    name: str
    source: str
    gemm_peak_fraction: float
    gemm_peak_fraction_fp8: float
    memory_efficiency: float
    attention_efficiency: float
    kernel_gap_us: float
    step_overhead_ms: float
    norm_bytes: float
    residual_bytes: float
    rope_bytes: float
    kv_repeat_bytes: float
    attention_copy_bytes: float
    swiglu_bytes: float
    selective_recompute: str
    overlaps: tuple[str, ...]
    always_overlaps: tuple[str, ...]
    sources: tuple[tuple[str, str], ...]

    def source_of(self, field: str) -> str:
        return dict(self.sources)[field]

    def exposed_step_overhead_s(self, exposed_dp_s: float) -> float:
        """Seconds the per-step host work adds to a step whose data-parallel communication leaves
        `exposed_dp_s` exposed at its end: max(0, step_overhead - exposed dp) (module docstring)."""
        return max(0.0, self.step_overhead_ms * 1e-3 - exposed_dp_s)

    def __repr__(self) -> str:
        return (f"Stack({self.name}: GEMM {self.gemm_peak_fraction:g} (fp8 {self.gemm_peak_fraction_fp8:g}), "
                f"memory {self.memory_efficiency:g}, norm {self.norm_bytes:g} B/element, "
                f"selective {self.selective_recompute}, {self.kernel_gap_us:g} us/kernel, "
                f"{self.step_overhead_ms:g} ms/step, overlaps {', '.join(self.overlaps) or 'none'}"
                f"{' (always ' + ', '.join(self.always_overlaps) + ')' if self.always_overlaps else ''})")


@lru_cache(maxsize=1)
def stack_names() -> tuple[str, ...]:
    """The shipped stacks, by file name (read once: estimates ask for their stack on every call)."""
    folder = resources.files("simulator.cost") / "stack_presets"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml")))


def check_stack(data: dict, where: str) -> Stack:
    """The fields of a stack file, validated (module docstring), as a Stack."""
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ParasimError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    missing = [k for k in FIELDS if k not in data]
    if missing:
        raise ParasimError(f"{where}: missing field(s) {', '.join(missing)} (a stack states every figure it assumes)")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise ParasimError(f"{where}: {key} must be a non-empty string")
    for key in NUMBERS:
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or v < 0:
            raise ParasimError(f"{where}: {key} must be a finite number >= 0, got {v!r}")
        if key in FRACTIONS + ("attention_efficiency",) and not 0 < v <= (1 if key in FRACTIONS else 4):
            raise ParasimError(f"{where}: {key} must be in (0, {1 if key in FRACTIONS else 4}], got {v!r}")
    for key, known in CHOICES.items():
        if data[key] not in known:
            raise ParasimError(f"{where}: {key} must be one of {', '.join(known)}, got {data[key]!r}")
    for key in LISTS:
        got = data[key]
        if not isinstance(got, list) or any(x not in OVERLAP_FIELDS for x in got):
            raise ParasimError(f"{where}: {key} must be a list of overlaps out of {', '.join(OVERLAP_FIELDS)}, "
                               f"got {got!r}")
    extra = sorted(set(data["always_overlaps"]) - set(data["overlaps"]))
    if extra:
        raise ParasimError(f"{where}: always_overlaps {', '.join(extra)} must also be listed in overlaps")
    sources = data["sources"]
    if not isinstance(sources, dict) or any(not isinstance(v, str) or not v.strip() for v in sources.values()):
        raise ParasimError(f"{where}: sources must be a table of field = \"where the figure comes from\"")
    needed = [k for k in SOURCED if k not in sources]
    unknown = sorted(set(sources) - set(SOURCED))
    if needed or unknown:
        raise ParasimError(f"{where}: sources must name one source per figure (or \"assumed ...\"): missing "
                           f"{', '.join(needed) or 'none'}, unknown {', '.join(unknown) or 'none'}")
    return Stack(data["name"], data["source"], *(float(data[k]) for k in NUMBERS),
                 *(data[k] for k in CHOICES), tuple(data["overlaps"]), tuple(data["always_overlaps"]),
                 tuple(sorted(sources.items())))


@lru_cache(maxsize=None)
def _preset(name: str) -> Stack:
    text = (resources.files("simulator.cost") / "stack_presets" / f"{name}.toml").read_text()
    return check_stack(tomllib.loads(text), f"stack preset {name}")


@lru_cache(maxsize=32)
def _file(path: str, mtime_ns: int, size: int) -> Stack:   # keyed by the file's state: an edit is re-read
    return check_stack(read_table(path, "stack"), f"stack file {path}")


def get_stack(name: str | Stack | None = None) -> Stack:
    """A shipped stack by name, a stack file by path (.toml or .json), or a Stack as it is; None: the
    default (`simulator.vocabulary`). Unknown names are refused with the known ones."""
    if isinstance(name, Stack):
        return name
    key = str(DEFAULTS["stack"] if name is None else name).strip()
    if key.endswith((".toml", ".json")) or os.sep in key:
        try:
            st = os.stat(key)
        except OSError as exc:
            raise ParasimError(f"cannot open stack file {key}: {exc.strerror}") from None
        return _file(key, st.st_mtime_ns, st.st_size)
    if key.lower() not in stack_names():
        raise ParasimError(f"unknown software stack {name!r}; known: {', '.join(stack_names())} "
                           "(or a path to a .toml/.json stack file)")
    return _preset(key.lower())


def default_stack() -> Stack:
    return get_stack(None)
