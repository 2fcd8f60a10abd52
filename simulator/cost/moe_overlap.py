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


def overlapped_layers(actions, chunks, k: int, p: int) -> dict[str, int]:
    """Layer pairs device k runs merged over its action list (`overlap_pairs`), by the kind of the
    backward (B or BW): per pair, the shorter of its two chunks (`chunks`:
    `ParallelConfig.chunk_layers`, chunk c of device k being model stage c p + k)."""
    out = {"B": 0, "BW": 0}
    for f, b in (x for x in overlap_pairs(actions) if len(x) == 2):
        out[actions[b].kind] += min(chunks[actions[f].chunk * p + k], chunks[actions[b].chunk * p + k])
    return out


def pair_exposed_s(a: float, mb: float, mf: float, ab: float, dispatch: float, combine: float) -> float:
    """Exposed MoE seconds of one merged layer pair (module docstring): its time less the four
    computations' own."""
    return max(0.0, dispatch - a) + max(0.0, dispatch - mb) + max(0.0, combine - mf) + max(0.0, combine - ab)


def overlap_exposed_per_layer(cfg, layers: int, dispatch: float, combine: float, a: float, mf: float,
                              mlp_b: float, mlp_w: float, ab: float, attn_w: float) -> list[float]:
    """Per pipeline device: the exposed MoE seconds per layer and micro-batch, on average over the
    step (the closed form's `comm_l["ep"]`), with the overlap on: every pass of a layer alone
    exposes its dispatch and combine, every merged layer pair `pair_exposed_s` (module docstring).
    a, mf, mlp_*, ab, attn_w: one layer's forward attention with its collectives, forward MLP, MLP
    input / weight gradients, backward attention input gradients with its collectives, and the
    attention's weight gradients (in the pair when the backward is BW)."""
    p, m = cfg.pp, cfg.microbatches
    sched = make_schedule(cfg.schedule, p, m, cfg.virtual_stages)
    chunks = cfg.chunk_layers(layers)
    per_stage = cfg.stage_layers(layers)
    out = []
    for k in range(p):
        n = m * per_stage[k]
        if not n:
            out.append(0.0)
            continue
        got = overlapped_layers(sched.actions[k], chunks, k, p)
        pairs = got["B"] + got["BW"]
        exposed = (2 * n - 2 * pairs) * (dispatch + combine)
        exposed += got["B"] * pair_exposed_s(a, mlp_b, mf, ab, dispatch, combine)
        exposed += got["BW"] * pair_exposed_s(a, mlp_b + mlp_w, mf, ab + attn_w, dispatch, combine)
        out.append(exposed / n)
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
