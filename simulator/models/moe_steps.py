"""The mixture-of-experts half of a block as steps of the block description (issue 24, item 4):
the routing math and the step kinds that `block_plan`'s interpreter runs, registered into
`block_plan.KINDS` on import, and `moe_block`, the one home of the MoE block's order.

    x1, m = the dense block's attention half (block_plan.attention_half)
    step      kind      reads                 writes  params
    router    router    m                     probs   w_router (h, E)     softmax(m W_r)
    topk      topk      probs                 gates   -                   the k gates
    choose    choose    probs                 choice  -                   the k experts (no gradient)
    slots     slots     choice                flat    -                   capacity slots (no gradient)
    count     count     flat                  stats   -                   routing counts (no gradient)
    dispatch  dispatch  m, flat               disp    -                   the (E, B C, h) buffer
    experts   experts   disp                  eo      w_fc, b_fc, w_proj, b_proj (stacked over E)
    combine   combine   x1, eo, gates, flat   y       -                   y = x1 + sum gate x expert

Routing (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021): e_c is the
token's c-th most probable expert (ties: the lower index); gates p_e for k = 1, p_{e_c} / sum p for
k = 2. Capacity C = ceil(cf k s / E) per sequence and expert; slots are filled choice by choice,
tokens in position order, an assignment beyond C is dropped. With g routing groups per sequence
(`MoEGPTConfig.routing_groups`) each group of s / g positions fills its own ceil(cf k s / (g E)). `flat` is each assignment's row of the
(E, B C) buffer (e B C + b C + slot, -1 dropped).

The parallel transforms (parallel/block_lane.py) act on these steps: expert parallelism puts the
dispatch / combine all-to-all around `experts` (which then holds E/ep experts and sees the buffers
of its ep group, source-major: `_to_experts`); context parallelism all-gathers `choice` over the
context group before `slots` (which then numbers the whole sequence's slots and keeps its own
positions), so every split routes exactly as one device. Values without a gradient (choice, flat,
stats) are skipped by the backward.
"""

from __future__ import annotations

import math

import numpy as np

from . import block_plan as plan
from . import functional as K
from .block_plan import KINDS, Kind, Step, linear

EXPERT_PARAMS = ("w_fc", "b_fc", "w_proj", "b_proj")  # stacked over experts on axis 0


def capacity(seq_len: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """C = ceil(cf x k x s / E), at least 1 (GShard Algorithm 1, per group of s tokens)."""
    return max(1, math.ceil(capacity_factor * top_k * seq_len / experts))


def choose(probs: np.ndarray, top_k: int):
    """probs (B, s, E) -> (expert (B, s, k) int, gates (B, s, k)): the k most probable experts
    (ties: the lower index); gates p_e (k = 1) or renormalised over the k (k = 2)."""
    expert = np.argsort(-probs, axis=-1, kind="stable")[..., :top_k]  # (B, s, k)
    chosen = np.take_along_axis(probs, expert, axis=-1)  # (B, s, k)
    return expert, chosen if top_k == 1 else chosen / chosen.sum(axis=-1, keepdims=True)


def assign_slots(expert: np.ndarray, experts: int, cap: int) -> np.ndarray:
    """expert (B, s, k) of whole sequences -> slot (B, s, k), -1 = dropped. Slots count per
    sequence and expert, choice by choice, tokens in position order."""
    B, s, top_k = expert.shape
    slot = np.full((B, s, top_k), -1, dtype=np.int64)
    used = np.zeros((B, experts), dtype=np.int64)  # assignments so far per sequence and expert
    for c in range(top_k):
        onehot = np.eye(experts, dtype=np.int64)[expert[..., c]]  # (B, s, E)
        pos = (np.cumsum(onehot, axis=1) - onehot + used[:, None, :])  # earlier tokens choosing e
        pos = np.take_along_axis(pos, expert[..., c:c + 1], axis=-1)[..., 0]  # (B, s)
        slot[..., c] = np.where(pos < cap, pos, -1)
        used += onehot.sum(axis=1)
    return slot


def route(probs: np.ndarray, top_k: int, cap: int):
    """probs (B, s, E) -> (expert (B, s, k) int, slot (B, s, k) int with -1 = dropped, gates (B, s, k))."""
    expert, gates = choose(probs, top_k)
    return expert, assign_slots(expert, probs.shape[-1], cap), gates


def _to_experts(buf, ep: int):
    """(ep E_loc, T, h) source-major (as the dispatch all-to-all delivers it) -> (E_loc, ep T, h)."""
    n, T, h = buf.shape
    return buf.reshape(ep, n // ep, T, h).transpose(1, 0, 2, 3).reshape(n // ep, ep * T, h)


def _from_experts(buf, ep: int):
    """(E_loc, ep T, h) -> (ep E_loc, T, h) source-major (for the combine all-to-all)."""
    e, n, h = buf.shape
    return buf.reshape(e, ep, n // ep, h).transpose(1, 0, 2, 3).reshape(ep * e, n // ep, h)


# ---- the kinds ---------------------------------------------------------------------------------------
def _router_fwd(step, p, m):
    z = m @ p[0]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    return probs, (m, probs)


def _router_bwd_in(step, p, cache, dprobs):
    m, probs = cache
    dz = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True))  # softmax backward
    return (dz @ p[0].T,), (m, dz)


def _router_bwd_w(step, wc):
    m, dz = wc
    return (m.reshape(-1, step.width).T @ dz.reshape(-1, step.out_width),)


def _topk_fwd(step, p, probs):
    expert, gates = choose(probs, step.top_k)
    return gates, (probs, expert, gates)


def _topk_bwd_in(step, p, cache, dgates):
    """k = 1: g = p_e; k = 2: g_c = p_c / S, so dp_c = (dg_c - sum_c' dg_c' g_c') / S."""
    probs, expert, gates = cache
    chosen = np.take_along_axis(probs, expert, axis=-1)
    if step.top_k == 1:
        dchosen = dgates
    else:
        dchosen = (dgates - (dgates * gates).sum(-1, keepdims=True)) / chosen.sum(-1, keepdims=True)
    dprobs = np.zeros_like(probs)
    np.put_along_axis(dprobs, expert, dchosen, axis=-1)
    return (dprobs,), None


def _choose_fwd(step, p, probs):
    return choose(probs, step.top_k)[0].astype(np.float64), None  # float64: all-gathered under cp


def _slots_fwd(step, p, choice):
    """choice (B, T, k) -> flat (B, T, k). With `order` (context parallelism) `choice` is the
    context group's (B, s, k) in rank order, put back in position order; `mine` are this rank's."""
    meta = dict(step.meta)
    expert = choice.astype(np.int64)
    if meta.get("order"):
        full = np.zeros(expert.shape, dtype=np.int64)
        full[:, list(meta["order"])] = expert
        slot = assign_slots(full, step.experts, step.capacity)[:, list(meta["mine"])]
        expert = full[:, list(meta["mine"])]
    elif meta.get("groups"):       # several routing groups: each numbers its own C / g slots
        groups = meta["groups"]
        cg = step.capacity // len(groups)
        slot = np.full(expert.shape, -1, dtype=np.int64)
        for gi, pos in enumerate(groups):
            got = assign_slots(expert[:, list(pos)], step.experts, cg)
            slot[:, list(pos)] = np.where(got >= 0, gi * cg + got, -1)
    else:
        slot = assign_slots(expert, step.experts, step.capacity)
    B, C = expert.shape[0], step.capacity
    row = expert * (B * C) + np.arange(B)[:, None, None] * C + slot
    return np.where(slot >= 0, row, -1), None


def _count_fwd(step, p, flat):
    """(E + 1,) float64: assignments kept per expert, then the number dropped."""
    kept = flat >= 0
    per = flat.shape[0] * step.capacity
    counts = np.bincount(flat[kept] // per, minlength=step.experts).astype(np.float64)
    return np.append(counts, float(np.sum(~kept))), None


def _dispatch_fwd(step, p, m, flat):
    B, h = m.shape[0], m.shape[-1]
    disp = np.zeros((step.experts * B * step.capacity, h))
    kept = flat >= 0
    disp[flat[kept]] = np.broadcast_to(m[..., None, :], flat.shape + (h,))[kept]
    return disp.reshape(step.experts, B * step.capacity, h), flat


def _dispatch_bwd_in(step, p, flat, ddisp):
    rows = ddisp.reshape(-1, ddisp.shape[-1])[np.maximum(flat, 0)]  # (B, T, k, h)
    return (np.where((flat >= 0)[..., None], rows, 0.0).sum(axis=2), None), None


def _experts_fwd(step, p, buf):
    w_fc, b_fc, w_proj, b_proj = p
    xin = _to_experts(buf, step.ep)
    hpre = xin @ w_fc + b_fc[:, None, :]  # (E', T, h) @ (E', h, f) -> (E', T, f)
    g, _ = K.gelu_forward(hpre)
    return _from_experts(g @ w_proj + b_proj[:, None, :], step.ep), (xin, hpre, g)


def _experts_bwd_in(step, p, cache, deo):
    w_fc, _, w_proj, _ = p
    xin, hpre, g = cache
    dout = _to_experts(deo, step.ep)
    dh = K.gelu_backward(hpre, dout @ w_proj.transpose(0, 2, 1))
    return (_from_experts(dh @ w_fc.transpose(0, 2, 1), step.ep),), (xin, dh, g, dout)


def _experts_bwd_w(step, wc):
    """xin^T dh, sum dh, g^T dout, sum dout per expert (no communication: B brought every token)."""
    xin, dh, g, dout = wc
    return xin.transpose(0, 2, 1) @ dh, dh.sum(axis=1), g.transpose(0, 2, 1) @ dout, dout.sum(axis=1)


def _experts_flops(step, B, s):
    """4 h f per slot (fc and proj) over the E B C slots this rank's experts serve (ep x E/ep x B C)."""
    f = 4.0 * step.width * step.out_width * step.experts * step.ep * step.capacity * B
    return f, f, f


def _combine_fwd(step, p, x1, eo, gates, flat):
    rows = eo.reshape(-1, eo.shape[-1])[np.maximum(flat, 0)]  # (B, T, k, h)
    w = np.where(flat >= 0, gates, 0.0)[..., None]
    return x1 + (w * rows).sum(axis=2), (flat, gates, eo)


def _combine_bwd_in(step, p, cache, dy):
    flat, gates, eo = cache
    kept = flat >= 0
    rows = eo.reshape(-1, eo.shape[-1])[np.maximum(flat, 0)]
    dgates = np.where(kept, np.einsum("bskh,bsh->bsk", rows, dy), 0.0)
    deo = np.zeros((eo.shape[0] * eo.shape[1], eo.shape[-1]))
    np.add.at(deo, flat[kept], (gates[..., None] * dy[:, :, None, :])[kept])
    return (dy, deo.reshape(eo.shape), dgates, None), None


def _none(step, *a):
    return 0.0, 0.0, 0.0


def _no_backward(step, p, cache, dy):  # never called: the interpreter skips values without gradients
    raise AssertionError(f"{step.name} has no gradient")


def _router_flops(step, B, s):
    f = 2.0 * B * s * step.width * step.out_width
    return f, f, f


KINDS.update({
    "router": Kind(_router_fwd, _router_bwd_in, _router_bwd_w, _router_flops, lambda st, s: st.width + st.out_width),
    "topk": Kind(_topk_fwd, _topk_bwd_in, None, _none, lambda st, s: st.out_width + 2 * st.top_k),
    "choose": Kind(_choose_fwd, _no_backward, None, _none, lambda st, s: 0, differentiable=False),
    "slots": Kind(_slots_fwd, _no_backward, None, _none, lambda st, s: 0, differentiable=False),
    "count": Kind(_count_fwd, _no_backward, None, _none, lambda st, s: 0, differentiable=False),
    "dispatch": Kind(_dispatch_fwd, _dispatch_bwd_in, None, _none, lambda st, s: st.top_k),
    "experts": Kind(_experts_fwd, _experts_bwd_in, _experts_bwd_w, _experts_flops,
                    lambda st, s: (st.width + 2 * st.out_width) * st.experts * st.ep * st.capacity / s),
    "combine": Kind(_combine_fwd, _combine_bwd_in, None, _none,
                    lambda st, s: 2 * st.top_k + st.width * st.experts * st.capacity / s),
})


def expert_half(h: int, experts: int, top_k: int, cap: int, ffn: int, groups: tuple = ()) -> tuple[Step, ...]:
    """m (= ln2(x1)) and x1 -> y: router, routing, dispatch, the experts' MLPs, combine; `groups`:
    the positions of each routing group when a sequence has several (`cap` slots shared evenly)."""
    E, moe = experts, dict(experts=experts, top_k=top_k, capacity=cap)
    router = linear("router", "m", "probs", h, E, bias=False)
    return (
        Step("router", "router", ("m",), "probs", router.params, width=h, out_width=E),
        Step("topk", "topk", ("probs",), "gates", out_width=E, top_k=top_k),
        Step("choose", "choose", ("probs",), "choice", top_k=top_k),
        Step("slots", "slots", ("choice",), "flat", meta=(("groups", groups),) if groups else (), **moe),
        Step("count", "count", ("flat",), "stats", **moe),
        Step("dispatch", "dispatch", ("m", "flat"), "disp", **moe),
        Step("experts", "experts", ("disp",), "eo",
             tuple((n, (E,) + s) for n, s in zip(EXPERT_PARAMS, ((h, ffn), (ffn,), (ffn, h), (h,)))),
             width=h, out_width=ffn, **moe),
        Step("combine", "combine", ("x1", "eo", "gates", "flat"), "y", width=h, **moe),
    )


def moe_block(h: int, heads: int, experts: int, top_k: int, cap: int, ffn: int, causal: bool = True,
              groups: tuple = ()) -> tuple:
    """The MoE block: the dense block's attention half, then the expert half."""
    return plan.attention_half(h, heads, causal) + expert_half(h, experts, top_k, cap, ffn, groups)
