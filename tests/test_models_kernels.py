"""Every kernel and every Layer against central finite differences in float64."""

import math

import numpy as np
import pytest

from simulator.models import functional as K
from simulator.models.attention import attention_backward, attention_forward
from simulator.models.layers import CrossEntropy, Dense, Embedding, LMHead, TransformerBlock
from simulator.units import nbytes_of

EPS = 1e-6
RTOL, ATOL = 1e-6, 1e-8


def numgrad(f, x, n_samples=None, seed=0):
    """Central differences of scalar f() w.r.t. array x (perturbed in place, then restored).
    Returns (flat indices, gradients at those indices)."""
    flat = x.reshape(-1)
    idx = np.arange(flat.size)
    if n_samples is not None and flat.size > n_samples:
        idx = np.random.default_rng(seed).choice(flat.size, n_samples, replace=False)
    out = np.empty(len(idx))
    for j, i in enumerate(idx):
        old = flat[i]
        flat[i] = old + EPS
        fp = f()
        flat[i] = old - EPS
        fm = f()
        flat[i] = old
        out[j] = (fp - fm) / (2 * EPS)
    return idx, out


def check_grad(f, x, analytic, n_samples=None):
    assert analytic.shape == x.shape and analytic.dtype == np.float64
    idx, num = numgrad(f, x, n_samples)
    np.testing.assert_allclose(analytic.reshape(-1)[idx], num, rtol=RTOL, atol=ATOL)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def test_linear_input_and_weight_gradients(rng):
    x, W, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=5)
    R = rng.normal(size=(2, 3, 5))
    y, cache = K.linear_forward(x, W, b)
    np.testing.assert_allclose(y, np.einsum("btk,kn->btn", x, W) + b, rtol=1e-12)
    dx = K.linear_backward_input(R, W)  # needs only W and dy, not x
    dW, db = K.linear_backward_weight(cache, R)
    f = lambda: float((K.linear_forward(x, W, b)[0] * R).sum())
    check_grad(f, x, dx)
    check_grad(f, W, dW)
    check_grad(f, b, db)
    assert K.linear_backward_weight(cache, R, has_bias=False)[1] is None


def test_gelu_gradient_and_closeness_to_exact_gelu(rng):
    x = rng.normal(size=(3, 7)) * 2
    R = rng.normal(size=x.shape)
    y, cache = K.gelu_forward(x)
    exact = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x)
    assert np.max(np.abs(y - exact)) < 1e-3  # tanh approximation of x Phi(x)
    check_grad(lambda: float((K.gelu_forward(x)[0] * R).sum()), x, K.gelu_backward(cache, R))


def test_relu_gradient(rng):
    x = rng.normal(size=(4, 5))
    x[np.abs(x) < 1e-3] = 0.5  # keep away from the kink
    R = rng.normal(size=x.shape)
    y, cache = K.relu_forward(x)
    assert np.all(y >= 0) and np.array_equal(y > 0, x > 0)
    check_grad(lambda: float((K.relu_forward(x)[0] * R).sum()), x, K.relu_backward(cache, R))


def test_layer_norm_gradients_and_normalisation(rng):
    x = rng.normal(size=(2, 3, 6)) * 3 + 1
    g, b = rng.normal(size=6), rng.normal(size=6)
    R = rng.normal(size=x.shape)
    y, cache = K.layer_norm_forward(x, np.ones(6), np.zeros(6))
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-4)  # eps 1e-5 shrinks it slightly
    _, cache = K.layer_norm_forward(x, g, b)
    dx = K.layer_norm_backward_input(cache, R, g)
    dg, db = K.layer_norm_backward_weight(cache, R)
    f = lambda: float((K.layer_norm_forward(x, g, b)[0] * R).sum())
    check_grad(f, x, dx)
    check_grad(f, g, dg)
    check_grad(f, b, db)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_gradients(rng, causal):
    B, T, a, d = 2, 4, 2, 3
    q, k, v = (rng.normal(size=(B, T, a * d)) for _ in range(3))
    R = rng.normal(size=(B, T, a * d))
    out, cache = attention_forward(q, k, v, a, causal)
    dq, dk, dv = attention_backward(cache, R)
    f = lambda: float((attention_forward(q, k, v, a, causal)[0] * R).sum())
    for arr, grad in ((q, dq), (k, dk), (v, dv)):
        check_grad(f, arr, grad)


def test_attention_matches_textbook_single_head(rng):
    q, k, v = (rng.normal(size=(1, 5, 4)) for _ in range(3))
    s = q[0] @ k[0].T / 2.0
    s[np.triu_indices(5, 1)] = -np.inf
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(attention_forward(q, k, v, 1, True)[0][0], p @ v[0], rtol=1e-12)


def test_causal_mask_really_masks(rng):
    B, T, a, d = 1, 5, 2, 2
    q, k, v = (rng.normal(size=(B, T, a * d)) for _ in range(3))
    out, cache = attention_forward(q, k, v, a, causal=True)
    k2, v2 = k.copy(), v.copy()
    k2[:, 3:] += 10.0
    v2[:, 3:] -= 7.0  # change the future of positions 0..2
    out2, _ = attention_forward(q, k2, v2, a, causal=True)
    np.testing.assert_array_equal(out[:, :3], out2[:, :3])
    assert not np.allclose(out[:, 3:], out2[:, 3:])
    assert np.all(np.triu(cache[3][0, 0], 1) == 0)
    # the gradient of output row 1 reaches no key or value at positions 2..
    R = np.zeros_like(out)
    R[:, 1] = 1.0
    _, dk, dv = attention_backward(cache, R)
    assert np.all(dk[:, 2:] == 0) and np.all(dv[:, 2:] == 0)
    # without the mask the future does leak in
    assert not np.allclose(attention_forward(q, k, v, a, False)[0][:, :3], attention_forward(q, k2, v2, a, False)[0][:, :3])


def test_attention_on_a_subset_of_heads_equals_those_columns_of_the_full_run(rng):
    a, d = 4, 3
    q, k, v = (rng.normal(size=(2, 4, a * d)) for _ in range(3))
    full, _ = attention_forward(q, k, v, a)
    cols = slice(1 * d, 3 * d)  # heads 1 and 2, as a tensor-parallel rank would hold
    part, _ = attention_forward(q[..., cols], k[..., cols], v[..., cols], 2)
    np.testing.assert_allclose(part, full[..., cols], rtol=1e-12)


def test_embedding_gradients_with_repeated_tokens_and_short_sequences(rng):
    V, s, h = 5, 6, 3
    wte, wpe = rng.normal(size=(V, h)), rng.normal(size=(s, h))
    tokens = np.array([[0, 2, 2, 4], [2, 1, 0, 0]])  # T = 4 < s, repeats
    R = rng.normal(size=(2, 4, h))
    emb, p = Embedding("e", V, s, h), {"wte": wte, "wpe": wpe}
    y, cache = emb.forward(p, tokens)
    np.testing.assert_array_equal(y[1, 2], wte[0] + wpe[2])
    dwte, dwpe = emb.backward(p, cache, R)[1].values()
    f = lambda: float((emb.forward(p, tokens)[0] * R).sum())
    check_grad(f, wte, dwte)
    check_grad(f, wpe, dwpe)
    assert np.all(dwpe[4:] == 0) and np.all(dwte[3] == 0)


def test_cross_entropy_sum_count_gradient_and_ignore_index(rng):
    logits = rng.normal(size=(2, 3, 5))
    targets = np.array([[0, 4, -1], [2, 2, 1]])
    loss_sum, count, cache = K.cross_entropy_forward(logits, targets)
    assert count == 5
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expect = -sum(logp[b, t, targets[b, t]] for b in range(2) for t in range(3) if targets[b, t] >= 0)
    assert loss_sum == pytest.approx(expect, rel=1e-12)
    scale = 1 / 7.0
    d = K.cross_entropy_backward(cache, scale)
    assert np.all(d[0, 2] == 0)
    check_grad(lambda: K.cross_entropy_forward(logits, targets)[0] * scale, logits, d)


def test_cross_entropy_scale_makes_split_batches_sum_to_the_whole(rng):
    logits = rng.normal(size=(6, 4, 7))
    targets = rng.integers(0, 7, size=(6, 4))
    s_all, n_all, c_all = K.cross_entropy_forward(logits, targets)
    whole = K.cross_entropy_backward(c_all, 1 / n_all)
    parts = [K.cross_entropy_forward(logits[i : i + 2], targets[i : i + 2]) for i in (0, 2, 4)]
    assert sum(p[1] for p in parts) == n_all
    assert sum(p[0] for p in parts) == pytest.approx(s_all, rel=1e-12)
    split = np.concatenate([K.cross_entropy_backward(p[2], 1 / n_all) for p in parts])
    np.testing.assert_allclose(split, whole, rtol=1e-12, atol=1e-15)


LAYERS = [
    (Dense("d_gelu", 4, 5, "gelu"), lambda r: r.normal(size=(3, 4))),
    (Dense("d_relu", 4, 5, "relu"), lambda r: r.normal(size=(3, 4))),
    (Dense("d_logits", 5, 3), lambda r: r.normal(size=(3, 5))),
    (Embedding("emb", 7, 4, 6), lambda r: r.integers(0, 7, size=(2, 4))),
    (TransformerBlock("blk", 8, 2, 4), lambda r: r.normal(size=(2, 4, 8))),
    (TransformerBlock("blk_nc", 6, 3, 3, causal=False), lambda r: r.normal(size=(2, 3, 6))),
    (LMHead("head", 6, 9, 4), lambda r: r.normal(size=(2, 4, 6))),
]


@pytest.mark.parametrize("layer,make_x", LAYERS, ids=[lay.name for lay, _ in LAYERS])
def test_layer_gradients_against_finite_differences(layer, make_x, rng):
    params = layer.init(np.random.default_rng(0))
    assert {k: v.shape for k, v in params.items()} == layer.param_shapes()
    assert all(v.dtype == np.float64 for v in params.values())
    # perturb norms and biases off their (ones, zeros) init so their gradients are generic
    params = {k: v + 0.1 * rng.normal(size=v.shape) for k, v in params.items()}
    x = make_x(rng)
    y, cache = layer.forward(params, x)
    R = rng.normal(size=y.shape)
    dx, wcache = layer.backward_input(params, cache, R)
    grads = layer.backward_weight(params, wcache)
    dx2, grads2 = layer.backward(params, cache, R)
    f = lambda: float((layer.forward(params, x)[0] * R).sum())
    if isinstance(layer, Embedding):
        assert dx is None and dx2 is None
    else:
        np.testing.assert_array_equal(dx, dx2)
        check_grad(f, x, dx, n_samples=24)
    assert list(grads) == list(layer.param_shapes())
    for key in params:
        np.testing.assert_array_equal(grads[key], grads2[key])
        check_grad(f, params[key], grads[key], n_samples=24)


@pytest.mark.parametrize("layer,make_x", LAYERS, ids=[lay.name for lay, _ in LAYERS])
def test_activation_bytes_formula_matches_the_real_cache(layer, make_x, rng):
    batch = 3
    x = make_x(rng)
    x = np.concatenate([x] * 2)[:batch] if x.shape[0] < batch else x[:batch]
    _, cache = layer.forward(layer.init(np.random.default_rng(0)), x)
    assert layer.activation_bytes(batch) == nbytes_of(cache)


def test_forward_does_not_mutate_inputs_or_params(rng):
    layer = TransformerBlock("b", 8, 2, 4)
    params = layer.init(np.random.default_rng(0))
    x = rng.normal(size=(2, 4, 8))
    before = [x.copy()] + [v.copy() for v in params.values()]
    y, cache = layer.forward(params, x)
    layer.backward(params, cache, np.ones_like(y))
    for a, b in zip([x, *params.values()], before):
        np.testing.assert_array_equal(a, b)


def test_cross_entropy_object_round_trip(rng):
    ce = CrossEntropy()
    logits, t = rng.normal(size=(4, 3)), np.array([0, 1, 2, -1])
    s, n, c = ce.forward(logits, t)
    assert n == 3 and s > 0
    np.testing.assert_allclose(ce.backward(c, 0.5), K.cross_entropy_backward(c, 0.5))
