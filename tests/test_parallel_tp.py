"""Tensor and sequence parallelism (Megatron-LM; Korthikanti et al. 2022): equal to one device,
the collectives Megatron places, vocabulary-parallel kernels, activation memory, refusals, CLI."""

import json

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.models import GPTConfig, MLPConfig, build_model
from simulator.models import functional as K
from simulator.ops import run_kernel
from simulator.parallel.config import TrainConfig
from simulator.parallel.strategies import compile_strategy
from simulator.parallel.tensor_parallel import join_param, shard_param
from simulator.program import Collective
from simulator.training import train

GPT = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=16)  # 4 model layers: emb, 2 blocks, head


def _collectives(program, rank):
    return [ins for ins in program.code[rank] if isinstance(ins, Collective)]


@pytest.mark.parametrize("strategy", ["tp", "sp"])
@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_equals_one_device(strategy, tp):
    r = train(TrainConfig(GPT, strategy=strategy, devices=tp, global_batch=4, steps=3))
    assert r.config.tp == tp and r.config.dp == r.config.pp == 1
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)
    assert r.losses[-1] < r.losses[0]


def test_tp_with_accumulation_and_sgd_equals_one_device():
    r = train(TrainConfig(GPT, strategy="tp", devices=2, global_batch=4, accumulate=2, optimizer="sgd", steps=2))
    assert r.max_rel_weight_diff_vs_single < 1e-9


def test_megatron_collectives_one_allreduce_each_way_per_linear_pair():
    """Per block: attention and MLP each one AllReduce in forward (g) and one in backward (f);
    the embedding one; the vocabulary-parallel loss three (max, target logit, sum-exp: Megatron-LM's
    order, tensor_parallel/cross_entropy.py); the head's
    input gradient one. All over the tensor group."""
    c = compile_strategy(TrainConfig(GPT, strategy="tp", devices=2, global_batch=4).resolved())
    cols = _collectives(c.program, 0)
    assert {ins.kind for ins in cols} == {"all_reduce"}
    assert {ins.group for ins in cols} == {(0, 1)}
    tags = [ins.tag.rsplit("/mb", 1)[0] for ins in cols]
    for li in (1, 2):
        # forward: g after the row-parallel o and proj; backward: f before the column-parallel fc and qkv
        assert [t for t in tags if t.startswith(f"{li}/")] == [f"{li}/o_out", f"{li}/proj_out", f"{li}/fc_in/b",
                                                                f"{li}/qkv_in/b"]
    assert tags.count("0/tok_out") == 1 and tags.count("3/out_in/b") == 1  # embedding g; the head: f before W_out
    assert [t for t in tags if t.startswith("loss/")] == ["loss/max", "loss/target", "loss/sumexp"]
    assert next(ins.op for ins in cols if ins.tag.startswith("loss/max")) == "max"
    assert len(cols) == 4 * 2 + 1 + 3 + 1


def test_sequence_parallel_gathers_and_scatters_instead_of_allreduce():
    c = compile_strategy(TrainConfig(GPT, strategy="sp", devices=2, global_batch=4).resolved())
    cols = _collectives(c.program, 1)
    block = [ins for ins in cols if ins.tag.startswith("1/")]
    # forward: AG(ln1 out) RS(o) AG(ln2 out) RS(p); backward: AG(dy) AG(m again) RS(dm) AG(dx1) AG(a again) RS(da)
    assert [ins.kind for ins in block] == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter",
                                           "all_gather", "all_gather", "reduce_scatter", "all_gather",
                                           "all_gather", "reduce_scatter"]
    assert all(ins.axis == 1 for ins in block)  # along the sequence
    # layer-norm and row-parallel bias gradients are partial sums over the sequence: flattened into ONE
    # AllReduce over the tensor group, after the backward (Megatron-LM's finalize_model_grads ->
    # _allreduce_non_tensor_model_parallel_grads): each block's ln1, b_o, ln2, b_proj and the final norm
    (partial,) = [ins for ins in cols if ins.tag.startswith("sp/")]
    code = c.program.code[1]
    pack = next(ins for ins in reversed(code[:code.index(partial)]) if hasattr(ins, "op"))
    assert pack.op == "flatten"
    blocks = [f"grad/{li}/{n}" for li in (1, 2) for n in ("ln1_g", "ln1_b", "b_o", "ln2_g", "ln2_b", "b_proj")]
    assert list(pack.inputs) == blocks + ["grad/3/ln_g", "grad/3/ln_b"]
    assert (partial.kind, partial.group, partial.nbytes) == ("all_reduce", (0, 1), 8 * (2 * 6 + 2) * GPT.hidden)
    assert cols[-1] is partial


def _peak_act(result):
    peak = [0] * result.config.devices
    for s in result.trace.memory:
        peak[s.device] = max(peak[s.device], s.bytes_by_category.get("act", 0))
    return peak


def test_sequence_parallel_holds_less_activation_memory_than_tp():
    model = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=16)
    kw = dict(devices=4, global_batch=4, steps=1)
    single = _peak_act(train(TrainConfig(model, strategy="single", global_batch=4, steps=1)))[0]
    tp = _peak_act(train(TrainConfig(model, strategy="tp", **kw)))
    sp = _peak_act(train(TrainConfig(model, strategy="sp", **kw)))
    assert max(tp) < single
    assert all(s < t for s, t in zip(sp, tp)), (sp, tp)


def test_shard_join_round_trip_and_qkv_heads():
    block = build_model(GPT).layers[1]
    params = block.init(np.random.default_rng(0))
    for name, full in params.items():
        parts = [shard_param(block, name, full, 4, i) for i in range(4)]
        assert np.array_equal(join_param(block, name, parts), full)
    h, n = GPT.hidden, 2
    w1 = shard_param(block, "w_qkv", params["w_qkv"], n, 1)
    assert w1.shape == (h, 3 * h // n)
    # rank 1 holds q, k and v columns of heads 2 and 3 (each head h/a = 4 wide)
    assert np.array_equal(w1[:, h // n: 2 * h // n], params["w_qkv"][:, h + h // n: 2 * h])


def test_vocab_parallel_cross_entropy_kernels_match_the_full_softmax():
    """The local max / sum-exp / target-logit reductions (done here by hand, as the AllReduces
    would) reproduce cross_entropy_forward and its gradient on every slice."""
    rng = np.random.default_rng(1)
    logits, targets, n = rng.normal(size=(2, 5, 12)) * 3, rng.integers(0, 12, size=(2, 5)), 3
    parts = np.split(logits, n, axis=-1)
    zmax = np.max([run_kernel("vp_ce_max", [p], {})[0] for p in parts], axis=0)
    stats = [run_kernel("vp_ce_stats", [p, zmax, targets], {"start": 4 * i}) for i, p in enumerate(parts)]
    sumexp, zt = sum(s[0] for s in stats), sum(s[1] for s in stats)
    ref_loss, _, ref_cache = K.cross_entropy_forward(logits, targets)
    ref_grad = K.cross_entropy_backward(ref_cache, 0.1)
    for i, p in enumerate(parts):
        loss, cache = run_kernel("vp_ce_loss", [p, zmax, sumexp, zt, targets], {"start": 4 * i})
        assert float(loss) == pytest.approx(ref_loss, rel=1e-12)
        (g,) = run_kernel("vp_ce_bwd", [cache], {"scale": 0.1})
        np.testing.assert_allclose(g, ref_grad[..., 4 * i: 4 * i + 4], rtol=1e-12, atol=1e-15)


def test_vocab_parallel_embedding_lookup_sums_to_the_full_table():
    rng = np.random.default_rng(2)
    wte, tokens = rng.normal(size=(8, 3)), rng.integers(0, 8, size=(2, 5))
    from simulator.models import block_plan as plan
    from simulator.parallel.block_lane import tensor_parallel

    parts = []
    for i in range(2):  # tensor rank i's embedding steps: its rows, then the AllReduce (a Comm)
        tok = tensor_parallel(plan.embedding(8, 5, 3), 2, False, i)[0]
        assert tok.params == (("wte", (4, 3)),)
        values = {"x": tokens}
        plan.forward((tok,), {"wte": wte[4 * i: 4 * i + 4]}, values)
        parts.append(values["e"])
    np.testing.assert_array_equal(parts[0] + parts[1], wte[tokens])


@pytest.mark.parametrize("kw,words", [
    (dict(model=GPTConfig(layers=1, hidden=12, heads=6, seq_len=8, vocab=16), tp=4), ["heads 6", "hidden 12"]),
    (dict(model=GPTConfig(layers=1, hidden=16, heads=4, seq_len=8, vocab=18), tp=4), ["vocabulary 18"]),
    (dict(model=GPTConfig(layers=1, hidden=16, heads=4, seq_len=6, vocab=16), tp=4, strategy="sp"),
     ["sequence length 6"]),
    (dict(model=MLPConfig(in_dim=8, hidden=16, layers=2, classes=4), tp=2), ["transformer layers"]),
])
def test_refuses_degrees_that_do_not_divide(kw, words):
    kw = dict(kw)
    model, tp = kw.pop("model"), kw.pop("tp")
    strategy = kw.pop("strategy", "tp")
    cfg = TrainConfig(model, strategy=strategy, devices=tp * kw.get("pp", 1), tp=tp, global_batch=4, **kw)
    with pytest.raises(ParasimError) as e:
        compile_strategy(cfg.resolved())
    assert all(w in str(e.value) for w in words), str(e.value)


def test_cli_train_tp(capsys):
    code = main(["train", "--strategy", "tp", "--tp", "2", "--devices", "2", "--layers", "2", "--hidden", "16",
                 "--heads", "4", "--seq", "8", "--vocab", "16", "--batch", "4", "--steps", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["tp"] == 2 and out["max_rel_weight_diff_vs_single"] < 1e-9
    assert out["bytes_by_collective"]["all_reduce"] > 0


def test_cli_refuses_bad_tp(capsys):
    code = main(["train", "--strategy", "sp", "--devices", "3", "--layers", "1", "--hidden", "16",
                 "--heads", "4", "--seq", "8", "--vocab", "16", "--batch", "4", "--steps", "1"])
    assert code == 2 and "tensor-parallel degree 3" in capsys.readouterr().err


def test_mixture_of_experts_models_run_tensor_parallel_but_not_sequence_parallel():
    from simulator import MoEGPTConfig
    moe = MoEGPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8, experts=2)
    for strategy, kw in (("tp", {}), ("hybrid", {"dp": 2, "tp": 2})):  # experts whole on every tensor rank
        r = train(TrainConfig(moe, strategy=strategy, devices=4 if kw else 2, global_batch=4, steps=2, **kw))
        assert r.config.tp == 2 and r.max_rel_weight_diff_vs_single < 1e-9
    with pytest.raises(ParasimError, match="runs tensor parallel with --strategy hybrid"):
        train(TrainConfig(moe, strategy="sp", devices=2, global_batch=4))
