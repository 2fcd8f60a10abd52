"""Emit the instructions of one model replica: forward and backward of pipeline stages on ranks.

Every training strategy (single device, data parallel, layer-wise, pipeline, and their hybrids)
is this emitter driven by a schedule: a one-stage replica is single-device training with gradient
accumulation over micro-batches; a p-stage replica with one micro-batch is naive layer-wise model
parallelism; with m micro-batches and a schedule it is pipeline parallelism.

Tensor names on a device (the runtime counts memory by the first path element):
  param/{layer}/{p}  grad/{layer}/{p}  opt/{layer}/{p}/{state}  opt/step
  data/x/mb{j}  data/y/mb{j}  out/loss/mb{j}
  act/in/s{k}/mb{j}   input of model stage k (the output of stage k-1)
  act/d/s{k}/mb{j}    gradient with respect to that input
  act/cache/{layer}/mb{j}  act/wcache/{layer}/mb{j}  act/h/.. act/dh/..  temporaries
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..program import Collective, ProgramBuilder, Recv, Send
from .layer_kernels import layer_of


def param(li: int, p: str) -> str:
    return f"param/{li}/{p}"


def grad(li: int, p: str) -> str:
    return f"grad/{li}/{p}"


def stage_in(k: int, j: int) -> str:
    return f"data/x/mb{j}" if k == 0 else f"act/in/s{k}/mb{j}"


def stage_grad(k: int, j: int) -> str:
    return f"act/d/s{k}/mb{j}"


@dataclass
class Replica:
    """The layer emitter of one lane (whole layers on one rank: tp = cp = ep = 1): forward and
    backward of layer li of micro-batch j on rank r. `scale` multiplies the loss sum of each
    micro-batch before backward (1 / tokens of the whole replica batch). The parallelisms are
    transforms of this emitter, applied in a fixed order by `replicated.parallelize`: a sharded lane
    (lane.ShardedLane: tensor / sequence / context) replaces its layer emission, expert parallelism
    wraps that (expert_parallel.ExpertLane), ZeRO-2/3 wraps the result (zero.py), and
    `Stages` (the pipeline stage split) drives it through a schedule."""

    builder: ProgramBuilder
    config: object
    microbatch_size: int
    scale: float

    def _params(self, li: int) -> list[str]:
        return [param(li, n) for n in layer_of(self.config, li).param_shapes()]

    def _grads(self, li: int) -> list[str]:
        return [grad(li, n) for n in layer_of(self.config, li).param_shapes()]

    # ---- per-layer emission: the extension points (a tensor-parallel replica overrides them) ----
    def emit_layer_forward(self, r: int, li: int, x: str, y: str, j: int) -> None:
        """y, act/cache/{li}/mb{j} = layer li forward of x on rank r (x is freed by the caller)."""
        lyr = layer_of(self.config, li)
        self.builder.compute(r, "layer_fwd", [x, *self._params(li)], [y, f"act/cache/{li}/mb{j}"],
                             attrs={"config": self.config, "layer": li}, flops=lyr.forward_flops(self.microbatch_size),
                             phase="forward", microbatch=j, label=f"F{j} {lyr.name}")

    def emit_loss_forward(self, r: int, x: str, j: int) -> None:
        """out/loss/mb{j} (the loss sum) and act/cache/loss/mb{j} from the logits x."""
        self.builder.compute(r, "loss_fwd", [x, f"data/y/mb{j}"], [f"out/loss/mb{j}", f"act/cache/loss/mb{j}"],
                             attrs={"config": self.config}, phase="forward", microbatch=j, label=f"F{j} loss")

    def emit_loss_backward(self, r: int, dy: str, j: int) -> None:
        """dy = d(scale * loss sum)/d logits; frees the loss cache."""
        self.builder.compute(r, "loss_bwd", [f"act/cache/loss/mb{j}"], [dy], attrs={"config": self.config, "scale": self.scale},
                             phase="backward", microbatch=j, label=f"B{j} loss")
        self.builder.free(r, f"act/cache/loss/mb{j}")

    def emit_layer_backward(self, r: int, li: int, dy: str, dx: str | None, j: int, accumulate: bool) -> None:
        """B and W of layer li: dx (None for the first layer) and grad/{li}/* (added to the existing
        gradients when `accumulate`); frees the layer's cache (dy is freed by the caller)."""
        lyr = layer_of(self.config, li)
        fl_in, fl_w = lyr.backward_flops(self.microbatch_size)
        cache, acc = f"act/cache/{li}/mb{j}", self._grads(li) if accumulate else []
        self.builder.compute(r, "layer_bwd", [cache, dy, *self._params(li), *acc], ([dx] if dx else []) + self._grads(li),
                             attrs={"config": self.config, "layer": li, "n_params": len(self._params(li)),
                                    "want_dx": dx is not None}, flops=fl_in + fl_w,
                             phase="backward", microbatch=j, label=f"B{j} {lyr.name}")
        self.builder.free(r, cache)

    def emit_layer_backward_input(self, r: int, li: int, dy: str, dx: str | None, j: int) -> None:
        """B of zero-bubble schedules: dx and act/wcache/{li}/mb{j}; frees the cache."""
        lyr = layer_of(self.config, li)
        cache = f"act/cache/{li}/mb{j}"
        self.builder.compute(r, "layer_bwd_input", [cache, dy, *self._params(li)],
                             ([dx] if dx else []) + [f"act/wcache/{li}/mb{j}"],
                             attrs={"config": self.config, "layer": li, "want_dx": dx is not None},
                             flops=lyr.backward_flops(self.microbatch_size)[0],
                             phase="backward", microbatch=j, label=f"B{j} {lyr.name}")
        self.builder.free(r, cache)

    def emit_layer_backward_weight(self, r: int, li: int, j: int, accumulate: bool) -> None:
        """W of zero-bubble schedules: grad/{li}/* from act/wcache/{li}/mb{j}, which it frees."""
        lyr = layer_of(self.config, li)
        acc = self._grads(li) if accumulate else []
        self.builder.compute(r, "layer_bwd_weight", [f"act/wcache/{li}/mb{j}", *self._params(li), *acc], self._grads(li),
                             attrs={"config": self.config, "layer": li, "n_params": len(self._params(li))},
                             flops=lyr.backward_flops(self.microbatch_size)[1], phase="wgrad", microbatch=j,
                             label=f"W{j} {lyr.name}")
        self.builder.free(r, f"act/wcache/{li}/mb{j}")

    def boundary_group(self, r: int) -> tuple:
        """The ranks that split a stage-boundary tensor between them (`Stages`): none here."""
        return ()

    def activation_nbytes(self, li: int) -> int:
        """Bytes of one micro-batch's activation leaving layer li on one rank (float64)."""
        c = self.config
        width = getattr(c, "hidden", 0)
        tokens = self.microbatch_size * getattr(c, "seq_len", 1)
        return 8 * tokens * width

    def grads_complete(self, r: int, li: int) -> None:
        """Layer li's gradients on rank r are summed over the step's micro-batches (a lane notes
        what `finish_step` then completes: sequence parallelism's partial layer-norm gradients)."""

    def finish_step(self, r: int) -> None:
        """After rank r's data-parallel synchronisation, before its optimizer (sequence parallelism:
        one AllReduce of the partial layer-norm and bias gradients, lane.ShardedLane)."""


@dataclass
class Stages:
    """The pipeline stage split of one model replica: model stage k holds layers stages[k] and
    runs on rank ranks[stage_devices[k]], the device the schedule places it on
    (`Schedule.stage_devices`; the loop placement k % p until a schedule is run); `emit` is the
    lane's (transformed) layer emitter. Runs a schedule's actions in order, sends activations
    forward and their gradients back, and reports each layer whose gradients are complete."""

    emit: Replica
    stages: tuple[tuple[int, ...], ...]
    ranks: tuple[int, ...]
    on_grads_ready: Callable[[int, int], None] = lambda rank, layer: None
    m: int = 1
    stage_devices: tuple = ()  # model stage -> index into ranks, from the schedule
    _bw_done: dict = field(default_factory=dict)

    @property
    def p(self) -> int:
        return len(self.ranks)

    @property
    def builder(self) -> ProgramBuilder:
        return self.emit.builder

    def rank_of(self, k: int) -> int:
        return self.ranks[self.stage_devices[k] if self.stage_devices else k % self.p]

    def activation_nbytes(self, li: int) -> int:
        return self.emit.activation_nbytes(li)

    # ---- the stage boundary ------------------------------------------------------------------------
    # Megatron-LM's scatter-gather optimisation (Narayanan et al. 2021, Sec. 4.1; on by default, off
    # with --no-scatter-gather-tensors-in-pipeline): the tensor ranks of a stage hold the same
    # boundary tensor, so each sends its 1/t of it and the next stage's tensor group all-gathers it
    # (the scale program and the closed form price the same exchange). Under sequence parallelism
    # the tensor is already split (`boundary_group` is empty).
    def _send(self, r: int, x: str, dst: int, tag: str, nbytes: int, j: int) -> None:
        group = self.emit.boundary_group(r)
        if len(group) > 1:
            part = f"{x}/part"
            self.builder.compute(r, "split", [x], [part], attrs={"parts": len(group), "index": group.index(r),
                                                                  "axis": -1}, phase="other", microbatch=j, label=f"scatter {x}")
            x, nbytes = part, nbytes // len(group)
        self.builder.add(r, _send(x, dst, tag, nbytes, j))
        if len(group) > 1:
            self.builder.free(r, x)

    def _recv(self, r: int, x: str, src: int, tag: str, nbytes: int, j: int) -> None:
        group = self.emit.boundary_group(r)
        if len(group) <= 1:
            self.builder.add(r, _recv(x, src, tag, nbytes, j))
            return
        part, share = f"{x}/part", nbytes // len(group)
        self.builder.add(r, _recv(part, src, tag, share, j))
        self.builder.add(r, Collective("all_gather", part, x, group, axis=-1, nbytes=share, tag=f"gather {x}",
                                       microbatch=j))
        self.builder.free(r, part)

    # ---- forward -------------------------------------------------------------------------------
    def forward(self, k: int, j: int) -> None:
        b, r, last = self.builder, self.rank_of(k), k == len(self.stages) - 1
        x = stage_in(k, j)
        layers = self.stages[k]
        if k > 0 and self.rank_of(k - 1) != r:
            self._recv(r, x, self.rank_of(k - 1), f"f{k}/{j}", self.activation_nbytes(layers[0] - 1), j)
        for n, li in enumerate(layers):
            y = f"act/h/{li}/mb{j}" if (n < len(layers) - 1 or last) else stage_in(k + 1, j)
            self.emit.emit_layer_forward(r, li, x, y, j)
            b.free(r, x)
            x = y
        if last:
            self.emit.emit_loss_forward(r, x, j)
            b.free(r, x, f"data/y/mb{j}")
        elif self.rank_of(k + 1) != r:
            self._send(r, x, self.rank_of(k + 1), f"f{k + 1}/{j}", self.activation_nbytes(li), j)
            b.free(r, x)

    # ---- backward ------------------------------------------------------------------------------
    def _output_grad(self, k: int, j: int) -> str:
        r = self.rank_of(k)
        if k == len(self.stages) - 1:
            dy = f"act/dh/{self.stages[k][-1]}/mb{j}"
            self.emit.emit_loss_backward(r, dy, j)
            return dy
        if self.rank_of(k + 1) != r:
            self._recv(r, stage_grad(k + 1, j), self.rank_of(k + 1), f"b{k + 1}/{j}",
                       self.activation_nbytes(self.stages[k][-1]), j)
        return stage_grad(k + 1, j)

    def _send_input_grad(self, k: int, j: int) -> None:
        if k > 0 and self.rank_of(k - 1) != self.rank_of(k):
            self._send(self.rank_of(k), stage_grad(k, j), self.rank_of(k - 1), f"b{k}/{j}",
                       self.activation_nbytes(self.stages[k - 1][-1]), j)
            self.builder.free(self.rank_of(k), stage_grad(k, j))

    def backward(self, k: int, j: int, split: bool = False) -> None:
        """Full backward (B and W) of stage k for micro-batch j, or only B when `split`."""
        b, r = self.builder, self.rank_of(k)
        dy = self._output_grad(k, j)
        layers = self.stages[k]
        for n in reversed(range(len(layers))):
            li = layers[n]
            dx = None if li == 0 else stage_grad(k, j) if n == 0 else f"act/dh/{layers[n - 1]}/mb{j}"
            if split:
                self.emit.emit_layer_backward_input(r, li, dy, dx, j)
            else:
                self.emit.emit_layer_backward(r, li, dy, dx, j, accumulate=bool(self._bw_done.get((r, li))))
                self._weight_done(r, li)
            b.free(r, dy)
            dy = dx
        if layers[0] != 0:
            self._send_input_grad(k, j)

    def weight(self, k: int, j: int) -> None:
        """W of zero-bubble schedules: the parameter gradients of stage k for micro-batch j."""
        r = self.rank_of(k)
        for li in reversed(self.stages[k]):
            self.emit.emit_layer_backward_weight(r, li, j, accumulate=bool(self._bw_done.get((r, li))))
            self._weight_done(r, li)

    def _weight_done(self, r: int, li: int) -> None:
        self._bw_done[(r, li)] = self._bw_done.get((r, li), 0) + 1
        if self._bw_done[(r, li)] == self.m:
            self.emit.grads_complete(r, li)
            self.on_grads_ready(r, li)

    def run_schedule(self, schedule) -> None:
        """Emit every action of a pipeline schedule (simulator/parallel/schedules.py) in order."""
        self.m, self.stage_devices = schedule.m, schedule.stage_devices
        for d, actions in enumerate(schedule.actions):
            for a in actions:
                self.run_action(a, schedule.model_stage(d, a.chunk))

    def run_action(self, a, k: int) -> None:
        """One schedule action on model stage k."""
        if a.kind == "F":
            self.forward(k, a.microbatch)
        elif a.kind == "BW":
            self.backward(k, a.microbatch)
        elif a.kind == "B":
            self.backward(k, a.microbatch, split=True)
        else:
            self.weight(k, a.microbatch)


def run_bidirectional(schedule, down: Stages, up: Stages) -> None:
    """DualPipe: two copies of the model, `down` with stage k on ranks[k] (fed from device 0) and
    `up` with stage k on ranks[p-1-k] (fed from device p-1); chunk 0 of device d is down's stage d,
    chunk 1 up's stage p-1-d. Each copy runs m/2 micro-batches. Tensor names never collide on a
    device: its two stages differ (p is even) and so do the two copies' micro-batch ids."""
    down.m = up.m = schedule.m // 2
    for d, actions in enumerate(schedule.actions):
        for a in actions:
            (down, up)[a.chunk].run_action(a, schedule.model_stage(d, a.chunk))


def _send(tensor, dst, tag, nbytes, mb):
    return Send(tensor, dst, tag, nbytes, mb)


def _recv(tensor, src, tag, nbytes, mb):
    return Recv(tensor, src, tag, nbytes, mb)
