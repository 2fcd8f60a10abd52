"""The space `search_training` walks: a table of axes, each the values of one knob given the knobs
chosen before it.

An axis (`Axis`) names the `ParallelConfig` fields it sets and gives, for the search's `Space` and
the values chosen so far, its options (each a dict of fields). `LAYOUT_AXES` choose the (t, c, p,
d, b) layout, `VARIANT_AXES` the rest of a configuration; recomputation is the innermost axis,
priced by the search itself (the least recomputation that fits wins, `search.py`). A new knob (an
FSDP variant, MoE's expert-tensor-parallel size) is one more entry of the table; its default
values come from `simulator.vocabulary.SEARCHED`, as every axis's do.

Rules of the axes (the DERIVED entries of `SEARCHED`):
  t   powers of two up to `max_tp` dividing the heads, the KV heads and the GPUs
  c   the given sizes (default `default_context_parallel`) dividing gpus / t
  p   every divisor of gpus / (t c) up to the layer count for which a stage split exists;
      d = gpus / (t c p)
  b   the given micro-batch sizes, or every power of two, with b d dividing the global batch
  schedule, v   every priced schedule; interleaved with each v of `virtual_stages` that splits the
      layers (m divisible by p, Megatron-LM); one stage: 1F1B only (every schedule is the same)
  stage split   (`stage_splits`) "even": L/(p v) layers per chunk; "balance_embedding": the
      embedding and the LM head count as a layer each, L + 2 slots split evenly (Megatron-LM
      --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split);
      "first_last": the middle stages hold n = floor(L/p) or ceil(L/p) layers and the first and
      last stages the rest, the last one the smaller half (it also computes the logits; Megatron-LM
      --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers), each stage's
      layers divisible by v. So a p that does not divide L is tried.
  SP  on and off (on only with t > 1); ZeRO 0-3: >= 1 needs d > 1, 2-3 no pipeline (DeepSpeed)
      unless sharded as FSDP (`fsdp`: fsdp2 is ZeRO-3 as PyTorch fully_shard, which composes with
      TP and PP, as torchtitan trains FSDP x TP x PP; not with e > 1, which is not priced)
  etp, e   MoE models (Megatron-Core's parallel folding, `cost.moe`): etp the given sizes, or every
      power of two dividing t and the expert FFN width (etp < t only with SP when t > 1, as
      Megatron-Core requires); e the given sizes (default every power of two) dividing the experts
      and (t / etp) d: the expert-parallel ranks are data-parallel ranks and the tensor ranks the
      experts do not use (so e x etp divides t c d). etp = t is left out of the configuration
      (Megatron's default), so the space lists only the folded sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from simulator.cost.model_presets import ModelSpec
from simulator.parallel.schedule_registry import SEARCHED_SCHEDULES, schedule_spec
from simulator.vocabulary import SEARCHED

STAGE_SPLITS = ("even", "balance_embedding", "first_last")   # the stage-split axis's values
LONG_SEQUENCE = 16384   # from here on the search tries context parallelism by default


def powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


def default_context_parallel(model: ModelSpec, gpus: int) -> tuple[int, ...]:
    """c = 1, and for sequences >= LONG_SEQUENCE every power of two up to 32 with s divisible by 2c."""
    if model.seq < LONG_SEQUENCE:
        return (1,)
    return tuple(c for c in powers_of_two(min(32, gpus)) if model.seq % (2 * c) == 0)


@dataclass(frozen=True)
class Space:
    """What the search was asked: the model, the GPUs, the batch and every axis's values (None: the
    vocabulary's `SEARCHED`, resolved by `resolve`)."""

    model: ModelSpec
    gpus: int
    global_batch: int
    max_tp: int
    context_parallel: tuple[int, ...]
    expert_parallel: tuple[int, ...] | None
    micro_batch_sizes: tuple[int, ...] | None
    schedules: tuple[str, ...]
    virtual_stages: tuple[int, ...]
    stage_splits: tuple[str, ...]
    sequence_parallel: tuple[bool, ...]
    zero_stages: tuple[int, ...]
    recomputes: tuple[str, ...]
    fsdp: tuple[str, ...] = ("none",)
    expert_tp: tuple[int, ...] | None = None


def searched(name: str, given) -> tuple:
    """`given` as a tuple, or the vocabulary's default values of knob `name` for the search."""
    if given is not None:
        return tuple(given)
    value = SEARCHED[name]
    return SEARCHED_SCHEDULES if value == "SEARCHED_SCHEDULES" else tuple(value)


def default_stage_splits() -> tuple[str, ...]:
    """The splits `SEARCHED` asks for: even always; the balanced embedding when `balance_embedding`
    is searched True; first/last stage layers when `first_stage_layers` is searched (DERIVED)."""
    balanced = ("balance_embedding",) if True in SEARCHED["balance_embedding"] else ()
    first_last = ("first_last",) if SEARCHED.get("first_stage_layers") is not None else ()
    return ("even",) + balanced + first_last


def stage_splits(model: ModelSpec, p: int, v: int, kinds) -> list[dict]:
    """The stage splits of L layers over p stages of v chunks each (module docstring), as the
    `ParallelConfig` fields that ask for them; a split giving the same layers per chunk as one
    before it is left out (first/last 3/3 of 126 layers on 32 stages is the balanced embedding)."""
    L, out, chunks = model.layers, [], set()

    def add(fields: dict, per_stage: list[int], first_chunk_less: bool = False) -> None:
        key = tuple(x // v for _ in range(v) for x in per_stage)   # chunk c p + k on stage k
        if first_chunk_less:     # the balanced split: the first and the last chunk hold one layer fewer
            key = ((L + 2) // (p * v) - 1,) + ((L + 2) // (p * v),) * (p * v - 2) + ((L + 2) // (p * v) - 1,)
        if key not in chunks:
            chunks.add(key)
            out.append(fields)
    if "even" in kinds and L % (p * v) == 0:
        add({}, [L // p] * p)
    if p > 1 and "balance_embedding" in kinds and (L + 2) % (p * v) == 0 and (L + 2) // (p * v) >= 2:
        add({"balance_embedding": True}, [], first_chunk_less=True)
    if p > 1 and "first_last" in kinds:
        for n in sorted({L // p, -(-L // p)}):
            ends = L - n * (p - 2)
            first, last = ends - ends // 2, ends // 2
            stages = [first] + [n] * (p - 2) + [last]
            if min(stages) >= 1 and not any(x % v for x in stages):
                add({"first_stage_layers": first, "last_stage_layers": last}, stages)
    return out


def _tp(space: Space, chosen: dict) -> Iterator[dict]:
    m = space.model
    for t in powers_of_two(min(space.max_tp, space.gpus)):
        if not (m.heads % t or m.kv_heads % t or space.gpus % t):
            yield {"tp": t}


def _cp(space: Space, chosen: dict) -> Iterator[dict]:
    rest = space.gpus // chosen["tp"]
    return ({"cp": c} for c in space.context_parallel if rest % c == 0)


def _pp(space: Space, chosen: dict) -> Iterator[dict]:
    rest = space.gpus // (chosen["tp"] * chosen["cp"])
    for p in range(1, min(rest, space.model.layers) + 1):
        if rest % p == 0 and stage_splits(space.model, p, 1, space.stage_splits):
            yield {"pp": p, "dp": rest // p}


def _micro_batch(space: Space, chosen: dict) -> Iterator[dict]:
    B, d = space.global_batch, chosen["dp"]
    for b in space.micro_batch_sizes or powers_of_two(B):
        if B % (b * d) == 0:
            yield {"micro_batch_size": b}


def _schedule(space: Space, chosen: dict) -> Iterator[dict]:
    p = chosen["pp"]
    m = space.global_batch // (chosen["micro_batch_size"] * chosen["dp"])
    for s in space.schedules:
        if schedule_spec(s, priced=True).virtual_stages:
            for v in space.virtual_stages if p > 1 and m % p == 0 else ():
                if v > 1 and stage_splits(space.model, p, v, space.stage_splits):
                    yield {"schedule": s, "virtual_stages": v}
        elif p > 1 or s == "1f1b":
            yield {"schedule": s, "virtual_stages": 1}


def _split(space: Space, chosen: dict) -> list[dict]:
    return stage_splits(space.model, chosen["pp"], chosen["virtual_stages"], space.stage_splits)


def _sequence_parallel(space: Space, chosen: dict) -> Iterator[dict]:
    return ({"sequence_parallel": sp} for sp in sorted({bool(x) and chosen["tp"] > 1 for x in space.sequence_parallel}))


def _zero(space: Space, chosen: dict) -> Iterator[dict]:
    d, p = chosen["dp"], chosen["pp"]
    for z in (z for z in space.zero_stages if d > 1 or z == 0):
        for f in space.fsdp:
            sharded = f != "none"
            if (not sharded or z == 3) and (p == 1 or z < 2 or sharded):
                yield {"zero_stage": z, "fsdp": f}


def _expert(space: Space, chosen: dict) -> Iterator[dict]:
    m, d, t = space.model, chosen["dp"], chosen["tp"]
    if not m.num_experts:
        return iter(({"ep": 1},))
    sp = chosen.get("sequence_parallel", False)
    etps = space.expert_tp or [x for x in powers_of_two(t) if x == t or sp or t == 1]
    out = []
    for et in (x for x in etps if t % x == 0 and m.moe_ffn_hidden % x == 0 and (x == t or sp)):
        ranks = t // et * d
        sizes = space.expert_parallel or powers_of_two(ranks)
        if chosen.get("fsdp", "none") != "none":    # FSDP with expert parallelism is not searched (`cost.fsdp`)
            sizes = [e for e in sizes if e == 1]
        found = [e for e in sizes if ranks % e == 0 and m.num_experts % e == 0]
        if space.expert_parallel is None:
            found = found or [1]
        out += [{"ep": e} if et == t else {"ep": e, "etp": et} for e in found]
    return iter(out)


@dataclass(frozen=True)
class Axis:
    name: str                                       # what it chooses (the fields it sets)
    options: Callable[[Space, dict], object]        # (space, chosen so far) -> iterable of field dicts


LAYOUT_AXES = (Axis("tp", _tp), Axis("cp", _cp), Axis("pp, dp", _pp), Axis("micro_batch_size", _micro_batch))
VARIANT_AXES = (Axis("schedule, virtual_stages", _schedule), Axis("stage split", _split),
                Axis("sequence_parallel", _sequence_parallel), Axis("zero_stage, fsdp", _zero), Axis("etp, ep", _expert))


def walk(space: Space, axes, chosen: dict | None = None) -> Iterator[dict]:
    """Every combination of the axes' options after `chosen`, in the table's order."""
    chosen = chosen or {}
    if not axes:
        yield chosen
        return
    for option in axes[0].options(space, chosen):
        yield from walk(space, axes[1:], {**chosen, **option})
