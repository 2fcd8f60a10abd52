"""The one-device check: is a parallel run the single-device math, at any number of steps?

A correct parallel run computes the same sums as one device in another order, so it differs by
rounding only. Compared at the END, that difference is not bounded by any fixed number: each
training step maps a difference d of the weights to J d (J the step's Jacobian), and Adam's
steps amplify it step after step (measured: a fault-free 400-step run differs from one device by
4.27e-9 under dp, 3.27e-9 under tp, 7.55e-9 under pp, and more with more steps). So the check
is made STEP BY STEP (`StepCheck`): after each step k the run's weights P_k are compared with one
step of the one-device math taken from the run's own previous weights,

    ref_k = update(P_{k-1}, grad(P_{k-1}; batch k), S_{k-1}),      |P_k - ref_k|_inf / |ref_k|_inf <= TOLERANCE

S being the one-device optimizer state, advanced with the one-device gradients at P_{k-1}. What
is left in the difference is ONE step's rounding, whatever k is:
- the gradient of a sum over n terms in another order differs by at most gamma_n * sum|terms|,
  gamma_n = n u / (1 - n u), u = 2^-53 (Higham, "Accuracy and Stability of Numerical Algorithms",
  2nd ed., 2002, Sec. 3.1 and 4.2); with n up to 10^6 terms (batch x width) that is ~1e-10 of
  the gradient's scale, times the cancellation of the sum;
- the update moves a weight by lr times a function of the gradient, so the weights differ by
  about lr x that error. Adam's m_hat / (sqrt(v_hat) + eps) is scale-free: a gradient element
  that is itself mostly rounding (a sum that cancels) keeps its whole relative error, damped only
  by eps (its update error is at most lr x |dg| / (sqrt(v_hat) + eps)). Measured on the 400-step
  runs of tests/test_one_device_check.py the worst step differs by 4.1e-12 (dp) to 2.2e-11 (hybrid);
- the optimizer state S is the one-device run's own, and the run's differs from it by an
  exponential moving average (beta < 1) of those per-step differences: bounded, not growing.
TOLERANCE = 1e-9 (the project's float64 equivalence bound) therefore leaves a margin of about 40
over one step's rounding at any step count, while any real difference is caught at the step
it happens: a wrong gradient element or a lost micro-batch moves the weights by a fraction of lr
(~1e-3 relative), six orders above the bound. The end-to-end difference (`max_rel_diff` of the
final weights against `reference_train`) is still measured and reported, as the drift.
"""

from __future__ import annotations

import math

import numpy as np

from .models import build_model, get_batch
from .parallel.config import TrainConfig
from .parallel.replicated import make_optimizer

TOLERANCE = 1e-9  # per step, relative (float64); see the module docstring


def _factor(cfg: TrainConfig) -> float:
    """With gradients_mean=False data-parallel replicas sum their mean gradients: the one-device
    update scales its gradient by dp to compute the same update."""
    return 1.0 if cfg.gradients_mean else float(cfg.dp)


def one_device_step(cfg: TrainConfig, model, opt, params: list, states: list, step: int):
    """Step `step` (0-based) of one device from (params, states): -> (params, states, loss)."""
    x, y = get_batch(cfg.model, cfg.global_batch, step, cfg.seed)
    loss, grads = model.loss_and_grads(params, x, y)
    factor = _factor(cfg)
    new_p, new_s = [], []
    for li, g in enumerate(grads):
        pairs = {n: opt.update(params[li][n], factor * g[n], states[li][n], step + 1) for n in params[li]}
        new_p.append({n: p for n, (p, _) in pairs.items()})
        new_s.append({n: s for n, (_, s) in pairs.items()})
    return new_p, new_s, float(loss)


def reference_train(cfg: TrainConfig) -> tuple[list[dict], list[float]]:
    """Plain single-device training in numpy: whole batch, mean loss, same optimizer and data."""
    cfg = cfg.resolved()
    model, opt = build_model(cfg.model), make_optimizer(cfg)
    params = model.init_params(cfg.seed)
    states = [{n: opt.init_state(v) for n, v in p.items()} for p in params]
    losses = []
    for step in range(cfg.steps):
        params, states, loss = one_device_step(cfg, model, opt, params, states, step)
        losses.append(loss)
    return params, losses


def max_rel_diff(a: list[dict], b: list[dict]) -> float:
    """max over parameters of ||a - b||_inf / max(||b||_inf, tiny); inf when a NaN or inf appears
    on either side, or the two sets of parameters differ in names or shapes (Python's max() and
    numpy comparisons drop NaN silently: a diverged run must never read as 'difference 0')."""
    if len(a) != len(b):
        return math.inf
    worst = 0.0
    for pa, pb in zip(a, b):
        if pa.keys() != pb.keys():
            return math.inf
        for n in pb:
            x, y = np.asarray(pa[n], dtype=np.float64), np.asarray(pb[n], dtype=np.float64)
            if x.shape != y.shape or not (np.isfinite(x).all() and np.isfinite(y).all()):
                return math.inf
            if y.size:
                denom = max(float(np.max(np.abs(y))), 1e-300)
                worst = max(worst, float(np.max(np.abs(x - y))) / denom)
    return worst


class StepCheck:
    """The step-by-step comparison of the module docstring. `start(step, params, states)` with the
    run's weights at its first step (states: the optimizer state there, None: the one-device
    run's own); `after(step, params)` once step `step` has run. A step run again (a replay after a
    failure) is not compared again: the comparison continues from the first step not yet
    compared, against the weights the run had before it. `worst` is the largest difference."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg.resolved()
        self.model, self.opt = build_model(self.cfg.model), make_optimizer(self.cfg)
        self.at, self.params, self.states, self.worst, self.where = 0, None, None, 0.0, None

    def start(self, step: int, params: list, states: list | None = None) -> None:
        if step == 0:  # the run starts where one device starts
            init = self.model.init_params(self.cfg.seed)
            self._note(max_rel_diff(params, init), 0)
            states = [{n: self.opt.init_state(v) for n, v in p.items()} for p in init]
        elif states is not None:  # a resumed checkpoint's, laid out as the parameters are
            states = [{n: states[li].get(n, {}) if li < len(states) else {} for n in p} for li, p in enumerate(params)]
        else:  # one device's own state at `step`
            ref = self.model.init_params(self.cfg.seed)
            states = [{n: self.opt.init_state(v) for n, v in p.items()} for p in ref]
            for s in range(step):
                ref, states, _ = one_device_step(self.cfg, self.model, self.opt, ref, states, s)
        self.at, self.params, self.states = step, params, states

    def after(self, step: int, params: list) -> None:
        if step != self.at or self.params is None:
            return
        ref, self.states, _ = one_device_step(self.cfg, self.model, self.opt, self.params, self.states, step)
        self._note(max_rel_diff(params, ref), step)
        self.at, self.params = step + 1, params

    def _note(self, diff: float, step: int) -> None:
        if math.isnan(self.worst):
            return
        if math.isnan(diff) or diff > self.worst:
            self.worst, self.where = diff, step
