"""Training on one device, optimizer shard equality, configs, data, and the GPT formulas."""

import pickle

import numpy as np
import pytest

from simulator.errors import ParasimError
from simulator.models import (
    SGD,
    Adam,
    GPTConfig,
    MLPConfig,
    apply_updates,
    build_model,
    config_from_dict,
    get_batch,
    gpt_iteration_flops,
    gpt_model_param_count,
    gpt_param_count,
    init_states,
)

TINY_GPT = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16)
TINY_MLP = MLPConfig(in_dim=8, hidden=32, layers=3, classes=4, activation="gelu")


def train(config, steps, batch, opt):
    model = build_model(config)
    params = model.init_params(seed=0)
    states = init_states(opt, params)
    losses = []
    for step in range(1, steps + 1):
        x, t = get_batch(config, batch, step, seed=0)
        loss, grads = model.loss_and_grads(params, x, t)
        params, states = apply_updates(opt, params, grads, states, step)
        losses.append(loss)
    return losses


@pytest.mark.parametrize("config", [TINY_GPT, TINY_MLP], ids=["gpt", "mlp"])
def test_adam_training_makes_the_loss_fall(config):
    losses = train(config, steps=40, batch=16, opt=Adam(lr=1e-2))
    initial, final = losses[0], np.mean(losses[-5:])
    assert initial == pytest.approx(np.log(config.vocab if isinstance(config, GPTConfig) else config.classes), rel=0.25)
    assert final < 0.7 * initial, (initial, final)


def test_sgd_with_momentum_trains_the_mlp():
    losses = train(TINY_MLP, steps=30, batch=16, opt=SGD(lr=0.1, momentum=0.9))
    assert np.mean(losses[-5:]) < 0.7 * losses[0]


@pytest.mark.parametrize("opt", [SGD(lr=0.1), SGD(lr=0.05, momentum=0.9), Adam(lr=1e-2)], ids=repr)
def test_optimizer_on_flat_shards_equals_whole_parameter_and_never_mutates(opt):
    rng = np.random.default_rng(7)
    param = rng.normal(size=(5, 7))
    state = opt.init_state(param)
    bounds = [0, 9, 10, 24, 35]  # uneven shards of the 35 elements
    shards = [param.reshape(-1)[a:b].copy() for a, b in zip(bounds, bounds[1:])]
    shard_states = [opt.init_state(s) for s in shards]
    for step in range(1, 5):
        grad = rng.normal(size=param.shape)
        copies = (param.copy(), grad.copy(), {k: v.copy() for k, v in state.items()})
        new_param, new_state = opt.update(param, grad, state, step)
        np.testing.assert_array_equal(param, copies[0])
        np.testing.assert_array_equal(grad, copies[1])
        for k in state:
            np.testing.assert_array_equal(state[k], copies[2][k])
        g = grad.reshape(-1)
        out = [opt.update(s, g[a:b], st, step) for s, st, a, b in zip(shards, shard_states, bounds, bounds[1:])]
        shards, shard_states = [o[0] for o in out], [o[1] for o in out]
        np.testing.assert_array_equal(np.concatenate(shards), new_param.reshape(-1))  # bit for bit
        for k in new_state:
            np.testing.assert_array_equal(np.concatenate([s[k] for s in shard_states]), new_state[k].reshape(-1))
        param, state = new_param, new_state


def test_adam_first_step_moves_each_weight_by_about_lr():
    opt = Adam(lr=0.01)
    p = np.zeros(4)
    g = np.array([1e-3, -5.0, 2.0, -1e-2])
    new, _ = opt.update(p, g, opt.init_state(p), 1)
    np.testing.assert_allclose(new, -0.01 * np.sign(g), rtol=1e-4)


def test_split_batch_gradients_with_global_scale_equal_the_full_batch():
    """The data-parallel contract: per-shard sums scaled by 1/global_count add up to the whole."""
    for config in (TINY_GPT, TINY_MLP):
        model = build_model(config)
        params = model.init_params(3)
        x, t = get_batch(config, 6, step=0)
        loss, grads = model.loss_and_grads(params, x, t)
        count = t.size
        halves = [model.loss_and_grads(params, x[i : i + 3], t[i : i + 3], scale=1 / count) for i in (0, 3)]
        assert halves[0][0] + halves[1][0] == pytest.approx(loss, rel=1e-12)
        assert model.forward_loss(params, x, t) == pytest.approx(loss, rel=1e-12)
        for i, layer_grads in enumerate(grads):
            for k, g in layer_grads.items():
                np.testing.assert_allclose(halves[0][1][i][k] + halves[1][1][i][k], g, rtol=1e-9, atol=1e-14)


def test_model_gradient_against_finite_differences():
    model = build_model(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=6))
    params = model.init_params(1)
    x, t = get_batch(model.config, 2, step=1)
    _, grads = model.loss_and_grads(params, x, t)
    rng = np.random.default_rng(0)
    for i, layer in enumerate(params):
        for k, arr in layer.items():
            flat = arr.reshape(-1)
            for j in rng.choice(flat.size, 3, replace=False):
                old = flat[j]
                flat[j] = old + 1e-6
                fp = model.forward_loss(params, x, t)
                flat[j] = old - 1e-6
                fm = model.forward_loss(params, x, t)
                flat[j] = old
                assert grads[i][k].reshape(-1)[j] == pytest.approx((fp - fm) / 2e-6, rel=1e-5, abs=1e-9)


def test_build_is_deterministic_and_configs_are_plain_data():
    m1, m2 = build_model(TINY_GPT), build_model(pickle.loads(pickle.dumps(TINY_GPT)))
    assert m1 == m2 and [lay.name for lay in m1.layers] == ["embedding", "block0", "block1", "head"]
    p1, p2, p3 = m1.init_params(5), m2.init_params(5), m1.init_params(6)
    for a, b in zip(p1, p2):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(p1[1]["w_qkv"], p3[1]["w_qkv"])
    assert config_from_dict(TINY_MLP.to_dict()) == TINY_MLP
    assert [lay.name for lay in build_model(TINY_MLP).layers] == ["linear0", "linear1", "linear2"]
    assert repr(TINY_GPT) == "GPT(L=2, h=16, a=2, s=8, V=16)"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: GPTConfig(2, 10, 3, 8, 16), ["heads 3", "hidden 10"]),
        (lambda: GPTConfig(0, 16, 2, 8, 16), ["layers", "0"]),
        (lambda: GPTConfig(2, 16, 2, -1, 16), ["seq_len", "-1"]),
        (lambda: MLPConfig(4, 8, 2, 3, "tanh"), ["activation", "tanh"]),
        (lambda: MLPConfig(4, 8, 0, 3), ["layers", "0"]),
        (lambda: Adam(lr=1e-3, beta1=1.0), ["beta1", "1.0"]),
        (lambda: SGD(lr=0.0), ["lr", "0"]),
        (lambda: config_from_dict({"kind": "cnn"}), ["kind", "cnn"]),
        (lambda: get_batch(TINY_GPT, 0, 1), ["batch_size", "0"]),
    ],
)
def test_validation_errors_are_one_line_and_name_the_numbers(make, words):
    with pytest.raises(ParasimError) as e:
        make()
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_model_rejects_out_of_range_tokens():
    model = build_model(TINY_GPT)
    x, t = get_batch(TINY_GPT, 2, 0)
    x[0, 0] = 16
    with pytest.raises(ParasimError, match="16"):
        model.forward_loss(model.init_params(0), x, t)


def test_data_is_deterministic_and_learnable_by_construction():
    x1, t1 = get_batch(TINY_GPT, 4, step=3, seed=1)
    x2, t2 = get_batch(TINY_GPT, 4, step=3, seed=1)
    x3, _ = get_batch(TINY_GPT, 4, step=4, seed=1)
    assert np.array_equal(x1, x2) and np.array_equal(t1, t2) and not np.array_equal(x1, x3)
    assert x1.dtype == np.int64 and np.array_equal(x1[:, 1:], t1[:, :-1])  # targets = next token
    stride = (x1[:, 1] - x1[:, 0]) % TINY_GPT.vocab
    np.testing.assert_array_equal((t1 - x1) % TINY_GPT.vocab, np.repeat(stride[:, None], TINY_GPT.seq_len, 1))
    xm, tm = get_batch(TINY_MLP, 5, step=0)
    assert xm.shape == (5, 8) and xm.dtype == np.float64 and tm.shape == (5,)


def test_param_count_formula_against_the_model():
    for L, h, a, s, V in [(2, 16, 2, 8, 16), (3, 12, 3, 5, 11)]:
        model = build_model(GPTConfig(L, h, a, s, V))
        P = gpt_param_count(L, h, s, V)
        assert P == round(12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h)))
        assert model.param_count == P + V * h + 2 * h == gpt_model_param_count(L, h, s, V)


@pytest.mark.parametrize("billions, h, L", [(1.7, 2304, 24), (7.5, 4096, 36), (18.4, 6144, 40), (1008.0, 25600, 128)])
def test_param_formula_reproduces_megatron_table_1(billions, h, L):
    assert round(gpt_param_count(L, h, 2048, 51200) / 1e9, 1) == billions


def test_iteration_flops_formula_against_the_layers():
    model = build_model(TINY_GPT)
    c, B = TINY_GPT, 3
    F72 = gpt_iteration_flops(B, c.seq_len, c.layers, c.hidden, c.vocab)
    assert model.iteration_flops(B) == pytest.approx(F72, rel=1e-12)
    assert model.iteration_flops(B) == pytest.approx(3 * model.forward_flops(B), rel=1e-12)
    blocks_forward = sum(lay.forward_flops(B) for lay in model.layers[1:-1])
    F96 = gpt_iteration_flops(B, c.seq_len, c.layers, c.hidden, c.vocab, recompute=True)
    assert F96 == pytest.approx(F72 + blocks_forward, rel=1e-12)  # recomputation = one more forward
