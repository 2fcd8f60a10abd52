"""Mixture of experts and expert parallelism: the MoE math, routing with capacity, equality with one
device, AllToAll traffic, routing counts, errors, the CLI and one Ray run."""

import json

import numpy as np
import pytest

from simulator.errors import ParasimError
from simulator.models import GPTConfig, build_model, get_batch
from simulator.parallel.config import TrainConfig
from simulator.parallel.experts import MoEBlock, MoEGPTConfig, capacity, route
from simulator.parallel.replicated import make_optimizer
from simulator.training import train


def moe(**kw):
    base = dict(layers=2, hidden=8, heads=2, seq_len=6, vocab=11, experts=4, top_k=1, capacity_factor=1.0)
    return MoEGPTConfig(**{**base, **kw})


@pytest.mark.parametrize("k", [1, 2])
def test_moe_block_gradients_match_finite_differences(k):
    blk = MoEBlock("moe", 8, 2, 6, 4, k, 1.0, 12)
    rng = np.random.default_rng(k)
    p = {n: v + rng.normal(0, 0.3, v.shape) for n, v in blk.init(rng).items()}
    x = rng.normal(size=(3, 6, 8))
    y, cache = blk.forward(p, x)
    assert cache["stats"][-1] > 0  # some assignments are dropped: the test covers that path
    dy = rng.normal(size=y.shape)
    dx, g = blk.backward(p, cache, dy)
    f = lambda pp, xx: float((blk.forward(pp, xx)[0] * dy).sum())
    eps = 1e-6
    for n in p:
        for _ in range(3):
            idx = tuple(rng.integers(0, s) for s in p[n].shape)
            hi, lo = ({m: v.copy() for m, v in p.items()} for _ in range(2))
            hi[n][idx] += eps
            lo[n][idx] -= eps
            assert g[n][idx] == pytest.approx((f(hi, x) - f(lo, x)) / (2 * eps), rel=1e-5, abs=1e-8), n
    for _ in range(6):
        idx = tuple(rng.integers(0, s) for s in x.shape)
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        assert dx[idx] == pytest.approx((f(p, hi) - f(p, lo)) / (2 * eps), rel=1e-5, abs=1e-8)


def test_forward_equals_a_per_token_loop():
    blk = MoEBlock("moe", 8, 2, 6, 4, 2, 0.75, 12)
    rng = np.random.default_rng(3)
    p = {n: v + rng.normal(0, 0.3, v.shape) for n, v in blk.init(rng).items()}
    x = rng.normal(size=(2, 6, 8))
    y, _ = blk.forward(p, x)
    from simulator.models import block_plan as plan
    from simulator.models.functional import gelu_forward

    c = {"x": x}
    plan.forward(blk.steps, p, c)  # the values of the block's steps
    expert, gates, flat = c["choice"].astype(int), c["gates"], c["flat"]

    for b in range(2):
        for t in range(6):
            want = c["x1"][b, t].copy()
            for j in range(2):
                if flat[b, t, j] >= 0:
                    e = expert[b, t, j]
                    hidden = gelu_forward(c["m"][b, t] @ p["w_fc"][e] + p["b_fc"][e])[0]
                    want += gates[b, t, j] * (hidden @ p["w_proj"][e] + p["b_proj"][e])
            np.testing.assert_allclose(y[b, t], want, rtol=1e-12, atol=1e-12)


def test_capacity_drops_later_positions_and_second_choices_fill_after_first():
    # 5 tokens of one sequence; every token's first choice is expert 0, second choice expert 1
    probs = np.tile([0.6, 0.3, 0.1], (1, 5, 1))
    expert, slot, gates = route(probs, top_k=2, cap=2)
    assert expert[0, :, 0].tolist() == [0] * 5 and expert[0, :, 1].tolist() == [1] * 5
    assert slot[0, :, 0].tolist() == [0, 1, -1, -1, -1]  # by position
    assert slot[0, :, 1].tolist() == [0, 1, -1, -1, -1]
    np.testing.assert_allclose(gates.sum(-1), 1.0)
    assert capacity(seq_len=6, experts=4, top_k=2, capacity_factor=1.25) == 4  # ceil(1.25 * 2 * 6 / 4)


@pytest.mark.parametrize("devices,ep,k,mb,experts", [(2, 2, 1, 1, 4), (4, 2, 2, 2, 4), (4, 4, 2, 1, 4),
                                                    (3, 3, 1, 1, 6), (2, 1, 2, 1, 4)])
def test_expert_parallel_equals_single_device(devices, ep, k, mb, experts):
    r = train(TrainConfig(moe(top_k=k, experts=experts), strategy="ep", devices=devices, ep=ep, global_batch=24,
                          microbatches=mb, steps=3))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    np.testing.assert_allclose(r.losses, r.reference_losses, rtol=1e-9)


def test_expert_parallel_with_summed_gradients_and_sgd():
    cfg = TrainConfig(moe(top_k=2), strategy="ep", devices=4, ep=2, global_batch=8, steps=2, optimizer="sgd",
                      gradients_mean=False)
    assert train(cfg).max_rel_weight_diff_vs_single < 1e-9


def test_routing_counts_equal_the_single_device_reference():
    """Distributed routing counts (summed over ranks and steps) equal those of the reference model
    trained on one device with the same data: the same tokens went to the same experts."""
    cfg = TrainConfig(moe(top_k=2), strategy="ep", devices=4, ep=4, global_batch=8, steps=3).resolved()
    r = train(cfg)
    model = build_model(cfg.model)
    params, opt = model.init_params(cfg.seed), make_optimizer(cfg)
    states = [{n: opt.init_state(v) for n, v in p.items()} for p in params]
    totals = {}
    for step in range(cfg.steps):
        x, y = get_batch(cfg.model, cfg.global_batch, step, cfg.seed)
        h = x
        for layer, p in zip(model.layers, params):
            h, cache = layer.forward(p, h)
            if isinstance(layer, MoEBlock):
                totals[layer.name] = totals.get(layer.name, 0) + cache["stats"]
        _, grads = model.loss_and_grads(params, x, y)
        for li, g in enumerate(grads):
            for n in params[li]:
                params[li][n], states[li][n] = opt.update(params[li][n], g[n], states[li][n], step + 1)
    report = r.to_dict()["moe"]
    for name, total in totals.items():
        assert report[name]["tokens_per_expert"] == [int(v) for v in total[:-1]]
        assert report[name]["dropped"] == int(total[-1])
        assert sum(report[name]["tokens_per_expert"]) + report[name]["dropped"] == 3 * 8 * 6 * 2


@pytest.mark.parametrize("ep", [2, 4])
def test_all_to_all_bytes(ep):
    """Per MoE block and micro-batch, four AllToAlls (dispatch, combine, and both backward) of the
    (E, b C, h) buffer; each device sends (ep - 1)/ep of it."""
    cfg = TrainConfig(moe(), strategy="ep", devices=4, ep=ep, global_batch=8, microbatches=2, steps=1).resolved()
    r = train(cfg)
    blk = build_model(cfg.model).layers[1]
    buffer = 8 * blk.experts * cfg.micro_batch_size * blk.capacity * blk.hidden
    want = cfg.model.layers * cfg.m * 4 * cfg.devices * buffer * (ep - 1) // ep
    assert r.trace.bytes_by_collective()["all_to_all"] == want


def test_each_rank_holds_its_share_of_the_experts():
    from simulator.parallel.strategies import compile_strategy

    c = compile_strategy(TrainConfig(moe(experts=4), strategy="ep", devices=4, ep=2, global_batch=8))
    full = build_model(c.config.model).init_params(0)[1]["w_fc"]
    for r in range(4):
        np.testing.assert_array_equal(c.initial[r]["param/1/w_fc"], full[2 * (r % 2):2 * (r % 2) + 2])
        np.testing.assert_array_equal(c.initial[r]["param/1/w_qkv"], build_model(c.config.model).init_params(0)[1]["w_qkv"])


def test_errors_name_the_rule():
    with pytest.raises(ParasimError, match="mixture-of-experts"):
        train(TrainConfig(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=8), strategy="ep", devices=2, ep=2))
    with pytest.raises(ParasimError, match="ep=3 must divide"):
        train(TrainConfig(moe(experts=4), strategy="ep", devices=3, ep=3, global_batch=6))
    with pytest.raises(ParasimError, match="top_k"):
        moe(top_k=3)


def test_moe_config_prints_and_round_trips_its_kind():
    c = moe(top_k=2)
    assert repr(c) == "MoEGPT(L=2, h=8, a=2, s=6, V=11, E=4, k=2, cf=1)"
    assert c.to_dict()["kind"] == "moe-gpt" and c.to_dict()["experts"] == 4


def test_cli_train_ep(capsys):
    from simulator.cli import main

    rc = main(["train", "--model", "moe", "--strategy", "ep", "--devices", "2", "--ep", "2", "--batch", "4",
               "--steps", "1", "--layers", "1", "--hidden", "8", "--heads", "2", "--seq", "4", "--vocab", "8",
               "--experts", "2", "--top-k", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_rel_weight_diff_vs_single"] < 1e-9 and out["ep"] == 2
    assert set(out["moe"]) == {"moe0"} and out["bytes_by_collective"]["all_to_all"] > 0


@pytest.mark.ray
def test_ep_and_zero3_on_ray_equal_one_device_and_the_local_runtime(ray_runtime):
    for cfg in (TrainConfig(moe(layers=1, top_k=2), strategy="ep", devices=8, ep=4, global_batch=8, steps=1),
                TrainConfig(moe(layers=1), strategy="zero3", devices=8, global_batch=8, steps=1)):
        on_ray = train(cfg, runtime=ray_runtime)
        local = train(cfg)
        assert on_ray.max_rel_weight_diff_vs_single < 1e-9
        assert on_ray.losses == local.losses
        assert on_ray.bytes_sent_per_device == local.bytes_sent_per_device
