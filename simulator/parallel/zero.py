"""ZeRO stages 1-3 over the data-parallel group (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", Sec. 5 and 7).

Every parameter is one flat vector; data-parallel rank i of N_d owns the elements
`np.array_split(flat, N_d)[i]` (uneven sizes: the first `size % N_d` ranks hold one more).

  stage 1 (P_os):   full parameters and full gradients on every rank; after backward each
                    gradient is ReduceScattered, rank i updates its shard with its shard of the
                    optimizer state, then AllGathers the updated parameter.
  stage 2 (P_os+g): as 1, but each layer's gradient is ReduceScattered as soon as backward has
                    produced it (per micro-batch), so only the gradient shard is kept.
  stage 3 (P_os+g+p): only parameter shards are kept; a layer's parameters are AllGathered right
                    before its forward and again before its backward, and freed right after use.

Model-state bytes per device with Psi parameters (paper, Fig. 1: 2 + 2 + K with K = 12 in mixed
precision). Here everything is float64 and the optimizer is Adam: 8 (param) + 8 (grad) + K = 16
(m and v), so stage 0: 32 Psi; 1: 16 Psi + 16 Psi/N_d; 2: 8 Psi + 24 Psi/N_d; 3: 32 Psi/N_d.
(`simulator.model_states.model_state_bytes(Psi, N_d, stage, "fp64")`, the formula's one home.)
Ring communication per device per step (Sec. 7): stages 0, 1, 2 move 2 Psi (AllReduce, or
ReduceScatter + AllGather), stage 3 moves 3 Psi (two AllGathers + one ReduceScatter); the ring
sends exactly (N_d - 1)/N_d of that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ParasimError
from ..model_states import model_state_bytes
from ..models import build_model
from ..program import Collective, ProgramBuilder
from . import zero_kernels  # noqa: F401 -- registers the zero_* kernels this compiler emits
from .config import TrainConfig
from .emit import Replica, grad, param
from .layer_kernels import layer_of, optimizer_state_names
from .replicated import Compiled, compile_replicated, emit_optimizer, initial_state, make_optimizer, tokens_per_sample
from .schedule_registry import make_schedule
from .zero_hybrid import shard_sizes as shard_sizes  # one home; re-exported

F64 = 8


def shard_of(value: np.ndarray, parts: int, index: int) -> np.ndarray:
    return np.array_split(np.ravel(value), parts)[index].copy()


@dataclass
class ZeroReplica(Replica):
    """A one-stage replica on rank ranks[0] whose layers run on flat parameters; `group` is the
    data-parallel group the ZeRO collectives use, `stage` the ZeRO stage (1-3)."""

    stage: int = 1
    group: tuple[int, ...] = ()
    mean: bool = True

    def _shapes(self, li: int) -> dict:
        return layer_of(self.config, li).param_shapes()

    def _collective(self, r, kind, tensor, out, nbytes, tag):
        op = "mean" if self.mean else "sum"
        self.builder.add(r, Collective(kind, tensor, out, self.group, op=op, axis=0, nbytes=nbytes, tag=tag))

    def _layer_params(self, r: int, li: int, why: str, j: int) -> list[str]:
        """Stage 3: AllGather the layer's parameter shards into full flat vectors (freed after use)."""
        if self.stage < 3:
            return self._params(li)
        i, n_d = self.group.index(r), len(self.group)
        names = []
        for n, shape in self._shapes(li).items():
            full = f"param/{li}/{n}/full"
            own = shard_sizes(int(np.prod(shape)), n_d)[i]
            self._collective(r, "all_gather", param(li, n), full, F64 * own, f"{why}{j}:{li}/{n}")
            names.append(full)
        return names

    def emit_layer_forward(self, r, li, x, y, j):
        lyr = layer_of(self.config, li)
        names = self._layer_params(r, li, "gather-f", j)
        self.builder.compute(r, "zero_layer_fwd", [x, *names], [y, f"act/cache/{li}/mb{j}"],
                             attrs={"config": self.config, "layer": li}, flops=lyr.forward_flops(self.microbatch_size),
                             phase="forward", microbatch=j, label=f"F{j} {lyr.name}")
        if self.stage == 3:
            self.builder.free(r, *names)

    def emit_layer_backward(self, r, li, dy, dx, j, accumulate):
        b, lyr = self.builder, layer_of(self.config, li)
        names = self._layer_params(r, li, "gather-b", j)
        grads = self._grads(li)
        # stage 1 sums full gradients over micro-batches; stages 2-3 scatter each micro-batch's at once
        into_acc = accumulate and self.stage == 1
        outs = [g + "/mb" for g in grads] if accumulate and self.stage >= 2 else grads
        fl_in, fl_w = lyr.backward_flops(self.microbatch_size)
        b.compute(r, "zero_layer_bwd", [f"act/cache/{li}/mb{j}", dy, *names, *(grads if into_acc else [])],
                  ([dx] if dx else []) + outs,
                  attrs={"config": self.config, "layer": li, "n_params": len(names), "want_dx": dx is not None},
                  flops=fl_in + fl_w, phase="backward", microbatch=j, label=f"B{j} {lyr.name}")
        b.free(r, f"act/cache/{li}/mb{j}")
        if self.stage == 3:
            b.free(r, *names)
        if self.stage >= 2:
            for (n, shape), g, o in zip(self._shapes(li).items(), grads, outs):
                self._collective(r, "reduce_scatter", o, o, F64 * int(np.prod(shape)), f"rs{j}:{li}/{n}")
                if o != g:
                    b.compute(r, "add", [g, o], [g], phase="other", label=f"acc {li}/{n}")
                    b.free(r, o)

    def emit_layer_backward_input(self, r, li, dy, dx, j):
        raise ParasimError("ZeRO runs with the 1f1b order on one stage; split backward (zero-bubble) is not supported")

    emit_layer_backward_weight = emit_layer_backward_input

    def finish(self, r: int, optimizer) -> None:
        """Stage 1: ReduceScatter the full gradients; then the optimizer on this rank's shards."""
        b, layers = self.builder, self.stages[0]
        if self.stage == 1:
            for li in reversed(layers):
                for n, shape in self._shapes(li).items():
                    self._collective(r, "reduce_scatter", grad(li, n), grad(li, n), F64 * int(np.prod(shape)),
                                     f"rs:{li}/{n}")
        if self.stage == 3:  # shards everywhere: the plain elementwise update on them
            sizes = {li: {n: (shard_sizes(int(np.prod(s)), len(self.group))[self.group.index(r)],)
                          for n, s in self._shapes(li).items()} for li in layers}
            emit_optimizer(b, r, layers, self.config, optimizer, shapes=sizes.__getitem__)
            return
        b.compute(r, "increment", ["opt/step"], ["opt/step"], phase="optimizer", label="step += 1")
        states = optimizer_state_names(optimizer)
        i, n_d = self.group.index(r), len(self.group)
        for li in layers:
            for n, shape in self._shapes(li).items():
                own = shard_sizes(int(np.prod(shape)), n_d)[i]
                st = [f"opt/{li}/{n}/{s}" for s in states]
                new = f"param/{li}/{n}/shard"
                b.compute(r, "zero_shard_update", [param(li, n), grad(li, n), "opt/step", *st], [new, *st],
                          attrs={"optimizer": optimizer, "parts": n_d, "index": i},
                          nbytes=F64 * own * (3 + 2 * len(states)), flops=10 * own, phase="optimizer",
                          label=f"update {li}/{n} shard")
                b.free(r, grad(li, n))
                self._collective(r, "all_gather", new, param(li, n), F64 * own, f"ag:{li}/{n}")
                b.free(r, new)


def zero_initial_state(config, layers, optimizer, seed: int, stage: int, parts: int, index: int) -> dict:
    """Flat parameters (stage 3: this rank's shard only) and this rank's optimizer-state shards."""
    full = initial_state(config, layers, optimizer, seed)
    out = {"opt/step": full.pop("opt/step")}
    for name, value in full.items():
        if name.startswith("opt/") or stage == 3:
            out[name] = shard_of(value, parts, index)
        else:
            out[name] = np.ravel(value).copy()
    return out


def _gather(config, layers, stage: int, group: tuple[int, ...]):
    """-> runtime -> per-layer parameter dicts, reassembled from the flat vectors or shards."""
    shapes = {li: layer_of(config, li).param_shapes() for li in layers}
    names = [param(li, n) for li in layers for n in shapes[li]]

    def gather(runtime) -> list[dict]:
        held = [runtime.fetch(r, names) for r in (group if stage == 3 else group[:1])]
        return [{n: np.concatenate([h[param(li, n)] for h in held]).reshape(s) for n, s in shapes[li].items()}
                for li in layers]

    return gather


def model_state_formula_bytes(psi: float, dp: int, stage: int, p: int = 8, g: int = 8, k: int = 16) -> float:
    """ZeRO per-device model states (paper, Sec. 5): stage 0 (p+g+k) Psi; 1 (p+g) Psi + k Psi/N_d;
    2 p Psi + (g+k) Psi/N_d; 3 (p+g+k) Psi/N_d. Defaults: float64 Adam, 8 + 8 + 16
    (`simulator.model_states`, the one home of the formula)."""
    return model_state_bytes(psi, dp, stage, (p, g, k))


def expected_model_state_bytes(config, dp: int, stage: int, rank: int, state_arrays: int = 2) -> dict[str, int]:
    """Exact bytes rank `rank` should hold, with this module's np.array_split shards:
    param 8 x (Psi or own shard from stage 3), grad 8 x (Psi, or own shard from stage 2),
    opt 8 x state_arrays x (Psi, or own shard from stage 1) + 8 (the int64 step counter)."""
    sizes = [int(np.prod(s)) for li in range(len(build_model(config).layers)) for s in layer_of(config, li).param_shapes().values()]
    psi, own = sum(sizes), sum(shard_sizes(n, dp)[rank] for n in sizes)
    return {"param": F64 * (psi if stage < 3 else own), "grad": F64 * (psi if stage < 2 else own),
            "opt": F64 * state_arrays * (psi if stage < 1 else own) + 8}


def model_state_report(program, memory) -> list[dict[str, int]]:
    """Measured model states per rank from a real run's samples (memory[rank][index] = {category:
    bytes}, RunResult.memory): param and opt at the end of the step (between steps), grad_peak the
    most gradient bytes at any moment, grad_at_update the gradient bytes when the optimizer starts."""
    out = []
    for r, samples in enumerate(memory):
        last = samples[max(samples)]
        start = next(i for i, ins in enumerate(program.code[r]) if getattr(ins, "op", None) == "increment")
        out.append({"param": last["param"], "opt": last["opt"], "grad_end": last["grad"],
                    "grad_peak": max(s["grad"] for s in samples.values()), "grad_at_update": samples[start]["grad"]})
    return out


def compile_zero(cfg: TrainConfig) -> Compiled:
    """ZeRO stage cfg.zero_stage over cfg.dp data-parallel ranks (stage 0 is plain data parallelism)."""
    cfg = cfg.resolved()
    if cfg.zero_stage == 0:
        return compile_replicated(replace(cfg, strategy="dp"))
    if cfg.pp != 1 or cfg.tp != 1 or cfg.virtual_stages != 1:
        raise ParasimError(f"ZeRO shards over data parallelism only: needs pp=1, tp=1, one virtual stage; "
                           f"got pp={cfg.pp}, tp={cfg.tp}, virtual stages={cfg.virtual_stages}")
    if cfg.bucket_mb is not None or cfg.grad_dtype != "float64":
        raise ParasimError("ZeRO here moves float64 per-parameter collectives: drop --bucket-mb and --grad-dtype")
    dp, m, stage = cfg.dp, cfg.m, cfg.zero_stage
    group = tuple(range(dp))
    b = ProgramBuilder(cfg.devices, name=f"zero{stage} dp={dp} m={m}")
    layers = tuple(range(cfg.n_layers))
    optimizer = make_optimizer(cfg)
    mbs, rows = cfg.micro_batch_size, cfg.global_batch // dp
    count = rows * tokens_per_sample(cfg.model)
    schedule = make_schedule("1f1b", 1, m, 1)
    feeds, loss_tensors, initial = [], {}, {}
    for i in range(dp):
        rep = ZeroReplica(b, cfg.model, (layers,), (i,), mbs, 1.0 / count, stage=stage, group=group,
                          mean=cfg.gradients_mean)
        rep.run_schedule(schedule)
        rep.finish(i, optimizer)
        for j in range(m):
            a = i * rows + j * mbs
            feeds += [(i, f"data/x/mb{j}", a, a + mbs, "x"), (i, f"data/y/mb{j}", a, a + mbs, "y")]
        loss_tensors[i] = [f"out/loss/mb{j}" for j in range(m)]
        initial[i] = zero_initial_state(cfg.model, layers, optimizer, cfg.seed, stage, dp, i)
    param_home = {(li, n): (0, param(li, n)) for li in layers for n in layer_of(cfg.model, li).param_shapes()}
    return Compiled(cfg, b.build(), initial, feeds, param_home, loss_tensors, count * dp, None,
                    {"schedule": None, "zero": stage}, gather=_gather(cfg.model, layers, stage, group))
