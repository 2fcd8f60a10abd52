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

The block's order of operations is `models/moe_steps.moe_block` (the dense block's attention half
from models/block_plan.py, then router, routing, dispatch, experts, combine), run here by the
block interpreter on one device and transformed per parallel axis by parallel/block_lane.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ParasimError
from ..models import GPTConfig
from ..models import block_plan as plan
from ..models.base import Layer, normal_init
from ..models.layers import Embedding, LMHead
from ..models.moe_steps import EXPERT_PARAMS, assign_slots, capacity, choose, moe_block, route  # noqa: F401
from .cp_split import chunk_positions

INIT_STD = 0.02


@dataclass(frozen=True, repr=False)
class MoEGPTConfig(GPTConfig):
    """A GPT whose blocks' MLPs are mixtures of `experts` expert MLPs (hidden `expert_hidden`,
    0 means 4h) with top-`top_k` routing and `capacity_factor`. Same data as the GPT."""

    experts: int = 4  # E
    top_k: int = 1  # k, 1 (Switch) or 2 (GShard)
    capacity_factor: float = 1.25  # C = ceil(cf x k x s / E) per sequence and expert
    expert_hidden: int = 0  # f; 0 means 4 h
    # capacity groups per sequence: 1 routes each whole sequence (GShard's group); g > 1 routes the
    # positions a g-way ring context split gives each rank (`cp_split.chunk_positions`), each with
    # capacity ceil(cf x k x s / (g E)): Megatron-Core's per-rank routing under cp = g
    routing_groups: int = 1

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
        g = self.routing_groups
        if not isinstance(g, int) or g < 1 or (g > 1 and self.seq_len % (2 * g)):
            raise ParasimError(f"MoEGPTConfig: routing_groups must be a positive integer g whose ring split cuts the "
                               f"sequence into 2g = {2 * g if isinstance(g, int) else g} equal chunks; got g = {g!r} "
                               f"for sequence length {self.seq_len}")

    def __repr__(self):
        return (f"MoEGPT(L={self.layers}, h={self.hidden}, a={self.heads}, s={self.seq_len}, V={self.vocab}, "
                f"E={self.experts}, k={self.top_k}, cf={self.capacity_factor:g}"
                + (f", groups={self.routing_groups}" if self.routing_groups > 1 else "") + ")")

    def to_dict(self):
        return {"kind": "moe-gpt", **asdict(self)}

    def build_layers(self) -> tuple:
        """The layers `models.build_model` uses for this config: embedding, MoE blocks, head."""
        f = self.expert_hidden or 4 * self.hidden
        return (Embedding("embedding", self.vocab, self.seq_len, self.hidden),
                *(MoEBlock(f"moe{i}", self.hidden, self.heads, self.seq_len, self.experts, self.top_k,
                           self.capacity_factor, f, self.routing_groups) for i in range(self.layers)),
                LMHead("head", self.hidden, self.vocab, self.seq_len))


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
    routing_groups: int = 1  # capacity groups per sequence (MoEGPTConfig.routing_groups)
    causal = True  # decoder attention (a class constant, as TransformerBlock's default)

    def __repr__(self):
        return (f"MoEBlock({self.name}: h={self.hidden}, a={self.heads}, E={self.experts}, k={self.top_k}, "
                f"C={self.capacity}/seq)")

    @property
    def group_capacity(self) -> int:
        """Slots per expert of one routing group of s / g tokens."""
        g = self.routing_groups
        return capacity(self.seq_len // g, self.experts, self.top_k, self.capacity_factor)

    @property
    def capacity(self) -> int:
        """Slots per expert and sequence: g groups of `group_capacity`."""
        return self.routing_groups * self.group_capacity

    @property
    def groups(self) -> tuple:
        """The positions of each routing group (none for one group per sequence)."""
        g = self.routing_groups
        return tuple(chunk_positions(self.seq_len, g)) if g > 1 else ()

    @property
    def steps(self) -> tuple:
        """The block's order of operations (models/moe_steps.moe_block: the dense block's attention
        half, then router, routing, dispatch, experts, combine): the one place it is written."""
        return moe_block(self.hidden, self.heads, self.experts, self.top_k, self.capacity, self.expert_hidden,
                         self.causal, self.groups)

    def param_shapes(self):
        return plan.param_shapes(self.steps)

    def init(self, rng):
        return {k: (normal_init(rng, s, INIT_STD) if k.startswith("w_") else
                    np.ones(s) if k.endswith("_g") else np.zeros(s)) for k, s in self.param_shapes().items()}

    # ---- the Layer interface (one device: all experts local) ---------------------------------
    def forward(self, params, x):
        """x (B, s, h) -> y; the cache maps each step's name to what its backward keeps, and
        "stats" to the routing counts (E + 1,): assignments kept per expert, then those dropped."""
        values = {"x": x}
        cache = plan.forward(self.steps, params, values)
        return values["y"], {**cache, "stats": values["stats"]}

    def backward_input(self, params, cache, dy):
        grads = {"y": dy}
        wcache = plan.backward_input(self.steps, params, cache, grads)
        return grads["x"], wcache

    def backward_weight(self, params, wcache):
        grads = plan.backward_weight(self.steps, wcache)
        return {k: grads[k] for k in self.param_shapes()}

    def forward_flops(self, batch):
        """Attention 8 B s h^2 + 4 B s^2 h, router 2 B s h E, experts 4 h f per slot (E x C x B
        slots), summed over the steps."""
        return plan.flops(self.steps, batch, self.seq_len)[0]

    def backward_flops(self, batch):
        """(the forward, the forward): how a whole-layer lane prices the MoE block's B and W (the
        block_lane emitter prices each step's own, attention's backward having no weight half)."""
        f = self.forward_flops(batch)
        return f, f

    def activation_bytes(self, batch):
        """Attention caches (8 B s h + 2 B s + a B s^2), router E B s, expert buffers (h + 2 f) E C B."""
        B, s, h, a, E, f = batch, self.seq_len, self.hidden, self.heads, self.experts, self.expert_hidden
        return 8 * (8 * B * s * h + 2 * B * s + a * B * s * s + E * B * s + (h + 2 * f) * E * self.capacity * B)
