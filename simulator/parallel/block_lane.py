"""The block's steps (models/block_plan.py) transformed per parallel axis, and ONE emitter that
walks the transformed list on any lane (issue 24, item 4).

Transforms, applied in this fixed order (`lane_items`), each returning a new list of items:
  tensor_parallel(steps, tp, sp)  Megatron-LM (Shoeybi et al. 2019, Sec. 3): a linear reading a
        replicated value is column-parallel (its output columns cut by tp; before it Megatron's f:
        identity forward, AllReduce of the input gradient), a linear reading a sharded value is
        row-parallel (its input rows cut; after it g: AllReduce forward, identity backward; its
        bias becomes a "bias" step after the reduction); attention and the activation between
        them keep a/tp heads and 4h/tp columns. With sequence parallelism (Korthikanti et al.
        2022) f is AllGather forward / ReduceScatter backward and g ReduceScatter / AllGather; the
        gathered input of a column-parallel linear is not kept but gathered again in backward
        (Sec. 4.2.2), and the replicated steps' gradients are partial sums (`sp_partial_grads`).
        The embedding's lookup is vocabulary-parallel (rank t's rows, a masked lookup, then g as an
        AllReduce); under SP its sum plus the positions is cut to this rank's sequence slice (a
        local split, its backward an AllGather: Megatron-Core's LanguageModelEmbedding with
        learned absolute positions).
  context_parallel(items)  the projections and attention between qkv and o become one `External`
        item the lane emits itself: ring or all-to-all attention over the context group
        (cp_attention.py, its projection kernels in cp_kernels.py).
  context_routing(items, order, mine, tokens)  a MoE block's expert choices all-gathered over the
        context group before its capacity slots are numbered (models/moe_steps.py).
  local_routing(items, capacity)  or, with one routing group per context rank, each rank's own.
  expert_parallel(items, ep)  a MoE block's experts step holds E/ep experts, between the dispatch
        and combine all-to-alls over the expert-parallel group (each its own backward).
The pipeline stage split (emit.Stages), ZeRO (zero.py) and the B/W split (bw_split.grad_op, used
here for every segment with parameters) then apply to the lane as a whole.

`emit_forward` / `emit_backward` cut the items into segments: the longest runs of steps with no
collective between them in that direction (a collective that is the identity in a direction is an
"identity" step there; the backward leaves out the steps and collectives of values without a
gradient, the MoE routing choices). Each forward segment is one `block_fwd` Compute (its inputs, parameters ->
its outputs and one cache tensor per step that keeps one, act/cache/{layer}/mb{j}/{step}); each
backward segment one `block_bwd` (or B `block_bwd_input` + W `block_bwd_weight`); the collectives
and external items sit between them. Temporaries are act/tp/{layer}/mb{j}/{value} (d{value} for
gradients).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache

from ..models import block_plan as plan
from ..models import moe_steps  # noqa: F401 -- registers the MoE step kinds the kernels below run
from ..models.block_plan import KINDS, Step
from ..ops import kernel
from ..program import Collective
from .emit import param


@dataclass(frozen=True)
class Comm:
    """A collective between steps over the lane's `group` ("tp", "cp" or "ep"): `forward` (None:
    identity) turns value `src` into `dst`; `backward` turns the gradient of dst into that of src.
    `width`: over the tensor group, features of the full (B, T, width) tensor; over another group,
    elements per sequence of what each rank sends (all-to-all) or holds (all-gather), along `axis`.
    `regather`: dst is not kept for backward but gathered again."""

    name: str
    forward: str | None
    backward: str | None
    src: str
    dst: str
    width: int
    regather: bool = False
    group: str = "tp"
    axis: int = 1

    def identity(self) -> Step:
        return Step(self.name, "identity", (self.src,), self.dst)


@dataclass(frozen=True)
class External:
    """Steps a lane emits itself (context-parallel attention): value `reads` -> value `writes`."""

    name: str
    reads: str
    writes: str
    steps: tuple[Step, ...]


def tensor_parallel(steps: tuple, tp: int, sp: bool, t: int = 0) -> tuple:
    out, sharded, rename = [], set(), {}
    for s in steps:
        s = replace(s, reads=tuple(rename.get(v, v) for v in s.reads))
        if s.kind == "embed":  # vocabulary-parallel: rank t's rows, then g (Megatron's VocabParallelEmbedding)
            (w, (V, h)), red = s.params[0], f"{s.writes}_sum"
            out += [replace(s, params=((w, (V // tp, h)),), meta=(("start", t * V // tp),)),
                    Comm(f"{s.name}_out", "all_reduce", None, s.writes, red, s.width)]
            rename[s.writes] = red
        elif s.kind == "pos" and sp:  # the whole sequence's positions, then this rank's slice
            full = f"{s.writes}_full"
            out += [replace(s, writes=full), Comm(f"{s.name}_split", "split", "all_gather", full, s.writes, s.width)]
        elif s.kind == "linear" and s.reads[0] not in sharded:  # column-parallel
            src, full = s.reads[0], f"{s.reads[0]}_full"
            out.append(Comm(f"{s.name}_in", "all_gather" if sp else None, "reduce_scatter" if sp else "all_reduce",
                            src, full, s.width, regather=sp))
            out.append(replace(s, reads=(full,), out_width=s.out_width // tp,
                               params=tuple((n, sh[:-1] + (sh[-1] // tp,)) for n, sh in s.params)))
            sharded.add(s.writes)
        elif s.kind == "linear":  # row-parallel: its bias is added once, after the reduction
            (w, shape), *bias = s.params
            out.append(replace(s, width=s.width // tp, params=((w, (shape[0] // tp, shape[1])),)))
            red = f"{s.writes}_sum"
            out.append(Comm(f"{s.name}_out", "reduce_scatter" if sp else "all_reduce", "all_gather" if sp else None,
                            s.writes, red, s.out_width))
            rename[s.writes] = red
            if bias:
                out.append(Step(f"{s.name}_bias", "bias", (red,), f"{s.writes}_b", tuple(bias), width=s.out_width))
                rename[s.writes] = f"{s.writes}_b"
        elif any(v in sharded for v in s.reads):  # this rank's heads / activation columns
            out.append(replace(s, width=s.width // tp, heads=s.heads // tp))
            sharded.add(s.writes)
        else:
            out.append(s)
    return tuple(out)


def sp_partial_grads(items) -> tuple[str, ...]:
    """Parameters `tensor_parallel` leaves whole (norms, biases after a reduction): under sequence
    parallelism their steps see T/tp tokens, so each rank's gradient is a partial sum."""
    sharded, names = set(), []
    for i in items:
        if not isinstance(i, Step) or i.kind in ("embed", "pos"):  # the whole sequence, before the split
            continue
        if i.kind == "linear" and not any(v in sharded for v in i.reads):
            sharded.add(i.writes)  # column-parallel
        elif any(v in sharded for v in i.reads):
            if i.kind != "linear":
                sharded.add(i.writes)
        else:
            names += i.param_names
    return tuple(names)


def context_parallel(items: tuple, positions: tuple = ()) -> tuple:
    items = tuple(replace(i, meta=(("positions", positions),)) if isinstance(i, Step) and i.kind == "pos" else i
                  for i in items)  # the embedding adds the learned positions of this rank's chunks
    names = [getattr(i, "name", None) for i in items]
    if "qkv" not in names:  # no attention (the embedding, the LM head): token-wise steps on this rank's tokens
        return items
    a, b = names.index("qkv"), names.index("o")
    inner, rest, o = items[a:b + 1], items[b + 1:], items[b]
    if len(o.params) > 1:  # W_o's bias is added after the attention, as a step of its own
        bias = Step("o_bias", "bias", (o.writes,), f"{o.writes}_b", o.params[1:], width=o.out_width)
        inner = inner[:-1] + (replace(o, params=o.params[:1]),)
        rest = (bias,) + tuple(replace(i, reads=tuple(bias.writes if v == o.writes else v for v in i.reads))
                               if isinstance(i, Step) else i for i in rest)
    return items[:a] + (External("attention", inner[0].reads[0], inner[-1].writes, inner),) + rest


def context_routing(items: tuple, order: tuple, mine: tuple, tokens: int) -> tuple:
    """MoE under context parallelism: the expert choices of this rank's `tokens` tokens are
    all-gathered over the context group before `slots`, which numbers the slots of the whole
    sequences (positions `order`) and keeps this rank's (`mine`): every split routes as one device."""
    out = []
    for i in items:
        if isinstance(i, Step) and i.kind == "slots":
            (src,) = i.reads
            out.append(Comm("cp_choices", "all_gather", None, src, f"{src}_all", tokens * i.top_k, group="cp"))
            i = replace(i, reads=(f"{src}_all",), meta=(("order", order), ("mine", mine)))
        out.append(i)
    return tuple(out)


ROUTED = ("slots", "count", "dispatch", "experts", "combine")   # the steps sized by the capacity


def local_routing(items: tuple, capacity: int) -> tuple:
    """MoE under context parallelism with one routing group per context rank (routing_groups = cp):
    every routed step sees this rank's group only, `capacity` slots per expert, and no choices
    cross ranks (Megatron-Core's `get_capacity` over the rank's own tokens); one device routes the
    same groups (`MoEBlock.groups`)."""
    return tuple(replace(i, capacity=capacity, meta=()) if isinstance(i, Step) and i.kind in ROUTED else i
                 for i in items)


def expert_parallel(items: tuple, ep: int) -> tuple:
    """The experts step holds E/ep experts and serves its expert-parallel group: an all-to-all over
    the group dispatches the (E, B C, h) buffer (rank i gets its experts' slots from every rank),
    another combines the outputs back; the backward of each is an all-to-all (GShard, Lepikhin et
    al. 2020, Algorithm 2; Megatron-Core's alltoall token dispatcher)."""
    out = []
    for i in items:
        if not (isinstance(i, Step) and i.kind == "experts"):
            out.append(i)
            continue
        (src,), width = i.reads, i.experts * i.capacity * i.width
        out += [Comm("ep_dispatch", "all_to_all", "all_to_all", src, f"{src}_ep", width, group="ep", axis=0),
                replace(i, reads=(f"{src}_ep",), writes=f"{i.writes}_ep", experts=i.experts // ep, ep=ep,
                        params=tuple((n, (sh[0] // ep,) + sh[1:]) for n, sh in i.params)),
                Comm("ep_combine", "all_to_all", "all_to_all", f"{i.writes}_ep", i.writes, width, group="ep", axis=0)]
    return tuple(out)


@lru_cache(maxsize=256)
def lane_items(steps: tuple, tp: int, sp: bool, cp_attention: bool, ep: int = 1, cp_routing: tuple = (), t: int = 0,
               positions: tuple = (), local_capacity: int = 0) -> tuple:
    """The fixed order: TP/SP (on tensor rank t), then CP (attention, the embedding's `positions`;
    with `cp_routing` = (order, mine, tokens) the MoE routing choices too, or with `local_capacity`
    the rank's own routing group), then EP."""
    items = tensor_parallel(steps, tp, sp, t) if tp > 1 else steps
    items = context_parallel(items, positions) if cp_attention else items
    items = context_routing(items, *cp_routing) if cp_routing else items
    items = local_routing(items, local_capacity) if local_capacity else items
    return expert_parallel(items, ep) if ep > 1 else items


# ---- segments ----------------------------------------------------------------------------------
def _segments(items, forward: bool) -> list:
    out, run = [], []
    for it in (items if forward else reversed(items)):
        if isinstance(it, Step) or (isinstance(it, Comm) and (it.forward if forward else it.backward) is None):
            run.append(it if isinstance(it, Step) else it.identity())
            continue
        if run:
            out.append(tuple(run if forward else reversed(run)))
        run = []
        out.append(it)
    if run:
        out.append(tuple(run if forward else reversed(run)))
    return out


def _reads(seg, nograd=frozenset()) -> list[str]:
    """The values a segment reads from outside it (in the backward: only those with a gradient)."""
    if isinstance(seg, Comm):
        return [seg.src]
    if isinstance(seg, External):
        return [seg.reads]
    written, out = set(), []
    for s in seg:
        out += [v for v in s.reads if v not in written and v not in out and v not in nograd]
        written.add(s.writes)
    return out


def _with_gradients(items) -> tuple[tuple, frozenset]:
    """The items the backward runs: without the steps whose output has no gradient (the MoE
    routing choices, slots and counts) and the collectives that move such values. -> (items,
    the values without a gradient)."""
    nograd = set()
    for i in items:
        if isinstance(i, Step) and not KINDS[i.kind].grad_inputs:
            nograd.update(i.reads)
        if isinstance(i, Step) and not KINDS[i.kind].differentiable:
            nograd.add(i.writes)
        elif isinstance(i, Comm) and i.src in nograd:
            nograd.add(i.dst)
    keep = tuple(i for i in items if not (isinstance(i, Step) and i.writes in nograd
                                          or isinstance(i, Comm) and i.dst in nograd))
    return keep, frozenset(nograd)


def _param_names(steps) -> list[str]:
    return [n for s in steps for n in s.param_names]


def _kept(items) -> dict[str, str]:
    """Step whose input is gathered again in backward -> the Comm's local source value."""
    return {s.name: c.src for c in items if isinstance(c, Comm) and c.regather
            for s in items if isinstance(s, Step) and c.dst in s.reads}


def _cached(steps, items) -> list[str]:
    regathered = _kept(items)
    return [s.name for s in steps if KINDS[s.kind].cached(s, 1) > 0 and s.name not in regathered]


def _comm(lane, r, c: Comm, kind: str, src: str, dst: str, j: int, tag: str) -> None:
    if c.group != "tp":
        group = (lane.cp_group_of if c.group == "cp" else lane.ep_group_of)[r]
        lane.builder.add(r, Collective(kind, src, dst, group, axis=c.axis, nbytes=8 * lane.microbatch_size * c.width,
                                       tag=tag, microbatch=j))
        return
    nb = lane._full_nbytes(c.width)
    lane._coll(r, kind, src, dst, j, tag, nb // lane.tp if kind == "all_gather" else nb)


def emit_forward(lane, r: int, li: int, lyr, items, inputs: dict, outputs: dict, j: int) -> None:
    """Values `inputs` (value -> tensor) to `outputs` (value -> tensor) on rank r."""
    b, (c, T) = lane.builder, lane._names(li, j)
    segs = _segments(items, True)
    last = {v: k for k, seg in enumerate(segs) for v in _reads(seg)}
    keep = set(_kept(items).values()) | {i.reads for i in items if isinstance(i, External)}
    where, tokens = dict(inputs), lane.config.seq_len // getattr(lane, "cp", 1)
    for k, seg in enumerate(segs):
        reads = _reads(seg)
        if isinstance(seg, Comm) and seg.forward == "split":  # this rank's slice of the sequence: no communication
            where[seg.dst] = outputs.get(seg.dst, f"{T}/{seg.dst}")
            b.compute(r, "seq_split", [where[seg.src]], [where[seg.dst]], attrs={"parts": lane.tp, "index": lane.t},
                      phase="forward", microbatch=j, label=f"F{j} {lyr.name} {seg.name}")
        elif isinstance(seg, Comm):
            where[seg.dst] = outputs.get(seg.dst, f"{T}/{seg.dst}")
            _comm(lane, r, seg, seg.forward, where[seg.src], where[seg.dst], j, f"{li}/{seg.name}/mb{j}")
        elif isinstance(seg, External):
            where[seg.writes] = lane.external_forward(r, li, lyr, seg, where[seg.reads], j)
        else:
            writes = [s.writes for s in seg if s.writes in outputs or last.get(s.writes, -1) > k]
            cached = _cached(seg, items)
            where.update({v: outputs.get(v, f"{T}/{v}") for v in writes})
            b.compute(r, "block_fwd", [*(where[v] for v in reads), *(param(li, n) for n in _param_names(seg))],
                      [*(where[v] for v in writes), *(f"{c}/{n}" for n in cached)],
                      attrs={"steps": seg, "reads": tuple(reads), "writes": tuple(writes), "cached": tuple(cached)},
                      flops=plan.flops(seg, lane.microbatch_size, tokens)[0], phase="forward", microbatch=j,
                      label=f"F{j} {lyr.name} {'+'.join(s.name for s in seg)}")
        b.free(r, *(where[v] for v in reads if last[v] == k and v not in keep and v not in inputs))


def emit_backward(lane, r: int, li: int, lyr, items, grads: dict, outputs: dict, j: int, accumulate: bool) -> None:
    """Gradients `grads` (value -> tensor, e.g. {"y": dy}) back to `outputs` (e.g. {"x": dx});
    parameter gradients into grad/{li}/* (added to the existing ones when `accumulate`)."""
    b, (c, T) = lane.builder, lane._names(li, j)
    items, nograd = _with_gradients(items)
    segs = _segments(items, False)
    left = Counter(v for seg in segs for v in _reads(seg, nograd))
    regather = {s: src for s, src in _kept(items).items()}
    comm_of = {i.dst: i for i in items if isinstance(i, Comm)}
    gt, tokens = dict(grads), lane.config.seq_len // getattr(lane, "cp", 1)
    mine = lambda v: v not in grads.values()  # noqa: E731 -- the caller frees what it passed in

    def out_name(v):
        left[v] -= 1
        return outputs[v] if left[v] == 0 and v in outputs else f"{T}/d{v}"

    for seg in segs:
        if isinstance(seg, Comm):
            d = gt.pop(seg.dst)
            gt[seg.src] = out_name(seg.src)
            _comm(lane, r, seg, seg.backward, d, gt[seg.src], j, f"{li}/{seg.name}/b/mb{j}")
            b.free(r, *([d] if mine(d) else []))
            if seg.regather:
                b.free(r, f"{T}/{seg.src}")
            continue
        if isinstance(seg, External):
            d = gt.pop(seg.writes)
            x = f"{T}/{seg.reads}"
            gt[seg.reads] = lane.external_backward(r, li, lyr, seg, x, d, j, accumulate)
            left[seg.reads] -= 1
            b.free(r, x, *([d] if mine(d) else []))
            continue
        reads, written = _reads(seg, nograd), [s.writes for s in seg]
        g_in = [v for v in written + reads if v in gt]
        ins_g = [gt.pop(v) for v in g_in]
        cached = _cached(seg, items)
        restored = [s.name for s in seg if s.name in regather]
        for n in restored:  # the sequence-parallel input, gathered again (Korthikanti et al. 2022, 4.2.2)
            comm = comm_of[seg[[s.name for s in seg].index(n)].reads[0]]
            _comm(lane, r, comm, "all_gather", f"{T}/{regather[n]}", f"{T}/{comm.dst}", j, f"{li}/{n}/re/mb{j}")
        outs = [out_name(v) for v in reads]
        gt.update(zip(reads, outs))
        ins = [*(f"{c}/{n}" for n in cached), *(f"{T}/{comm_of[s.reads[0]].dst}" for s in seg if s.name in restored),
               *ins_g, *(param(li, n) for n in _param_names(seg))]
        attrs = {"steps": seg, "cached": tuple(cached), "restored": tuple(restored), "grads_in": tuple(g_in),
                 "grads_out": tuple(reads), "n_params": len(_param_names(seg))}
        _, fl_in, fl_w = plan.flops(seg, lane.microbatch_size, tokens)
        label = f"{lyr.name} {'+'.join(s.name for s in reversed(seg))}"
        if _param_names(seg):
            lane.grad_op(r, li, j, "block_bwd", ins, outs, tuple(_param_names(seg)), accumulate, (fl_in, fl_w),
                         attrs=attrs, label=label)
        else:
            b.compute(r, "block_bwd", ins, outs, attrs=attrs, flops=fl_in, phase="backward", microbatch=j,
                      label=f"B{j} {label}")
        b.free(r, *ins[:len(cached) + len(restored)], *(t for t in ins_g if mine(t) and t not in outs))


# ---- the kernels: the block_plan interpreter on one segment -------------------------------------
@kernel("block_fwd")
def block_fwd(*ins, steps, reads, writes, cached):
    values = dict(zip(reads, ins))
    cache = plan.forward(steps, dict(zip(_param_names(steps), ins[len(reads):])), values)
    return tuple(values[w] for w in writes) + tuple(cache[n] for n in cached)


@kernel("block_bwd_input")
def block_bwd_input(*ins, steps, cached, restored, grads_in, grads_out, n_params=0):
    """B: -> (gradients of grads_out..., weight cache)."""
    k = len(cached) + len(restored)
    cache = dict(zip(cached + restored, ins[:k]))
    grads = dict(zip(grads_in, ins[k:k + len(grads_in)]))
    wcache = plan.backward_input(steps, dict(zip(_param_names(steps), ins[k + len(grads_in):])), cache, grads)
    return tuple(grads[v] for v in grads_out) + (wcache,)


@kernel("seq_split")
def seq_split(x, parts: int, index: int):
    """Rank `index`'s slice of the sequence (axis 1) in `parts` (Megatron's scatter to the
    sequence-parallel region; its backward is an all-gather)."""
    n = x.shape[1] // parts
    return x[:, index * n:(index + 1) * n].copy()


@kernel("block_bwd_weight")
def block_bwd_weight(wcache, *existing, steps, **attrs):
    """W: the segment's parameter gradients (added to `existing`). A segment with no input gradient
    (the embedding's) kept its inputs whole in B (bw_split's `pack`): W runs its backward here."""
    if isinstance(wcache, tuple):
        *_, wcache = block_bwd_input(*wcache, steps=steps, **{k: attrs[k] for k in ("cached", "restored", "grads_in",
                                                                                     "grads_out")})
    g = plan.backward_weight(steps, wcache)
    out = tuple(g[n] for n in _param_names(steps))
    return tuple(a + e for a, e in zip(out, existing)) if existing else out


@kernel("block_bwd")
def block_bwd(*ins, steps, cached, restored, grads_in, grads_out, n_params):
    n = len(cached) + len(restored) + len(grads_in) + n_params
    *outs, wcache = block_bwd_input(*ins[:n], steps=steps, cached=cached, restored=restored, grads_in=grads_in,
                                    grads_out=grads_out)
    return tuple(outs) + (block_bwd_weight(wcache, *ins[n:], steps=steps) if n_params else ())
