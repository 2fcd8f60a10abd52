"""How context parallelism splits a sequence, the rules it imposes, and its activation formula
(pure functions shared by the config check, the compiler, the cost view and the app)."""

from __future__ import annotations

from ..errors import ParasimError
from ..models import GPTConfig
from ..vocabulary import canonical_value


def chunk_positions(seq_len: int, cp: int, kind: str = "p2p") -> list[tuple[int, ...]]:
    """Token positions held by each cp rank. Ring: 2cp chunks, rank i holds chunks i and 2cp-1-i
    (load-balanced causal split, Megatron-LM's get_batch_on_this_cp_rank); all-to-all: chunk i.

        chunk_positions(8, 2) -> [(0, 1, 6, 7), (2, 3, 4, 5)]

    `kind` is Megatron's --cp-comm-type, p2p (ring) or a2a (all-to-all); the older spellings "ring"
    and "all-to-all" are mapped by `simulator.vocabulary`."""
    if canonical_value("cp_comm_type", kind) == "p2p":
        c = seq_len // (2 * cp)
        return [tuple(range(i * c, (i + 1) * c)) + tuple(range((2 * cp - 1 - i) * c, (2 * cp - i) * c))
                for i in range(cp)]
    c = seq_len // cp
    return [tuple(range(i * c, (i + 1) * c)) for i in range(cp)]


def check_context_parallel(model, cp: int, kind: str, tp: int = 1) -> None:
    """One line naming the rule and the numbers when the sequence or heads cannot be split."""
    if cp == 1:
        return
    if not isinstance(model, GPTConfig):
        raise ParasimError(f"context parallelism splits sequences; the {model!r} model has none: use --strategy dp")
    s, a, kind = model.seq_len, model.heads, canonical_value("cp_comm_type", kind)
    g = getattr(model, "routing_groups", 1)
    if g > 1 and (g != cp or kind != "p2p"):
        raise ParasimError(f"routing_groups = {g} routes the positions a {g}-way ring split gives each rank: run it "
                           f"with cp = {g} and cp_comm_type p2p (or routing_groups 1); got cp = {cp}, {kind}")
    if kind == "p2p" and s % (2 * cp):
        raise ParasimError(f"ring context parallelism cuts the sequence into 2*cp = {2 * cp} chunks (load-balanced "
                           f"causal split); sequence length {s} is not divisible by {2 * cp}")
    if kind == "a2a":
        if a % (cp * tp):
            ways = f"{cp} ways" if tp == 1 else f"tp x cp = {tp} x {cp} = {tp * cp} ways"
            raise ParasimError(f"all-to-all context parallelism gives each rank heads/cp heads; {a} heads cannot be "
                               f"split {ways}")
        if s % cp:
            raise ParasimError(f"all-to-all context parallelism splits the sequence {cp} ways; sequence length {s} "
                               f"is not divisible by {cp}")


def block_activation_bytes(model: GPTConfig, microbatch: int, cp: int, kind: str = "p2p") -> int:
    """Float64 bytes one transformer block keeps for backward on one cp rank for one micro-batch:
    per token ln1 (h + 1), its output h, q h, k v 2h, attention output h, lse a, ln2 (h + 1),
    its output h, fc 4h, gelu 4h = 16h + 2 + a (ring); all-to-all also keeps the output of its
    heads over the whole sequence (h more per local token)."""
    h, a = model.hidden, model.heads
    per_token = 16 * h + 2 + a + (h if canonical_value("cp_comm_type", kind) == "a2a" else 0)
    return 8 * microbatch * (model.seq_len // cp) * per_token


def attention_bytes_per_step(model: GPTConfig, blocks: int, microbatch: int, microbatches: int, cp: int,
                             kind: str = "p2p") -> int:
    """Bytes one cp rank sends per training step for the attention of its `blocks` transformer
    blocks (float64), summed over micro-batches. A K/V block is 2 B (s/cp) h values.
    ring (`cp_attention.ring_order`, Transformer Engine's): forward cp-1 K/V hops, backward cp-1 K/V
    hops and cp-1 dK/dV hops: 3 (cp - 1) blocks;
    all-to-all: q, k, v and the output forward, dO and dq, dk, dv backward, each an all-to-all
    of which a rank keeps 1/cp: 8 (cp-1)/cp x B (s/cp) h values (Jacobs et al. 2023, Sec. 3.1)."""
    if cp == 1:
        return 0
    per_layer = microbatch * (model.seq_len // cp) * model.hidden * 8  # one (B, s/cp, h) float64 tensor
    hops = 2 * 3 * (cp - 1) if canonical_value("cp_comm_type", kind) == "p2p" else 8 * (cp - 1) / cp
    return int(round(blocks * microbatches * per_layer * hops))


def ring_steps(seq_len: int, cp: int) -> list[dict]:
    """What each device of a ring does at each step (load-balanced causal split): at step s device
    i holds the K/V block of device (i - s) mod cp and scores its queries against it; `pairs` counts
    the unmasked (query, key) pairs, the work of that step. One row per (step, device)."""
    pos = chunk_positions(seq_len, cp, "ring")
    rows = []
    for s in range(cp):
        for i in range(cp):
            owner = (i - s) % cp
            pairs = sum(1 for q in pos[i] for k in pos[owner] if k <= q)
            rows.append({"step": s, "device": i, "queries": _chunks(pos[i], seq_len, cp), "kv_of": owner,
                         "keys": _chunks(pos[owner], seq_len, cp), "pairs": pairs,
                         "sends_to": (i + 1) % cp if s < cp - 1 else None})
    return rows


def _chunks(positions: tuple[int, ...], seq_len: int, cp: int) -> str:
    """(0, 1, 14, 15) of 16 tokens in 8 chunks -> 'c0+c7'."""
    size = seq_len // (2 * cp)
    return "+".join(f"c{c}" for c in sorted({p // size for p in positions}))
