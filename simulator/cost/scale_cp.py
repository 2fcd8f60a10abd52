"""Context parallelism in the scale program (`scale_program._Emitter`): the attention half cut at
its exchanges (`scale_kernels.AttentionParts`), as the runnable lane emits it (`parallel.cp_attention`).

  p2p (Transformer Engine's ring, `cp_attention.ring_order`, the one home of its order): the QKV
      projection, then per ring step a Send of the K/V block held and a Recv of the next one around
      the step's core kernel; backward the ring reversed, each step passing the K/V block and the
      dK/dV summed so far, then its core kernel and the sum (`dkv_add`); the output projection after
      (forward) or before (backward).
  a2a (DeepSpeed Ulysses): the QKV projection, the all-to-all of q, k, v, the core of a/c heads over
      the whole sequence, the all-to-all of its output, the output projection; backward the reverse.

The program holds one context-parallel rank (its ranks are symmetric): a ring transfer is a Send to
the device itself, which `ScaleDeviceModel.link` prices on the ring's slowest hop, and the
all-to-alls are one-member collectives tagged "cp" priced for the real group.
"""

from __future__ import annotations

from simulator.parallel.cp_attention import ring_order
from simulator.program import Recv, Send

CP = "cp/"    # the ring's tensors: their transfers are context parallelism's (`step_breakdown.comm_kind`)


def attention_forward(em, out, r, x, j, label, needs=()) -> None:
    """One layer's attention forward on context rank 0 of program rank r (activation x)."""
    P, cfg, base = em.K.cp_parts, em.cfg, f"{CP}{x}.{label.split(' ', 1)[1]}"
    kv = f"{base}.kv0"       # this rank's K/V block, out of the QKV projection
    em.comp(out, P.qkv_fwd, x, "forward", j, f"{label} attn_qkv_fwd", (kv,) * (cfg.cp_comm_type != "a2a"), needs)
    if cfg.cp_comm_type == "a2a":
        em.group_comm(out, r, x, j, "cp", "all_to_all", em.qkv_a2a)
        em.comp(out, P.core_fwd, x, "forward", j, f"{label} attn_core_fwd")
        em.group_comm(out, r, x, j, "cp", "all_to_all", em.out_a2a)
    else:
        for act, _what, s in ring_order(cfg.cp, backward=False):
            tag = f"{base}.kv{s}"
            if act == "send":
                out.append(Send(kv, r, tag, em.kv_local, j))
            elif act == "recv":
                kv = f"{base}.kv{s + 1}"
                out.append(Recv(kv, r, tag, em.kv_local, j))
            else:
                em.comp(out, P.core_fwd, x, "forward", j, f"{label} attn_core_fwd {s}", needs=(kv,))
    em.comp(out, P.proj_fwd, x, "forward", j, f"{label} attn_proj_fwd")


def attention_backward(em, out, r, g, j, label, fused: bool, done=(), needs=()) -> None:
    """One layer's attention input gradients (with `fused` also its weight gradients) from g;
    `done` the gradient it completes (on the QKV kernel, the last)."""
    P, cfg, base = em.K.cp_parts, em.cfg, f"{CP}{g}.{label.split(' ', 1)[1]}"
    em.comp(out, P.proj_bw if fused else P.proj_b, g, "backward", j, f"{label} attn_proj_bgrad", needs=needs)
    last: tuple = ()
    if cfg.cp_comm_type == "a2a":
        em.group_comm(out, r, g, j, "cp", "all_to_all", em.out_a2a)
        em.comp(out, P.core_b, g, "backward", j, f"{label} attn_core_bgrad")
        em.group_comm(out, r, g, j, "cp", "all_to_all", em.qkv_a2a)
    else:
        kv, dkv, arrived = f"{base}.kept", None, {}    # the forward's last K/V block, kept
        for act, what, s in ring_order(cfg.cp, backward=True):
            tag = f"{base}.b{what}{s}"
            if act == "send":
                out.append(Send(kv if what == "kv" else dkv, r, tag, em.kv_local, j))
            elif act == "recv":
                arrived[what] = f"{base}.{what}_in{s}"
                out.append(Recv(arrived[what], r, tag, em.kv_local, j))
            else:
                mine = f"{base}.dkv_step{s}"
                em.comp(out, P.core_b, g, "backward", j, f"{label} attn_core_bgrad {s}", (mine,), (kv,))
                kv, dkv = arrived.pop("kv", None), mine
                if s:
                    dkv = f"{base}.dkv_sum{s}"
                    em.comp(out, P.dkv_add, g, "backward", j, f"{label} attn_dkv_add {s}", (dkv,),
                            (arrived.pop("dkv"), mine))
        last = (dkv,)
    em.comp(out, P.qkv_bw if fused else P.qkv_b, g, "backward", j, f"{label} attn_qkv_bgrad", done, last)
