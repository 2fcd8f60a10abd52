"""A common form of one device's training-step instructions, for comparing the two compilers of
the step: the runnable programs (`simulator.parallel`, real numpy tensors) and the scale program
(`simulator.cost.scale_program`, data-free, priced by the event clock). Issue 24, item 3.

A device's program is projected onto a list of items, in program order:
  ("compute", layer, phase, micro-batch, flops)  consecutive computes of one model layer (embedding,
      block{i}, head), phase and micro-batch merged; computes without FLOPs (layer norms,
      residuals, the loss, gradient packing) are left out
  ("send" | "recv", peer's pipeline coordinate, micro-batch, elements)
  ("collective", kind, axis, micro-batch, elements, blocking)   axis: the mesh axes the group spans
      ("tp", "cp", "dp", "cp+dp", "ep", "edp", "pp" for the tied embedding's first-last pair)
  ("optimizer", parameters updated)
Elements are bytes over the element size: 8 (float64) on the runnable side, 4 on the scale side
(priced with the fp32 recipe, `Assumptions.PRECISION["fp32"]`).
"""

from __future__ import annotations

import re

from simulator.cost.analytic import ADAM_BYTES_PER_PARAM
from simulator.cost.model_presets import ModelSpec
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.scale_program import build_scale_program
from simulator.program import Collective, Compute, Recv, Send

RUN_BYTES, SCALE_BYTES = 8, 4


def scale_inputs(cfg):
    """The scale program's (ModelSpec, ParallelConfig, Assumptions) for a resolved TrainConfig of a GPT."""
    g = cfg.model
    experts = getattr(g, "experts", 0)
    model = ModelSpec("runnable", layers=g.layers, hidden=g.hidden, heads=g.heads, seq=g.seq_len, vocab=g.vocab,
                      vocab_divisible_by=1, tied_embeddings=False, dropout=False, num_experts=experts,
                      moe_router_topk=getattr(g, "top_k", 2), moe_ffn_hidden=getattr(g, "expert_hidden", 0))
    pc = ParallelConfig(tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, cp=cfg.cp, ep=cfg.ep, micro_batch_size=cfg.micro_batch_size,
                        global_batch=cfg.global_batch, schedule=cfg.schedule if cfg.pp > 1 else "1f1b",
                        virtual_stages=cfg.virtual_stages, zero_stage=cfg.zero_stage, cp_comm_type=cfg.cp_comm_type,
                        sequence_parallel=cfg.strategy == "sp", balance_embedding=True)
    # MoE: the runnable's GShard capacity, priced as Megatron-Core's --moe-expert-capacity-factor with
    # --moe-pad-expert-input-to-capacity (`cost.moe.expert_tokens`)
    moe = dict(capacity_factor=g.capacity_factor, pad_to_capacity=True) if experts else {}
    return model, pc, Assumptions(dtype="fp32", grad_reduce_bytes=4, recipe="fp32", flash_attention=False, **moe)


def _axis(mesh, group) -> str:
    if len(group) == 1:
        return "self"
    coords = [dict(zip(mesh.axis_names, mesh.coords(r))) for r in group]
    varying = [a for a in mesh.axis_names if len({c[a] for c in coords}) > 1]
    return "+".join(sorted(varying))


def _merge(out, layer, phase, j, flops):
    if flops <= 0:
        return
    if out and out[-1][0] == "compute" and out[-1][1:4] == (layer, phase, j):
        out[-1] = out[-1][:4] + (out[-1][4] + flops,)
    else:
        out.append(("compute", layer, phase, j, flops))


def _runnable_axis(compiled, ins) -> str:
    """The mesh axes a runnable collective's group spans; the experts' all-to-all is "ep" and the
    expert gradients' reduction over the expert-data-parallel ranks "edp" (both carved out of the
    data x context ranks, `DeviceMesh.megatron_experts`)."""
    cfg = compiled.config
    if "/ep_" in ins.tag:  # block_lane.expert_parallel's dispatch and combine
        return "ep"
    axis = _axis(compiled.mesh, ins.group)
    if cfg.ep > 1 and ins.tensor.startswith("grad/") and len(ins.group) < cfg.dp * cfg.cp:
        return "edp"
    return axis


def project_runnable(compiled, rank: int) -> list:
    mesh, out, opt = compiled.mesh, [], 0
    for ins in compiled.program.code[rank]:
        if isinstance(ins, Compute):
            if ins.phase == "optimizer":
                opt += ins.flops / 10          # opt_update: 10 FLOPs per element (replicated.emit_optimizer)
                continue
            words = ins.label.split()
            layer = re.sub(r"^moe(\d+)$", r"block\1", words[1]) if len(words) > 1 else ins.label
            _merge(out, layer, ins.phase, ins.microbatch, ins.flops)
        elif isinstance(ins, (Send, Recv)):
            peer = ins.dst if isinstance(ins, Send) else ins.src
            out.append((type(ins).__name__.lower(), mesh.coord(peer, "pp"), ins.microbatch, ins.nbytes // RUN_BYTES))
        elif isinstance(ins, Collective):
            out.append(("collective", ins.kind, _runnable_axis(compiled, ins), ins.microbatch, ins.nbytes // RUN_BYTES,
                        ins.blocking))
    if opt:
        out.append(("optimizer", round(opt)))
    return out


_SCALE_AXIS = {"dp": "cp+dp", "cp": "cp", "ep": "ep", "edp": "edp", "emb": "pp", "tp": "tp"}


def project_scale(program, device: int, model: ModelSpec, pc: ParallelConfig, w: int) -> list:
    chunks = pc.chunk_layers(model.layers)
    offset = [sum(chunks[:s]) for s in range(len(chunks))]
    out, opt = [], 0
    for ins in program.code[device]:
        if isinstance(ins, Compute):
            if ins.phase == "optimizer":
                opt += ins.nbytes / ADAM_BYTES_PER_PARAM
                continue
            m = re.search(r" s(\d+) L(\d+) ", ins.label + " ")
            layer = f"block{offset[int(m[1])] + int(m[2])}" if m else ("head" if "logits" in ins.label else ins.label)
            _merge(out, layer, ins.phase, ins.microbatch, ins.flops)
        elif isinstance(ins, (Send, Recv)):
            peer = ins.dst if isinstance(ins, Send) else ins.src
            out.append((type(ins).__name__.lower(), peer // w, ins.microbatch, ins.nbytes // SCALE_BYTES))
        elif isinstance(ins, Collective):
            axis = _SCALE_AXIS[ins.tag] if ins.tag else ("tp" if len(ins.group) > 1 else "self")
            if axis == "cp+dp":     # the data x context group: the axes of it that have more than one rank
                axis = "+".join(a for a, n in (("cp", pc.cp), ("dp", pc.dp)) if n > 1) or "self"
            out.append(("collective", ins.kind, axis, ins.microbatch, ins.nbytes // SCALE_BYTES, ins.blocking))
    if opt:
        out.append(("optimizer", round(opt)))
    return out


def both(cfg) -> dict:
    """rank of replica (dp 0, cp 0) -> (runnable projection, scale projection)."""
    from simulator.parallel.strategies import compile_strategy

    cfg = cfg.resolved()
    compiled = compile_strategy(cfg)
    model, pc, A = scale_inputs(cfg)
    # the runnable side's gradient buckets (bucket_mb: non-blocking buckets of that many MB of float64)
    bucket = {} if cfg.bucket_mb is None else dict(bucket_nbytes=cfg.bucket_mb * 1e6 * SCALE_BYTES / RUN_BYTES,
                                                   overlap_grad_reduce=True)
    program = build_scale_program(model, pc, A, **bucket)
    mesh, w = compiled.mesh, cfg.tp
    out = {}
    for k in range(cfg.pp):
        for i in range(cfg.tp):
            rank = mesh.rank_at({"pp": k, "dp": 0, "ep": 0, "cp": 0, "tp": i})
            out[rank] = (project_runnable(compiled, rank), project_scale(program, k * w + i, model, pc, w))
    return out


def aspect(item) -> str:
    """What an item is about: compute, p2p, collective:<axis>, optimizer."""
    if item[0] == "collective":
        return f"collective:{item[2]}"
    return {"send": "p2p", "recv": "p2p"}.get(item[0], item[0])


def differing_aspects(pairs: dict) -> set:
    """The aspects in which the two projections of some device differ."""
    out = set()
    for run, scale in pairs.values():
        for name in {aspect(x) for x in run + scale}:
            if [x for x in run if aspect(x) == name] != [x for x in scale if aspect(x) == name]:
                out.add(name)
        if run != scale and not out:
            out.add("order")          # the same items, interleaved differently
    return out
