"""Mixture-of-experts layers as Megatron-Core runs them: the one home of their tokens, collectives
and layout rules, which the closed form (`analytic`) and the event clock (`scale_program`) consume.

Per MoE layer and micro-batch, on one rank (T = b s / c tokens; t = tp, etp the expert-tensor size,
e = ep, k = --moe-router-topk, h hidden):
- tokens the rank routes: T / t with sequence parallelism (each TP rank holds its slice), T without
  (the TP ranks hold the same tokens);
- its experts' rows: k x (T / t) x etp with SP (the etp ranks of an expert-tensor group gather
  their tokens), k T without SP; when every expert is padded to its capacity
  (--moe-pad-expert-input-to-capacity) E x ceil(c k T_r / E) instead, T_r the tokens counted there
  (Megatron-Core's get_capacity over the rank's local tokens; `moe_steps.capacity`, the runnable's
  rule), else times min(1, c): balanced routing overflows no expert unless c < 1 drops tokens
  (Megatron-Core --moe-expert-capacity-factor; Fedus et al. 2021 eq. 3);
- the router (h x E over the routed tokens) runs before the dispatch (`scale_kernels.MoEParts`);
- dispatch (Megatron-Core token_dispatcher.py):
    alltoall / flex: an all-to-all of the routed rows (training dtype, k copies of each token) over the ep
      group, then (etp > 1, SP) an all-gather over the expert-tensor group; the combine mirrors it
      (reduce-scatter, then all-to-all). flex (DeepEP, HybridEP) over an ep group spanning n nodes
      of g of its ranks each sends a token once to each node holding one of its experts, by RDMA to
      the rank with the same in-node index, then forwards it over NVLink to its experts' ranks
      (DeepSeek-V3 technical report Sec. 3.2.2; DeepEP's normal kernels); the combine reduces in the
      node first and returns the same way (`moe_collective_time_s`);
    allgather: an all-gather of the rank's hidden states over the etp x ep ranks (tp_ep group) and
      a reduce-scatter of the same size to combine;
  the backward runs each collective once more, mirrored (same bytes).
Overlap (Megatron-Core; both off by default, as in Megatron-LM):
- --overlap-moe-expert-parallel-comm (combined 1F1B: a backward and the next forward of another
  micro-batch run merged, layer by layer, each one's dispatch / combine under the other's compute;
  DeepSeek-V3's DualPipe pairs chunks the same way, Sec. 3.2.1): which actions merge, in which
  order, and the closed form of a merged layer pair are `simulator.cost.moe_overlap`'s; the
  actions left alone (warm-up, cool-down) run their collectives blocking. Megatron refuses it
  without ep > 1, with the allgather dispatcher, with full recomputation, with pp > 1 and no
  virtual stages, and together with --moe-shared-expert-overlap;
- --moe-shared-expert-overlap: the shared experts' fc1 under the dispatch and fc2 under the combine
  (their input gradients likewise in the backward; alltoall or flex only, as Megatron-Core checks),
  `moe_overlap`'s rules, priced alike by the clock and the closed form.
Layout rules (refused with Megatron's own rule): etp x ep divides t c d per stage
(`simulator.mesh.check_expert_layout`); ep divides the experts (arguments.py); etp divides the
expert FFN width; expert-tensor groups smaller than tp need sequence parallelism (Megatron-Core's
MoELayer refuses tp > 1 without it in training; parasim keeps pricing the etp = tp case without SP,
its TP ranks duplicating their tokens, as before).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from simulator.cost.comm import collective_time_s
from simulator.cost.hardware import DTYPE_NBYTES
from simulator.errors import ParasimError
from simulator.models.moe_steps import capacity
from simulator.vocabulary import BY_NAME

DISPATCHERS = BY_NAME["moe_token_dispatcher"].choices


class MoeCollective(NamedTuple):
    """One collective of a MoE layer: kind, the group it runs over (a `ParallelConfig` group
    name: "ep", "ep_flex", "etp" or "tp_ep"), and its size as `comm.collective_time_s` takes it (all-to-all:
    the bytes each rank sends; all-gather / reduce-scatter: the gathered whole)."""

    kind: str
    group: str
    nbytes: float


def expert_tokens(model, tokens: float, assumptions) -> float:
    """Rows one rank's experts process for `tokens` routed tokens: E x the capacity ceil(c k tokens / E)
    when experts are padded to capacity (Megatron-Core's get_capacity over the rank's routed tokens,
    `moe_steps.capacity`, the runnable's rule), tokens x top-k x min(1, c) otherwise (balanced routing: a
    factor below 1 drops the overflow, one above it pads nothing) (module docstring)."""
    cf, k = assumptions.capacity_factor, model.moe_router_topk
    if cf is None:
        return tokens * k
    if assumptions.pad_to_capacity:    # every expert's buffer at its capacity (`moe_steps.capacity`)
        return model.num_experts * capacity(tokens, model.num_experts, k, cf)
    return tokens * k * min(1.0, cf)


def routed_tokens(model, cfg) -> float:
    """Tokens whose hidden states one rank routes per micro-batch (module docstring)."""
    T = cfg.micro_batch_size * model.seq / cfg.cp
    return T / cfg.tp if cfg.sequence_parallel else T


def expert_rows(model, cfg, assumptions) -> float:
    """Rows of this rank's expert GEMMs per micro-batch (module docstring)."""
    fold = cfg.expert_tp if cfg.sequence_parallel else 1
    return expert_tokens(model, routed_tokens(model, cfg) * fold, assumptions)


def moe_collectives(model, cfg, assumptions) -> tuple[tuple[MoeCollective, ...], tuple[MoeCollective, ...]]:
    """(dispatch, combine) collectives of one MoE layer's forward (module docstring); empty when
    the model is dense or the layer needs none."""
    if not getattr(model, "num_experts", 0):
        return (), ()
    h, e, et = model.hidden, cfg.ep, cfg.expert_tp
    sp, e_bytes = cfg.sequence_parallel, DTYPE_NBYTES[assumptions.dtype]    # hidden states in the training dtype
    if assumptions.moe_token_dispatcher == "allgather":
        n = et * e if sp else e
        whole = e_bytes * h * routed_tokens(model, cfg) * n
        group = "tp_ep" if sp else "ep"
        if n == 1:
            return (), ()
        return (MoeCollective("all_gather", group, whole),), (MoeCollective("reduce_scatter", group, whole),)
    rows = e_bytes * h * expert_tokens(model, routed_tokens(model, cfg), assumptions)
    group = "ep_flex" if assumptions.moe_token_dispatcher == "flex" else "ep"
    a2a = (MoeCollective("all_to_all", group, rows),) if e > 1 else ()
    if et > 1 and sp:
        return a2a + (MoeCollective("all_gather", "etp", rows * et),), (MoeCollective("reduce_scatter", "etp",
                                                                                    rows * et),) + a2a
    return a2a, a2a


def exposed_moe_s(A, dispatch_s: float, combine_s: float, passes: int, shared_fwd=(0.0, 0.0),
                  shared_b=(0.0, 0.0)) -> float:
    """Exposed seconds of one layer's MoE collectives per micro-batch, the layer run alone (module
    docstring): `dispatch_s`, `combine_s` one pass's dispatch and combine, `passes` how many passes
    run them (2, or 3 with a fully recomputed forward); with --moe-shared-expert-overlap
    `shared_fwd`, `shared_b` the shared experts' kernels under the first and the second
    collectives of a forward and of a backward pass (`moe_overlap.shared_halves`). The merged pairs
    of --overlap-moe-expert-parallel-comm are `moe_overlap.overlap_exposed_per_layer`'s."""
    if A.shared_expert_overlap:
        def one(under):
            return max(0.0, dispatch_s - under[0]) + max(0.0, combine_s - under[1])
        return one(shared_fwd) * (passes - 1) + one(shared_b)
    return passes * (dispatch_s + combine_s)


def moe_group(cfg, name: str, tp_index: int = 0, stage: int = 0) -> list[int]:
    """The ranks of a `MoeCollective.group` for this rank ("ep_flex": the ep group, dispatched by flex)."""
    return {"ep": cfg.ep_group, "ep_flex": cfg.ep_group, "etp": cfg.etp_group,
            "tp_ep": cfg.tp_ep_group}[name](tp_index, stage)


def nodes_hit(experts: int, topk: int, nodes: int) -> float:
    """Expected number of the `nodes` (each holding experts / nodes of the experts) that hold at least
    one of a token's top-k experts, the k chosen uniformly without repetition (balanced routing):
    nodes x (1 - C(E - E/n, k) / C(E, k))."""
    miss = math.comb(experts - experts // nodes, topk) / math.comb(experts, topk)
    return nodes * (1.0 - miss)


def moe_collective_time_s(kind: str, group_name: str, nbytes: float, ranks, topo, algo: str, experts: int,
                          topk: int) -> float:
    """Seconds of one MoE collective over global `ranks` (module docstring): flex's all-to-all over
    an ep group of n > 1 nodes of g ranks each as an RDMA all-to-all over the n ranks of one in-node
    index carrying each token once per node it needs (`nodes_hit` / top-k of the rows), then an
    NVLink all-to-all of the rows over the node's g ranks; everything else `comm.collective_time_s`."""
    nodes = topo.nodes_of(ranks) if group_name == "ep_flex" and experts and topk else {}
    if len(nodes) < 2 or len({len(v) for v in nodes.values()}) > 1:
        return collective_time_s(kind, nbytes, ranks, topo, algo)
    rail = [v[0] for v in nodes.values()]
    node = next(iter(nodes.values()))
    once = nbytes * nodes_hit(experts, topk, len(nodes)) / topk
    return collective_time_s(kind, once, rail, topo, algo) + collective_time_s(kind, nbytes, node, topo, algo)


def check_moe(model, cfg, assumptions=None) -> None:
    """The layout and overlap rules of the module docstring, each refused with its rule and numbers."""
    experts = getattr(model, "num_experts", 0)
    if assumptions is not None and (assumptions.overlap_moe_comm or assumptions.shared_expert_overlap) \
            and not experts:
        raise ParasimError("the MoE overlap options need a mixture-of-experts model (num_experts > 0)")
    if (cfg.ep > 1 or cfg.etp is not None and cfg.etp != cfg.tp) and not experts:
        raise ParasimError(f"expert parallelism ep={cfg.ep}, etp={cfg.expert_tp} needs a mixture-of-experts model "
                           f"(num_experts > 0)")
    if not experts:
        return
    if experts % cfg.ep:
        raise ParasimError(f"ep={cfg.ep} must divide the {experts} experts (Megatron-LM: number of experts should "
                           f"be a multiple of expert model parallel size)")
    if model.moe_ffn_hidden % cfg.expert_tp:
        raise ParasimError(f"etp={cfg.expert_tp} must divide the expert FFN width {model.moe_ffn_hidden}")
    if cfg.expert_tp != cfg.tp and cfg.tp > 1 and not cfg.sequence_parallel:
        raise ParasimError(f"MoE with tp={cfg.tp} and etp={cfg.expert_tp} needs sequence parallelism "
                           f"(Megatron-Core's MoELayer refuses MoE with tensor parallelism and without sequence "
                           f"parallelism in training)")
    if assumptions is None:
        return
    A = assumptions
    if A.overlap_moe_comm:          # Megatron-Core TransformerConfig.__post_init__
        rules = ((cfg.ep > 1, "is only supported with expert model parallelism (ep > 1)"),
                 (A.moe_token_dispatcher != "allgather", "is supported with the alltoall/flex token dispatcher"),
                 (cfg.recompute != "full", "needs full recomputation disabled"),
                 (cfg.pp == 1 or cfg.virtual_stages > 1, "needs virtual pipeline stages when pp > 1"),
                 (not A.shared_expert_overlap, "cannot be combined with --moe-shared-expert-overlap"))
        for ok, rule in rules:
            if not ok:
                raise ParasimError(f"--overlap-moe-expert-parallel-comm {rule} (Megatron-Core), here ep={cfg.ep}, "
                                   f"dispatcher {A.moe_token_dispatcher}, recompute {cfg.recompute}, pp={cfg.pp}, "
                                   f"v={cfg.virtual_stages}")
    if A.shared_expert_overlap and (A.moe_token_dispatcher == "allgather" or not model.moe_shared_expert_hidden):
        raise ParasimError("--moe-shared-expert-overlap only works with shared experts "
                           "(--moe-shared-expert-intermediate-size) and the alltoall or flex token dispatcher "
                           "(Megatron-Core)")


def moe_layouts(model, gpus: int, tp: int = 1, cp: int = 1, pp: int = 1) -> list[tuple[int, int]]:
    """Every (ep, etp) Megatron-Core accepts for this model on `gpus` GPUs with these dense degrees:
    ep dividing the experts, etp dividing tp (an expert-tensor group inside a tensor group; parasim
    searches no wider one) and the expert FFN width, etp x ep dividing t c d (`check_moe`: etp < tp
    also needs sequence parallelism when tp > 1). Dense models: [(1, tp)]. For `search`."""
    experts = getattr(model, "num_experts", 0)
    if gpus % (tp * cp * pp):
        raise ParasimError(f"{gpus} GPUs are not divisible by tp x cp x pp = {tp * cp * pp}")
    if not experts:
        return [(1, tp)]
    per_stage = gpus // pp
    out = []
    for etp in (x for x in range(1, tp + 1) if tp % x == 0 and model.moe_ffn_hidden % x == 0):
        for ep in (x for x in range(1, experts + 1) if experts % x == 0):
            if per_stage % (etp * ep) == 0:
                out.append((ep, etp))
    return out


def moe_layer_pattern(text: str, layers: int) -> tuple[int, ...]:
    """Megatron-LM's --moe-layer-freq as a 0/1 tuple per layer (1: MoE), read without evaluating it:
    an integer N (layer i is MoE when i % N == 0) or a list expression of [0/1, ...] lists joined by
    + and repeated by * (e.g. "([0]*3+[1]*58)"), whose length must be the layer count."""
    text = str(text).strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise ParasimError(f"--moe-layer-freq must be a positive integer or a pattern, got {text!r}")
        return tuple(int(i % n == 0) for i in range(layers))
    toks = [t for t in _tokens(text)]
    pos, out = _expr(toks, 0, text)
    if pos != len(toks):
        raise ParasimError(f"--moe-layer-freq {text!r}: unexpected {toks[pos]!r}")
    if len(out) != layers or set(out) - {0, 1}:
        raise ParasimError(f"--moe-layer-freq {text!r} gives {len(out)} entries of {sorted(set(out))}; it must give "
                           f"one 0 or 1 per layer ({layers})")
    return tuple(out)


def _tokens(text: str):
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            yield text[i:j]
            i = j
        elif ch in "[](),+*":
            yield ch
            i += 1
        else:
            raise ParasimError(f"--moe-layer-freq {text!r}: {ch!r} is not part of a layer pattern "
                               f"(integers, [ ], ( ), +, *)")


def _expr(toks, pos, text):
    pos, out = _term(toks, pos, text)
    while pos < len(toks) and toks[pos] == "+":
        pos, more = _term(toks, pos + 1, text)
        out = out + more
    return pos, out


def _term(toks, pos, text):
    if pos >= len(toks):
        raise ParasimError(f"--moe-layer-freq {text!r} ends too early")
    if toks[pos] == "(":
        pos, out = _expr(toks, pos + 1, text)
        if pos >= len(toks) or toks[pos] != ")":
            raise ParasimError(f"--moe-layer-freq {text!r}: missing )")
        pos += 1
    elif toks[pos] == "[":
        out, pos = [], pos + 1
        while pos < len(toks) and toks[pos] != "]":
            if not toks[pos].isdigit():
                raise ParasimError(f"--moe-layer-freq {text!r}: expected a number, got {toks[pos]!r}")
            out.append(int(toks[pos]))
            pos += 1
            if pos < len(toks) and toks[pos] == ",":
                pos += 1
        if pos >= len(toks):
            raise ParasimError(f"--moe-layer-freq {text!r}: missing ]")
        pos += 1
    else:
        raise ParasimError(f"--moe-layer-freq {text!r}: unexpected {toks[pos]!r}")
    while pos < len(toks) and toks[pos] == "*":
        if pos + 1 >= len(toks) or not toks[pos + 1].isdigit() or int(toks[pos + 1]) > 100_000:
            raise ParasimError(f"--moe-layer-freq {text!r}: * takes a repeat count up to 100000")
        out, pos = out * int(toks[pos + 1]), pos + 2
    return pos, out

