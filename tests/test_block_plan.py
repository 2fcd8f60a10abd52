"""The block written once (simulator/models/block_plan.py): the interpreter over its steps, and a
new step kind added in one place (RMSNorm, Zhang & Sennrich 2019) trains with no other edit."""

import numpy as np

from simulator.models import block_plan as plan
from simulator.models.block_plan import KINDS, Kind, Step, dense_block
from tests.test_models_kernels import check_grad


def _rms_fwd(step, p, x):
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
    return x * rstd * p[0], (x * rstd, rstd)


def _rms_bwd_in(step, p, cache, dy):
    xhat, rstd = cache
    g = dy * p[0]
    return (rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)),), (xhat, dy)


def _rms_bwd_w(step, wc):
    xhat, dy = wc
    return ((xhat * dy).reshape(-1, xhat.shape[-1]).sum(axis=0),)


def test_a_new_step_kind_is_one_entry_and_its_gradients_are_right(monkeypatch):
    monkeypatch.setitem(KINDS, "rms_norm", Kind(_rms_fwd, _rms_bwd_in, _rms_bwd_w, lambda s, B, T: (0.0,) * 3,
                                                lambda s, T: s.width + 1))
    h, heads = 6, 2
    steps = tuple(Step(s.name, "rms_norm", s.reads, s.writes, s.params[:1], width=h) if s.kind == "layer_norm" else s
                  for s in dense_block(h, heads))
    shapes = plan.param_shapes(steps)
    assert "ln1_b" not in shapes and shapes["ln1_g"] == (h,)
    rng = np.random.default_rng(3)
    params = {n: rng.normal(size=s) * (0.3 if n.startswith("w_") else 1.0) for n, s in shapes.items()}
    x, R = rng.normal(size=(2, 4, h)), rng.normal(size=(2, 4, h))

    def run():
        values = {"x": x}
        plan.forward(steps, params, values)
        return values["y"]

    values = {"x": x}
    cache = plan.forward(steps, params, values)
    grads = {"y": R}
    wcache = plan.backward_input(steps, params, cache, grads)
    dparams = plan.backward_weight(steps, wcache)
    assert set(dparams) == set(shapes) and set(grads) == {"x"}
    f = lambda: float((run() * R).sum())  # noqa: E731
    check_grad(f, x, grads["x"], n_samples=24)
    for n in shapes:
        check_grad(f, params[n], dparams[n], n_samples=24)
    # the cache formula follows the new kind: (h + 1) per norm, as layer_norm's xhat and rstd
    assert plan.activation_bytes(steps, 2, 4) == plan.activation_bytes(dense_block(h, heads), 2, 4)


def test_the_dense_block_counts_are_narayanan_2021():
    """Narayanan et al. 2021, Sec. 5.1: 24 B s h^2 + 4 B s^2 h forward, 12 h^2 + 13 h parameters."""
    B, s, h, a = 3, 16, 8, 2
    steps = dense_block(h, a)
    assert plan.flops(steps, B, s) == (24 * B * s * h * h + 4 * B * s * s * h,
                                       24 * B * s * h * h + 8 * B * s * s * h, 24 * B * s * h * h)
    assert sum(int(np.prod(v)) for v in plan.param_shapes(steps).values()) == 12 * h * h + 13 * h
    assert [st.name for st in steps] == ["ln1", "qkv", "attn", "o", "res1", "ln2", "fc", "act", "proj", "res2"]
    wide = dense_block(h, a, ffn=3 * h)  # the MLP width is one argument
    assert plan.param_shapes(wide)["w_fc"] == (h, 3 * h)
