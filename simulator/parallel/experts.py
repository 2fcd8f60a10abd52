"""Mixture-of-experts transformer block: top-k routing with a capacity factor, expert MLPs, and a
GPT config whose blocks use it (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
Fedus et al. 2021).

    x1 = x + W_o attn(ln1(x) W_qkv + b_qkv) + b_o                     (as the dense block)
    m  = ln2(x1);  p = softmax(m W_r)                                  router, W_r (h, E)
    y  = x1 + sum_{c < k, kept} g_c  E_{e_c}(m)                         E_e(m) = gelu(m W1_e + b1_e) W2_e + b2_e

e_c is the token's c-th most probable expert (ties: the lower index); gates g = p_e for k = 1
(Switch), p_{e_c} / sum_{c'} p_{e_c'} for k = 2 (GShard). Capacity: each expert takes at most
C = ceil(capacity_factor x k x s / E) tokens of each sequence (the routing group is one sequence,
so every split of the batch over devices routes identically). Slots are filled choice by choice
(all first choices, then all second choices), tokens in position order; an assignment beyond C is
dropped: its expert output is not added (the token keeps its residual path). No auxiliary
load-balancing loss is used.

The block is computed in parts so expert parallelism can put AllToAlls between them:
`attend` (attention, residual, ln2), `dispatch` (router, slots, buffer (E, B C, h)), `experts` on
any contiguous block of experts, `combine`. On one device the buffer goes straight from dispatch
to the experts. Under context parallelism a rank holds part of each sequence: `dispatch` then
takes the expert choices of the whole sequence, so the slots are numbered as on one device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ParasimError
from ..models import GPTConfig
from ..models import block_plan as plan
from ..models import functional as K
from ..models.base import Layer, normal_init
from ..models.block_plan import attention_half
from ..models.layers import Embedding, LMHead

EXPERT_PARAMS = ("w_fc", "b_fc", "w_proj", "b_proj")  # stacked over experts on axis 0
INIT_STD = 0.02


@dataclass(frozen=True, repr=False)
class MoEGPTConfig(GPTConfig):
    """A GPT whose blocks' MLPs are mixtures of `experts` expert MLPs (hidden `expert_hidden`,
    0 means 4h) with top-`top_k` routing and `capacity_factor`. Same data as the GPT."""

    experts: int = 4  # E
    top_k: int = 1  # k, 1 (Switch) or 2 (GShard)
    capacity_factor: float = 1.25  # C = ceil(cf x k x s / E) per sequence and expert
    expert_hidden: int = 0  # f; 0 means 4 h

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.experts, int) or self.experts < 1:
            raise ParasimError(f"MoEGPTConfig: experts must be a positive integer, got {self.experts!r}")
        if self.top_k not in (1, 2) or self.top_k > self.experts:
            raise ParasimError(f"MoEGPTConfig: top_k must be 1 or 2 and at most experts ({self.experts}), got {self.top_k!r}")
        if not self.capacity_factor > 0:
            raise ParasimError(f"MoEGPTConfig: capacity_factor must be > 0, got {self.capacity_factor}")
        if not isinstance(self.expert_hidden, int) or self.expert_hidden < 0:
            raise ParasimError(f"MoEGPTConfig: expert_hidden must be >= 0, got {self.expert_hidden!r}")

    def __repr__(self):
        return (f"MoEGPT(L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq_len}, V={self.vocab}, "
                f"E={self.experts}, k={self.top_k}, cf={self.capacity_factor:g})")

    def to_dict(self):
        return {"kind": "moe-gpt", **asdict(self)}

    def build_layers(self) -> tuple:
        """The layers `models.build_model` uses for this config: embedding, MoE blocks, head."""
        f = self.expert_hidden or 4 * self.hidden
        return (Embedding("embedding", self.vocab, self.seq_len, self.hidden),
                *(MoEBlock(f"moe{i}", self.hidden, self.heads, self.seq_len, self.experts, self.top_k,
                           self.capacity_factor, f) for i in range(self.layers)),
                LMHead("head", self.hidden, self.vocab, self.seq_len))


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


def routing_stats(expert: np.ndarray, slot: np.ndarray, experts: int) -> np.ndarray:
    """(E + 1,) float64: tokens kept per expert, then the number of dropped assignments."""
    kept = np.bincount(expert[slot >= 0], minlength=experts).astype(np.float64)
    return np.append(kept, float(np.sum(slot < 0)))


@dataclass(frozen=True)
class MoEBlock(Layer):
    name: str
    hidden: int  # h
    heads: int  # a
    seq_len: int  # s
    experts: int  # E
    top_k: int  # k
    capacity_factor: float
    expert_hidden: int  # f
    causal = True  # decoder attention (a class constant, as TransformerBlock's default)

    def __repr__(self):
        return (f"MoEBlock({self.name}: h={self.hidden}, a={self.heads}, E={self.experts}, k={self.top_k}, "
                f"C={self.capacity}/seq)")

    @property
    def capacity(self) -> int:
        return capacity(self.seq_len, self.experts, self.top_k, self.capacity_factor)

    def param_shapes(self):
        h, E, f = self.hidden, self.experts, self.expert_hidden
        return {**plan.param_shapes(self.attention_steps), "w_router": (h, E),
                "w_fc": (E, h, f), "b_fc": (E, f), "w_proj": (E, f, h), "b_proj": (E, h)}  # fmt: skip

    def init(self, rng):
        return {k: (normal_init(rng, s, INIT_STD) if k.startswith("w_") else
                    np.ones(s) if k.endswith("_g") else np.zeros(s)) for k, s in self.param_shapes().items()}

    # ---- the parts: attention half, dispatch, experts, combine -----------------------------------
    @property
    def attention_steps(self) -> tuple:
        """The dense block's steps up to ln2 (models.block_plan.attention_half): the one home of
        the attention half's order of operations."""
        return attention_half(self.hidden, self.heads, self.causal)

    def attend(self, p, x):
        """x (B, T, h) -> (x1, m = ln2(x1), cache): everything before the router."""
        values = {"x": x}
        cache = plan.forward(self.attention_steps, p, values)
        return values["x1"], values["m"], cache

    def router_probs(self, w_router, m):
        """softmax(m W_r): (B, T, h) @ (h, E) -> (B, T, E)."""
        z = m @ w_router
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def dispatch(self, w_router, m, whole=None):
        """m (B, T, h) -> (dispatch (E, B C, h), cache, stats (E + 1,)). `whole`, when the sequence is
        split over ranks (context parallelism): (expert choices of the whole sequences (B, s, k), the
        positions of these T tokens), so the capacity slots are those of one device."""
        h, E, C = self.hidden, self.experts, self.capacity
        probs = self.router_probs(w_router, m)
        expert, gates = choose(probs, self.top_k)
        if whole is None:
            slot = assign_slots(expert, E, C)
        else:
            full, positions = whole
            slot = assign_slots(full, E, C)[:, list(positions)]
        B = m.shape[0]
        flat = self._flat_slots(expert, slot)  # (B, T, k) index into E * B C, -1 dropped
        disp = np.zeros((E * B * C, h))
        kept = flat >= 0
        disp[flat[kept]] = np.broadcast_to(m[..., None, :], flat.shape + (h,))[kept]
        cache = {"m": m, "probs": probs, "expert": expert, "flat": flat, "gates": gates}
        return disp.reshape(E, B * C, h), cache, routing_stats(expert, slot, E)

    def pre(self, p, x):
        """x (B, s, h) -> (dispatch (E, B C, h), cache, stats (E + 1,))."""
        x1, m, cache = self.attend(p, x)
        disp, rcache, stats = self.dispatch(p["w_router"], m)
        return disp, {**cache, **rcache, "x1": x1}, stats

    def _flat_slots(self, expert, slot):
        """Row of each assignment in the (E, B C) dispatch buffer: e * B C + b C + slot."""
        B, C = expert.shape[0], self.capacity
        row = expert * (B * C) + np.arange(B)[:, None, None] * C + slot
        return np.where(slot >= 0, row, -1)

    def experts_forward(self, pe, xin):
        """Experts e0.. of the stacked params pe on their tokens xin (E', T, h) -> (out (E', T, h), cache)."""
        hpre = xin @ pe["w_fc"] + pe["b_fc"][:, None, :]  # (E', T, h) @ (E', h, f) -> (E', T, f)
        g, _ = K.gelu_forward(hpre)
        return g @ pe["w_proj"] + pe["b_proj"][:, None, :], (xin, hpre, g)  # (E', T, f) @ (E', f, h)

    def post(self, cache, eout):
        return self.combine(cache, cache["x1"], eout)

    def combine(self, cache, x1, eout):
        """y = x1 + sum over kept assignments of gate x expert output.   eout (E, B C, h)."""
        flat, gates = cache["flat"], cache["gates"]
        rows = eout.reshape(-1, eout.shape[-1])[np.maximum(flat, 0)]  # (B, s, k, h)
        w = np.where(flat >= 0, gates, 0.0)[..., None]
        return x1 + (w * rows).sum(axis=2)

    # ---- backward of the three parts -----------------------------------------------------------
    def post_backward(self, cache, eout, dy):
        """-> (d eout (E, B C, h), d gates (B, s, k))."""
        flat, gates = cache["flat"], cache["gates"]
        kept = flat >= 0
        rows = eout.reshape(-1, eout.shape[-1])[np.maximum(flat, 0)]  # (B, s, k, h)
        dgates = np.where(kept, np.einsum("bskh,bsh->bsk", rows, dy), 0.0)
        deout = np.zeros((eout.shape[0] * eout.shape[1], eout.shape[-1]))
        np.add.at(deout, flat[kept], (gates[..., None] * dy[:, :, None, :])[kept])
        return deout.reshape(eout.shape), dgates

    def experts_backward(self, pe, cache, dout):
        """-> (d xin, {expert param: grad}) for the experts of pe."""
        dxin, wcache = self.experts_backward_input(pe, cache, dout)
        return dxin, self.experts_backward_weight(wcache)

    def experts_backward_input(self, pe, cache, dout):
        """B: -> (d xin, weight cache (xin, dh, g, dout))."""
        xin, hpre, g = cache
        dg = dout @ pe["w_proj"].transpose(0, 2, 1)  # (E', T, h) @ (E', h, f)
        dh = K.gelu_backward(hpre, dg)
        return dh @ pe["w_fc"].transpose(0, 2, 1), (xin, dh, g, dout)

    @staticmethod
    def experts_backward_weight(wcache):
        """W: {expert param: grad} = xin^T dh, sum dh, g^T dout, sum dout per expert."""
        xin, dh, g, dout = wcache
        return {"w_fc": xin.transpose(0, 2, 1) @ dh, "b_fc": dh.sum(axis=1),
                "w_proj": g.transpose(0, 2, 1) @ dout, "b_proj": dout.sum(axis=1)}

    def pre_backward(self, p, cache, ddisp, dgates, dy):
        """-> (dx, {non-expert param: grad}).  dy is the block's output gradient (residual path)."""
        dm, grads = self.dispatch_backward(p["w_router"], cache, ddisp, dgates)
        dx, g_att = self.attend_backward(p, cache, dy, dm)
        return dx, {**grads, **g_att}

    def dispatch_backward(self, w_router, cache, ddisp, dgates):
        """-> (dm (B, T, h), {"w_router": grad}) from d dispatch (E, B C, h) and d gates (B, T, k)."""
        dm, (m, dz) = self.dispatch_backward_input(w_router, cache, ddisp, dgates)
        return dm, {"w_router": self.router_weight_grad(m, dz)}

    def router_weight_grad(self, m, dz):
        """W of the router: m^T dz, (h, B T) @ (B T, E)."""
        return m.reshape(-1, self.hidden).T @ dz.reshape(-1, self.experts)

    def dispatch_backward_input(self, w_router, cache, ddisp, dgates):
        """B: -> (dm, weight cache (m, d logits))."""
        c, h = cache, self.hidden
        flat, kept = c["flat"], c["flat"] >= 0
        rows = ddisp.reshape(-1, h)[np.maximum(flat, 0)]  # (B, s, k, h)
        dm = np.where(kept[..., None], rows, 0.0).sum(axis=2)
        # gates -> probs: k = 1 g = p_e; k = 2 g_c = p_c / S  =>  dp_c = (dg_c - sum_c' dg_c' g_c') / S
        chosen = np.take_along_axis(c["probs"], c["expert"], axis=-1)
        if self.top_k == 1:
            dchosen = dgates
        else:
            dchosen = (dgates - (dgates * c["gates"]).sum(-1, keepdims=True)) / chosen.sum(-1, keepdims=True)
        dprobs = np.zeros_like(c["probs"])
        np.put_along_axis(dprobs, c["expert"], dchosen, axis=-1)
        dz = c["probs"] * (dprobs - (dprobs * c["probs"]).sum(-1, keepdims=True))  # softmax backward
        return dm + dz @ w_router.T, (c["m"], dz)

    def attend_backward(self, p, cache, dy, dm):
        """Backward of `attend`: dy reaches x1 through the residual, dm through ln2. -> (dx, grads)."""
        dx, wcache = self.attend_backward_input(p, cache, dy, dm)
        return dx, self.attend_backward_weight(wcache)

    def attend_backward_input(self, p, cache, dy, dm):
        """B: -> (dx, weight cache: each linear's input and output gradient, each LN's cache and d out)."""
        grads = {"x1": dy, "m": dm}
        wcache = plan.backward_input(self.attention_steps, p, cache, grads)
        return grads["x"], wcache

    def attend_backward_weight(self, wcache):
        """W: {attention-half param: grad}."""
        return plan.backward_weight(self.attention_steps, wcache)

    # ---- the Layer interface (one device: all experts local) ---------------------------------
    def forward(self, params, x):
        disp, cache, stats = self.pre(params, x)
        eout, ecache = self.experts_forward(params, disp)
        return self.post(cache, eout), {"pre": cache, "eout": eout, "experts": ecache, "stats": stats}

    def backward_input(self, params, cache, dy):
        """Computes every gradient at once; wcache holds the parameter gradients."""
        deout, dgates = self.post_backward(cache["pre"], cache["eout"], dy)
        ddisp, g_exp = self.experts_backward(params, cache["experts"], deout)
        dx, grads = self.pre_backward(params, cache["pre"], ddisp, dgates, dy)
        return dx, {**grads, **g_exp}

    def backward_weight(self, params, wcache):
        return {k: wcache[k] for k in self.param_shapes()}

    def forward_flops(self, batch):
        """Attention 8 B s h^2 + 4 B s^2 h, router 2 B s h E, experts 4 h f per slot (E x C x B slots)."""
        B, s, h, E, f = batch, self.seq_len, self.hidden, self.experts, self.expert_hidden
        return float(8 * B * s * h * h + 4 * B * s * s * h + 2 * B * s * h * E + 4 * h * f * E * self.capacity * B)

    def backward_flops(self, batch):
        f = self.forward_flops(batch)
        return f, f

    def activation_bytes(self, batch):
        """Attention caches (8 B s h + 2 B s + a B s^2), router E B s, expert buffers (h + 2 f) E C B."""
        B, s, h, a, E, f = batch, self.seq_len, self.hidden, self.heads, self.experts, self.expert_hidden
        return 8 * (8 * B * s * h + 2 * B * s + a * B * s * s + E * B * s + (h + 2 * f) * E * self.capacity * B)
