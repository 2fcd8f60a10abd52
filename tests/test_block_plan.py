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


def test_the_moe_block_counts_and_order():
    """The MoE block's steps: the dense attention half, then router, routing, dispatch, experts,
    combine; forward FLOPs 8 B s h^2 + 4 B s^2 h (attention) + 2 B s h E (router) + 4 h f per
    capacity slot over E C B slots (GShard, Lepikhin et al. 2020: every expert's buffer padded to
    its capacity C = ceil(cf k s / E)); parameters the attention half's, W_r (h, E) and E expert MLPs."""
    from simulator.models.moe_steps import capacity, moe_block

    B, s, h, a, E, k, f = 2, 8, 8, 2, 4, 2, 12
    C = capacity(s, E, k, 1.25)
    assert C == 5  # ceil(1.25 x 2 x 8 / 4)
    steps = moe_block(h, a, E, k, C, f)
    assert [st.name for st in steps] == ["ln1", "qkv", "attn", "o", "res1", "ln2", "router", "topk", "choose",
                                         "slots", "count", "dispatch", "experts", "combine"]
    fwd, b_in, b_w = plan.flops(steps, B, s)
    experts = 4 * h * f * E * C * B
    assert fwd == 8 * B * s * h * h + 4 * B * s * s * h + 2 * B * s * h * E + experts
    assert b_w == 8 * B * s * h * h + 2 * B * s * h * E + experts  # attention has no weight gradient
    shapes = plan.param_shapes(steps)
    assert shapes["w_router"] == (h, E) and shapes["w_fc"] == (E, h, f) and shapes["b_proj"] == (E, h)
    assert sum(int(np.prod(v)) for v in shapes.values()) == 4 * h * h + 8 * h + h * E + E * (2 * h * f + f + h)


# ---- the block's order has one home: an edit of block_plan.py alone changes every strategy --------
def _silu(a):
    sig = 1.0 / (1.0 + np.exp(-a))
    return a * sig, sig


def _swiglu_fwd(step, p, x):
    """SwiGLU (Shazeer 2020) on interleaved (gate, up) columns, so a contiguous column split of fc
    (Megatron's column-parallel cut) keeps each pair on one tensor rank."""
    a, b = x[..., 0::2], x[..., 1::2]
    return _silu(a)[0] * b, x


def _swiglu_bwd_in(step, p, x, dy):
    a, b = x[..., 0::2], x[..., 1::2]
    s, sig = _silu(a)
    dx = np.empty_like(x)
    dx[..., 0::2] = dy * b * (sig + a * sig * (1.0 - sig))
    dx[..., 1::2] = dy * s
    return (dx,), None


def _rms_swiglu(monkeypatch):
    """RMSNorm in place of both layer norms and a SwiGLU MLP (fc writes 2f columns), written in
    block_plan alone: its kinds and its two block functions."""
    monkeypatch.setitem(KINDS, "rms_norm", Kind(_rms_fwd, _rms_bwd_in, _rms_bwd_w, lambda s, B, T: (0.0,) * 3,
                                                lambda s, T: s.width + 1))
    monkeypatch.setitem(KINDS, "swiglu", Kind(_swiglu_fwd, _swiglu_bwd_in, None, lambda s, B, T: (0.0,) * 3,
                                              lambda s, T: s.width))
    half, dense = plan.attention_half, plan.dense_block

    def attention_half(h, heads, causal=True):
        return tuple(Step(s.name, "rms_norm", s.reads, s.writes, s.params[:1], width=h) if s.kind == "layer_norm"
                     else s for s in half(h, heads, causal))

    def dense_block(h, heads, causal=True, ffn=None):
        f = ffn or 4 * h
        steps = dense(h, heads, causal, ffn)
        return steps[:6] + (plan.linear("fc", "m", "f", h, 2 * f), Step("act", "swiglu", ("f",), "g", width=2 * f)) \
            + steps[8:]

    monkeypatch.setattr(plan, "attention_half", attention_half)
    monkeypatch.setattr(plan, "dense_block", dense_block)


GPT_CASES = {
    "single": dict(strategy="single", devices=1), "dp": dict(strategy="dp", devices=2),
    "zero3": dict(strategy="zero3", devices=2), "pp-zb-h1": dict(strategy="pp", devices=2, pp=2, microbatches=2,
                                                                  schedule="zb-h1"),
    "tp": dict(strategy="tp", devices=2, tp=2), "sp": dict(strategy="sp", devices=2, tp=2),
    "cp-p2p": dict(strategy="cp", devices=2, cp=2), "cp-a2a": dict(strategy="cp", devices=2, cp=2, cp_comm_type="a2a"),
    "tp-cp-pp": dict(strategy="hybrid", devices=8, tp=2, cp=2, pp=2, microbatches=2, schedule="zb-h1"),
}
MOE_CASES = {
    "ep": dict(strategy="ep", devices=2, ep=2), "tp-ep": dict(strategy="hybrid", devices=4, tp=2, ep=2, dp=2),
    "cp-ep": dict(strategy="hybrid", devices=2, cp=2, ep=2), "zero3": dict(strategy="zero3", devices=2),
}


def test_the_block_order_is_written_once_every_strategy_follows_an_edit_of_block_plan(monkeypatch):
    """RMSNorm and SwiGLU added in block_plan.py alone (its kinds and block functions) change the
    single-device model, and every strategy, dense and MoE, still equals that one device."""
    from simulator.models import GPTConfig
    from simulator.parallel.config import TrainConfig
    from simulator.parallel.experts import MoEGPTConfig
    from simulator.training import train

    gpt = GPTConfig(layers=2, hidden=8, heads=2, seq_len=8, vocab=16)
    moe = MoEGPTConfig(layers=2, hidden=8, heads=2, seq_len=8, vocab=16, experts=2, top_k=2, capacity_factor=1.0)
    base = {m: train(TrainConfig(m, strategy="single", devices=1, global_batch=4, steps=2)).losses for m in (gpt, moe)}
    _rms_swiglu(monkeypatch)
    assert [s.kind for s in plan.dense_block(8, 2)][::5] == ["rms_norm", "rms_norm"]
    for model, cases in ((gpt, GPT_CASES), (moe, MOE_CASES)):
        for name, kw in cases.items():
            r = train(TrainConfig(model, global_batch=4, steps=2, **kw))
            assert r.max_rel_weight_diff_vs_single < 1e-9, name
            np.testing.assert_allclose(r.losses, r.reference_losses, rtol=1e-9, err_msg=name)
            assert not np.allclose(r.losses, base[model], rtol=1e-6), name  # the edit reached this strategy
