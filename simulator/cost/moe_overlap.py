"""--overlap-moe-expert-parallel-comm as Megatron-Core runs it: the one home of which actions are
merged, in which order their instructions run, and the closed form of a merged layer pair.

Megatron-Core's combined 1F1B (megatron/core/models/common/model_chunk_schedule_plan.py,
`TransformerModelChunkSchedulePlan.run` and `TransformerLayerSchedulePlan.run`; NVIDIA/Megatron-LM
d98e8a64): in the 1F1B steady state the forward of one micro-batch and the backward of another run
as one step, layer i of the forward beside layer n-1-i of the backward, on two CUDA streams:

    comm stream: combine_bwd (B)    | dispatch (F) -> dispatch_bwd (B)       | combine (F)
    comp stream: pre-dispatch (F)   | mlp backward + wgrad (B) -> mlp (F)    | pre-dispatch backward (B)

(pre-dispatch: attention, its collectives, the router). The rest of the longer action runs alone;
the backward's post-process (logits backward) comes first, the forward's post-process and sends last.
DeepSeek-V3's DualPipe pairs a forward and a backward chunk the same way (technical report,
arXiv 2412.19437, Sec. 3.2.1, Fig. 4); parasim's priced schedules have no DualPipe, so these rules
apply to the 1F1B-family schedules the cost model prices.

Which actions merge (`overlap_pairs`): a backward (B or BW) and the forward right after it in a
device's action list, of different micro-batches (so neither waits for the other). This is
Megatron's steady state with its extra warm-up forward (schedules.py `get_pp_rank_microbatches`:
"we schedule one extra micro-batch forward step before the 1f1b stages ... to ensure the forward
and backward computations are independent"): the 1F1B list F..F (F B)(F B).. B..B read as
F..F F (B F)(B F).. B..B. The forwards before the first pair and the backwards after the last
run alone, their collectives blocking.

On the event clock (`interleave`, used by `scale_program`): the two actions' instructions are
written in the order above, the MoE collectives non-blocking (the clock's asynchronous stream, in
that order) and each read by the next instruction of its own action; everything else as before.
In the closed form (`pair_exposed_s`), one merged layer pair takes
    max(a, D) + max(mb, D) + max(mf, C) + max(ab, C)
(a: the forward's attention with its tensor- / context-parallel collectives, mb: the backward's MLP
kernels, mf: the forward's MLP, ab: the backward's attention with its collectives, D and C one
pass's dispatch and combine): the clock's own arithmetic for those instructions, so the two agree.
--moe-shared-expert-overlap (Megatron-Core token_dispatcher.py, shared_experts.py): the shared
experts run on their own stream, fc1 and its activation under the dispatch, fc2 under the combine;
parasim's backward mirrors it (fc2's input gradient under the first collectives, fc1's under the
second). On the clock (`shared_expert_mlp`) the MoE collectives are non-blocking, the shared
kernels written between their issue and the routed experts' kernel; in the closed form one pass
exposes max(0, D - first) + max(0, C - second) (`moe.exposed_moe_s`).
Not priced: the SMs the communication kernels take from the GEMMs, and the asynchronous stream
being shared with the data-parallel gradient reductions (`clock` has one such stream).
"""

from __future__ import annotations

from simulator.cost.scale_kernels import Kernel
from simulator.parallel.schedule_registry import make_schedule
from simulator.program import Collective, Compute

MOE_TAGS = ("ep", "ep_flex", "etp", "tp_ep")      # the `moe.MoeCollective.group` names, the scale program's tags


def overlap_pairs(actions) -> list[tuple]:
    """The device's actions as Megatron-Core runs them with the overlap (module docstring): a list
    of (index,) for an action alone and (forward index, backward index) for a merged pair, a
    backward (B or BW) and the forward after it, of another micro-batch."""
    out, i, n = [], 0, len(actions)
    while i < n:
        if i + 1 < n and actions[i].kind in ("B", "BW") and actions[i + 1].kind == "F" \
                and actions[i].microbatch != actions[i + 1].microbatch:
            out.append((i + 1, i))
            i += 2
            continue
        out.append((i,))
        i += 1
    return out


def _split(block: list) -> tuple[list, list]:
    """(segments, MoE collective groups) alternating: segments[0], groups[0], segments[1], ..."""
    segs, groups, prev_moe = [[]], [], False
    for ins in block:
        moe = type(ins) is Collective and ins.tag in MOE_TAGS
        if moe:
            if not prev_moe:
                groups.append([])
                segs.append([])
            groups[-1].append(ins)
        else:
            segs[-1].append(ins)
        prev_moe = moe
    return segs, groups


def interleave(fwd: list, bwd: list) -> list:
    """One merged pair's instructions in Megatron-Core's order (module docstring): the backward's
    post-process, then layer by layer combine_bwd | pre-dispatch | mlp backward | dispatch |
    dispatch_bwd | mlp | combine | pre-dispatch backward, then the longer action's rest."""
    fs, fm = _split(fwd)
    bs, bm = _split(bwd)
    if len(fm) % 2 or len(bm) % 2:      # not a dispatch and a combine per layer: one after the other
        return fwd + bwd
    nf, nb = len(fm) // 2, len(bm) // 2
    both = min(nf, nb)
    out = list(bs[0])
    for i in range(both):
        out += bm[2 * i] + fs[2 * i] + bs[2 * i + 1] + fm[2 * i] + bm[2 * i + 1] + fs[2 * i + 1] + fm[2 * i + 1]
        out += bs[2 * i + 2]
    for i in range(both, nb):
        out += bm[2 * i] + bs[2 * i + 1] + bm[2 * i + 1] + bs[2 * i + 2]
    for i in range(both, nf):
        out += fs[2 * i] + fm[2 * i] + fs[2 * i + 1] + fm[2 * i + 1]
    return out + fs[2 * nf]


def pair_exposed_s(a: float, mb: float, mf: float, ab: float, dispatch: float, combine: float) -> float:
    """Exposed MoE seconds of one merged layer pair (module docstring): its time less the four
    computations' own."""
    return max(0.0, dispatch - a) + max(0.0, dispatch - mb) + max(0.0, combine - mf) + max(0.0, combine - ab)


def overlap_exposed_per_layer(cfg, dispatch: float, combine: float, a: float, mf: float, mlp_b: float,
                              mlp_w: float, ab: float, attn_w: float, dense_flags, dense=(0.0, 0.0, 0.0),
                              mtp=()) -> list[float]:
    """Per pipeline device: the exposed MoE seconds per MoE layer and micro-batch, on average over
    the step (the closed form's `comm_l["ep"]`), with the overlap on: every pass of a MoE layer alone
    exposes its dispatch and combine, every merged layer pair `pair_exposed_s` (module docstring).
    a, mf, mlp_*, ab, attn_w: one MoE layer's forward attention with its collectives, forward MLP, MLP
    input / weight gradients, backward attention input gradients with its collectives, and the
    attention's weight gradients (in the pair when the backward is BW). `dense_flags`: per model chunk
    the dense flag of each layer (`layer_kinds.chunk_dense_flags`), `dense` such a layer's (F, B, W);
    `mtp`: per MTP module on the last chunk (forward before its layer, forward after it, (B, W) before
    its layer's backward, (B, W) after it; `mtp.mtp_overlap_parts`), its layer a MoE one. The
    computations around a MoE layer's collectives are what the clock's `interleave` puts there: a
    forward's dense layers (and MTP's projection) before MoE layer i join its attention, a backward's
    after MoE layer i (in backward order) join its attention's gradients."""
    p, m = cfg.pp, cfg.microbatches
    sched = make_schedule(cfg.schedule, p, m, cfg.virtual_stages)
    last = len(dense_flags) - 1

    def sequences(s, bw: bool):
        """(forward, backward) of model chunk s: its compute blobs (seconds) and MoE layers ("M")."""
        fwd = [dense[0] if d else "M" for d in dense_flags[s]]
        bwd = [dense[1] + bw * dense[2] if d else "M" for d in reversed(dense_flags[s])]
        if s == last and mtp:
            fwd += [x for f_before, f_after, _b, _a in mtp for x in (f_before, "M", f_after)]
            bwd = [x for _f, _g, (b0, w0), (b1, w1) in reversed(mtp) for x in (b0 + bw * w0, "M", b1 + bw * w1)] + bwd
        return fwd, bwd

    def around(seq, own: float, after: bool) -> list[float]:
        """Per MoE layer of seq, its own part plus the blobs before it (forward) or after it (backward)."""
        out, acc = [], 0.0
        for x in (reversed(seq) if after else seq):
            if x == "M":
                out.append(own + acc)
                acc = 0.0
            else:
                acc += x
        return out[::-1] if after else out

    out = []
    for k in range(p):
        moe = m * sum(sum(not d for d in dense_flags[s]) + (len(mtp) if s == last else 0) for s in cfg.stage_map[k])
        if not moe:
            out.append(0.0)
            continue
        acts = sched.actions[k]
        exposed = 2 * moe * (dispatch + combine)
        for f, b in (x for x in overlap_pairs(acts) if len(x) == 2):
            bw = acts[b].kind == "BW"
            fs = sequences(cfg.stage_map[k][acts[f].chunk], bw)[0]
            bs = sequences(cfg.stage_map[k][acts[b].chunk], bw)[1]
            pa = around(fs, a, False)
            pb = around(bs, ab + bw * attn_w, True)
            for ai, abi in zip(pa, pb):
                exposed += pair_exposed_s(ai, mlp_b + bw * mlp_w, mf, abi, dispatch, combine) - 2 * (dispatch + combine)
        out.append(exposed / moe)
    return out


def _shared_parts(em, whole: Kernel, forward: bool) -> tuple[Kernel, Kernel, Kernel]:
    """(routed, first, second): `whole` (the MLP kernel, possibly fused with its weight gradients)
    without the shared experts' input pass, and that pass as the kernel under the first MoE
    collectives and the one under the second (module docstring). Their sum is `whole` exactly."""
    key = (id(whole), forward)
    got = em.__dict__.setdefault("_shared_parts", {}).get(key)
    if got is not None:
        return got
    shared = em.K.shared_fwd if forward else em.K.shared_b
    n, mms = len(shared.matmuls), whole.matmuls
    i = next(i for i in range(len(mms) - n + 1) if mms[i:i + n] == shared.matmuls)
    routed = Kernel(whole.name, mms[:i] + mms[i + n:], whole.ew_nbytes - shared.ew_nbytes,
                    whole.launches - shared.launches)
    got = em._shared_parts[key] = (routed,) + shared_halves(shared, forward)
    return got


def shared_halves(shared: Kernel, forward: bool) -> tuple[Kernel, Kernel]:
    """The shared experts' pass (`LayerKernels.shared_fwd` / `shared_b`) as (the kernel under the
    first MoE collectives, the one under the second): fc1 with its activation, then fc2, forward;
    fc2's input gradient, then fc1's with the activation's, backward (module docstring)."""
    fc1 = Kernel(f"{shared.name}_fc1", shared.matmuls[:1], shared.ew_nbytes, max(0, shared.launches - 1))
    fc2 = Kernel(f"{shared.name}_fc2", shared.matmuls[1:], 0.0, min(1, shared.launches))
    return (fc1, fc2) if forward else (fc2, fc1)


def shared_expert_mlp(em, out, r, x, j, kern, phase, label, done, needs) -> None:
    """The MoE MLP with --moe-shared-expert-overlap (module docstring): shared kernel | dispatch
    (non-blocking) | routed experts | shared kernel | combine (non-blocking). The shared kernels
    read and write their own tensor, so the collectives start when x is ready."""
    routed, first, second = _shared_parts(em, kern, phase == "forward")
    side = f"shared.{x}"
    out.append(Compute(first.name, (x,), (side,), first.flops, int(first.nbytes()), {"kernel": first}, phase, j,
                       f"{label} shared"))
    em.mlp_comm(out, r, x, j, "before")
    em.comp(out, routed, x, phase, j, label, done, needs)
    out.append(Compute(second.name, (side,), (side,), second.flops, int(second.nbytes()), {"kernel": second},
                       phase, j, f"{label} shared"))
    em.mlp_comm(out, r, x, j, "after")
