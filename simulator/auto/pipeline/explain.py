"""explain() for a pipelined network: each stage's operators and moves on its own rank block,
plus the pipeline phase: the gathers before a stage boundary and the Send/Recv pairs of each
crossing tensor (forward) and of its gradient (backward), per micro-batch."""

from __future__ import annotations

from dataclasses import replace

from ..explanation import Explanation, Move, operator_entry, plan_moves, step_entries
from .plan import PipelinePlan, build_pipeline_plan


def explain_pipeline(net, ctx) -> Explanation:
    pplan = build_pipeline_plan(net, ctx)
    operators, moves = [], []
    for k, sub in enumerate(pplan.stages):
        ranks = pplan.ranks(k)
        for np_ in sub.nodes:
            operators.append(dict(operator_entry(sub, np_), stage=k, ranks=list(ranks)))
        moves += [_shift(mv, ranks[0]) for mv in plan_moves(sub)]
    moves += list(_pipeline_moves(pplan))
    return Explanation(ctx, tuple(operators), tuple(moves), pplan)


def _shift(mv: Move, off: int) -> Move:
    return replace(mv, groups=tuple(tuple(off + r for r in g) for g in mv.groups))


def _pipeline_moves(pplan: PipelinePlan):
    Ds, m = pplan.stage_devices, pplan.micro_size
    for bd in pplan.boundaries:
        a, b = bd.src * Ds, bd.dst * Ds
        x = bd.tensor
        how = ("both stages keep it in the same layout, so each rank sends its own block" if bd.direct
               else f"stage {bd.src} gathers it to a replicated tensor, every rank sends it whole and "
                    f"stage {bd.dst} cuts it locally")
        label = f"stage {bd.src} -> {bd.dst}"
        for mv in step_entries("pipeline", label, x, bd.gather, f"{x} leaves stage {bd.src}"):
            yield _shift(mv, a)
        yield Move("pipeline", label, x, "send", tuple((a + i, b + i) for i in range(Ds)),
                   bd.nbytes, f"{x} is computed in stage {bd.src} and read in stage {bd.dst}: "
                   f"{how}; once per micro-batch ({m})", False)
        if bd.needs_grad:
            for mv in step_entries("pipeline", f"stage {bd.dst} -> {bd.src}", "d" + x, bd.grad_gather,
                               f"the gradient of {x} leaves stage {bd.dst}"):
                yield _shift(mv, b)
            yield Move("pipeline", f"stage {bd.dst} -> {bd.src}", "d" + x, "send",
                       tuple((b + i, a + i) for i in range(Ds)), bd.nbytes,
                       f"the gradient of {x}, summed over stage {bd.dst}'s copies, goes back to "
                       f"stage {bd.src}; once per micro-batch ({m})", False)
