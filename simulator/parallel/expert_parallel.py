"""Expert parallelism (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021):
the MoE blocks' experts are spread over `ep` devices, everything else is data parallel over the
same devices.

Devices 0..N-1 are all data-parallel ranks (each its own slice of the batch). Consecutive blocks
of `ep` ranks form expert groups; rank r holds experts (r mod ep) E/ep .. (r mod ep + 1) E/ep - 1
of every MoE block. In each MoE block a rank routes its own tokens, then

    AllToAll (dispatch):  (E, B C, h) -> the tokens of all group members for my E/ep experts
    my experts' MLPs
    AllToAll (combine):   outputs back to the ranks their tokens came from, (E, B C, h)

and the backward runs the same two AllToAlls in reverse (the backward of AllToAll is AllToAll).
Gradients: dense parameters are AllReduced over all N ranks as in data parallelism; an expert's
gradient already sums the tokens of its whole group, so it is AllReduced (sum) only over the
N/ep ranks holding the same expert, then divided by N when averaging (each rank scaled its loss
by 1 / its own token count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParasimError
from ..program import Collective, ProgramBuilder
from .config import TrainConfig
from .emit import Replica, grad, param
from .experts import EXPERT_PARAMS, MoEBlock, MoEGPTConfig
from .layer_kernels import layer_of, optimizer_state_names
from .moe_kernels import dense_names
from .replicated import Compiled, emit_optimizer, initial_state, make_optimizer, tokens_per_sample
from .schedule_registry import make_schedule


def _is_moe(config, li: int) -> bool:
    return isinstance(layer_of(config, li), MoEBlock)


@dataclass
class ExpertReplica(Replica):
    """A one-stage replica whose MoE blocks dispatch over `group` (its expert-parallel group)."""

    group: tuple[int, ...] = ()

    @property
    def ep(self) -> int:
        return len(self.group)

    def _a2a(self, r: int, src: str, dst: str, nbytes: int, tag: str) -> str:
        if self.ep == 1:
            return src
        self.builder.add(r, Collective("all_to_all", src, dst, self.group, axis=0, nbytes=nbytes, tag=tag))
        self.builder.free(r, src)
        return dst

    def _buf_nbytes(self, lyr: MoEBlock) -> int:
        return 8 * lyr.experts * self.microbatch_size * lyr.capacity * lyr.hidden

    def emit_layer_forward(self, r, li, x, y, j):
        if not _is_moe(self.config, li):
            return super().emit_layer_forward(r, li, x, y, j)
        b, lyr = self.builder, layer_of(self.config, li)
        at = {"config": self.config, "layer": li}
        a, nb, pre = f"act/moe/{li}", self._buf_nbytes(lyr), lyr.forward_flops(self.microbatch_size)
        dense = [param(li, n) for n in dense_names(lyr)]
        b.compute(r, "moe_pre", [x, *dense], [f"{a}/disp/mb{j}", f"act/cache/{li}/mb{j}", f"{a}/stats/mb{j}"],
                  attrs=at, flops=pre / 2, phase="forward", microbatch=j, label=f"F{j} {lyr.name} route")
        b.compute(r, "add", [f"out/moe/{li}", f"{a}/stats/mb{j}"], [f"out/moe/{li}"], phase="other", label="count")
        b.free(r, f"{a}/stats/mb{j}")
        buf = self._a2a(r, f"{a}/disp/mb{j}", f"{a}/xin/mb{j}", nb, f"dispatch{j}:{li}")
        b.compute(r, "moe_experts_fwd", [buf, *(param(li, n) for n in EXPERT_PARAMS)],
                  [f"{a}/eo/mb{j}", f"{a}/ecache/mb{j}"], attrs={**at, "ep": self.ep}, flops=pre / 2,
                  phase="forward", microbatch=j, label=f"F{j} {lyr.name} experts")
        b.free(r, buf)
        back = self._a2a(r, f"{a}/eo/mb{j}", f"{a}/eout/mb{j}", nb, f"combine{j}:{li}")
        b.compute(r, "moe_post", [f"act/cache/{li}/mb{j}", back], [y], attrs=at, phase="forward", microbatch=j,
                  label=f"F{j} {lyr.name} combine")

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        if not _is_moe(self.config, li):
            return super().emit_layer_backward(r, li, dy, dx, j, accumulate)
        b, lyr = self.builder, layer_of(self.config, li)
        at = {"config": self.config, "layer": li}
        a, nb = f"act/moe/{li}", self._buf_nbytes(lyr)
        fl = lyr.backward_flops(self.microbatch_size)[0]
        back = f"{a}/eout/mb{j}" if self.ep > 1 else f"{a}/eo/mb{j}"
        b.compute(r, "moe_post_bwd", [f"act/cache/{li}/mb{j}", back, dy], [f"{a}/deo/mb{j}", f"{a}/dgates/mb{j}"],
                  attrs=at, phase="backward", microbatch=j, label=f"B{j} {lyr.name} combine")
        b.free(r, back)
        dbuf = self._a2a(r, f"{a}/deo/mb{j}", f"{a}/dout/mb{j}", nb, f"combine-b{j}:{li}")
        exp_grads = [grad(li, n) for n in EXPERT_PARAMS]
        b.compute(r, "moe_experts_bwd", [f"{a}/ecache/mb{j}", dbuf, *(param(li, n) for n in EXPERT_PARAMS),
                                         *(exp_grads if accumulate else [])], [f"{a}/dxin/mb{j}", *exp_grads],
                  attrs={**at, "ep": self.ep}, flops=fl, phase="backward", microbatch=j,
                  label=f"B{j} {lyr.name} experts")
        b.free(r, f"{a}/ecache/mb{j}", dbuf)
        ddisp = self._a2a(r, f"{a}/dxin/mb{j}", f"{a}/ddisp/mb{j}", nb, f"dispatch-b{j}:{li}")
        names = dense_names(lyr)
        dense_grads = [grad(li, n) for n in names]
        b.compute(r, "moe_pre_bwd", [f"act/cache/{li}/mb{j}", ddisp, f"{a}/dgates/mb{j}", dy,
                                     *(param(li, n) for n in names), *(dense_grads if accumulate else [])],
                  ([dx] if dx else []) + dense_grads, attrs={**at, "want_dx": dx is not None}, flops=fl,
                  phase="backward", microbatch=j, label=f"B{j} {lyr.name} route")
        b.free(r, f"act/cache/{li}/mb{j}", ddisp, f"{a}/dgates/mb{j}")

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        raise ParasimError("expert parallelism runs the 1f1b order on one stage; split backward is not supported")

    emit_layer_backward_weight = emit_layer_backward_input


def local_shapes(config, li: int, ep: int) -> dict:
    shapes = layer_of(config, li).param_shapes()
    if not _is_moe(config, li):
        return shapes
    return {n: ((s[0] // ep,) + s[1:] if n in EXPERT_PARAMS else s) for n, s in shapes.items()}


def _gather(config, layers, ep: int, dp: int, notes: dict):
    """-> runtime -> per-layer parameters (experts concatenated from ranks 0..ep-1); also writes the
    routing counts summed over ranks and steps into notes["moe"]."""

    def gather(runtime) -> list[dict]:
        out = []
        for li in layers:
            names = [param(li, n) for n in layer_of(config, li).param_shapes()]
            held = [runtime.fetch(r, names) for r in range(ep if _is_moe(config, li) else 1)]
            out.append({n: (np.concatenate([h[param(li, n)] for h in held]) if _is_moe(config, li) and n in EXPERT_PARAMS
                            else held[0][param(li, n)]) for n in layer_of(config, li).param_shapes()})
        moe = {}
        for li in (li for li in layers if _is_moe(config, li)):
            lyr = layer_of(config, li)
            total = sum(runtime.fetch(r, [f"out/moe/{li}"])[f"out/moe/{li}"] for r in range(dp))
            moe[lyr.name] = {"tokens_per_expert": [int(v) for v in total[:-1]], "dropped": int(total[-1]),
                             "capacity_per_sequence": lyr.capacity}
        notes["moe"] = moe
        return out

    return gather


class ExpertRows:
    """The block of an expert tensor (experts along dim 0) rank r holds: experts
    [c e, (c+1) e) with e = experts / ep and c = r mod ep (the cut of `compile_expert_parallel`)."""

    def __init__(self, ep: int):
        self.ep = ep

    def block_slices(self, rank: int, global_shape) -> tuple[slice, ...]:
        e, c = global_shape[0] // self.ep, rank % self.ep
        return (slice(c * e, (c + 1) * e),) + tuple(slice(0, n) for n in global_shape[1:])


def compile_expert_parallel(cfg: TrainConfig) -> Compiled:
    cfg = cfg.resolved()
    model, n, ep = cfg.model, cfg.devices, cfg.ep
    if not isinstance(model, MoEGPTConfig):
        raise ParasimError(f"expert parallelism needs a mixture-of-experts model (MoEGPTConfig), got {model!r}")
    if cfg.pp != 1 or cfg.tp != 1 or cfg.virtual_stages != 1 or cfg.dp != n:
        raise ParasimError(f"expert parallelism here is data parallel over all devices: needs pp=1, tp=1, dp={n}; "
                           f"got dp={cfg.dp}, pp={cfg.pp}, tp={cfg.tp}")
    if n % ep or model.experts % ep:
        raise ParasimError(f"ep={ep} must divide the devices ({n}) and the experts ({model.experts})")
    if cfg.bucket_mb is not None or cfg.grad_dtype != "float64":
        raise ParasimError("expert parallelism moves float64 per-parameter AllReduces: drop --bucket-mb and --grad-dtype")
    dp, m = n, cfg.m
    b = ProgramBuilder(n, name=f"ep={ep} dp={dp} m={m}")
    layers = tuple(range(cfg.n_layers))
    optimizer = make_optimizer(cfg)
    mbs, rows = cfg.microbatch_size, cfg.batch_size // dp
    count = rows * tokens_per_sample(model)
    schedule = make_schedule("1f1b", 1, m, 1)
    feeds, loss_tensors, initial = [], {}, {}
    everyone = tuple(range(n))
    op = "mean" if cfg.gradients_mean else "sum"
    for r in range(n):
        group = tuple(range(r - r % ep, r - r % ep + ep))
        ExpertReplica(b, model, (layers,), (r,), mbs, 1.0 / count, group=group).run_schedule(schedule)
        same_experts = tuple(range(r % ep, n, ep))
        for li in reversed(layers):
            for name, shape in local_shapes(model, li, ep).items():
                g, nbytes = grad(li, name), 8 * int(np.prod(shape))
                if _is_moe(model, li) and name in EXPERT_PARAMS:
                    if len(same_experts) > 1:
                        b.add(r, Collective("all_reduce", g, g, same_experts, op="sum", nbytes=nbytes, tag=g))
                    if cfg.gradients_mean and dp > 1:
                        b.compute(r, "scale", [g], [g], attrs={"factor": 1.0 / dp}, phase="other", label=f"{g} / {dp}")
                elif dp > 1:
                    b.add(r, Collective("all_reduce", g, g, everyone, op=op, nbytes=nbytes, tag=g))
        emit_optimizer(b, r, layers, model, optimizer, shapes=lambda li: local_shapes(model, li, ep))
        for j in range(m):
            a = r * rows + j * mbs
            feeds += [(r, f"data/x/mb{j}", a, a + mbs, "x"), (r, f"data/y/mb{j}", a, a + mbs, "y")]
        loss_tensors[r] = [f"out/loss/mb{j}" for j in range(m)]
        e_loc, c = model.experts // ep, r % ep
        cut = lambda li, name, v: v[c * e_loc:(c + 1) * e_loc] if _is_moe(model, li) and name in EXPERT_PARAMS else v
        initial[r] = initial_state(model, layers, optimizer, cfg.seed, shard=cut)
        initial[r].update({f"out/moe/{li}": np.zeros(model.experts + 1) for li in layers if _is_moe(model, li)})
    states = ["", *(f"/{s}" for s in optimizer_state_names(optimizer))]
    notes = {"schedule": None, "ep": ep,  # where each rank's experts sit, for checkpoints (faults/shards.py)
             "layouts": {f"{'param' if not st else 'opt'}/{li}/{n}{st}": ExpertRows(ep)
                         for li in layers if _is_moe(model, li) and ep > 1 for n in EXPERT_PARAMS for st in states}}
    param_home = {(li, nm): (0, param(li, nm)) for li in layers for nm in layer_of(model, li).param_shapes()}
    return Compiled(cfg, b.build(), initial, feeds, param_home, loss_tensors, count * dp, None, notes,
                    gather=_gather(model, layers, ep, dp, notes))
