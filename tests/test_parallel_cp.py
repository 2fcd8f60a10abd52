"""Context parallelism (ring attention and all-to-all) trains exactly like one device."""

import numpy as np
import pytest

from simulator import GPTConfig, TrainConfig, train
from simulator.errors import ParasimError
from simulator.models.attention import attention_forward
from simulator.parallel.cp_kernels import ring_attn_finish, ring_attn_fwd_step
from simulator.parallel.cp_split import attention_bytes_per_step, block_activation_bytes, chunk_positions
from simulator.vocabulary import VALUE_ALIASES

GPT = GPTConfig(layers=2, hidden=16, heads=4, seq_len=16, vocab=32)

COMM = VALUE_ALIASES["cp_comm_type"]   # the tests' ring / all-to-all as the vocabulary's p2p / a2a


def _act_peak(result) -> int:
    return max(s.bytes_by_category.get("act", 0) for s in result.trace.memory)


@pytest.mark.parametrize("kind", ["ring", "all-to-all"])
@pytest.mark.parametrize("kw", [dict(devices=4, cp=4), dict(devices=4, cp=2, dp=2),
                                dict(devices=4, cp=2, pp=2, microbatches=2), dict(devices=3, cp=1, dp=3, global_batch=6)])
def test_context_parallel_equals_one_device(kind, kw):
    cfg = TrainConfig(GPT, strategy="cp", cp_comm_type=COMM[kind], **{"global_batch": 4, "steps": 2, **kw})
    r = train(cfg)
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert np.allclose(r.losses, r.reference_losses, rtol=1e-12)


def test_gradients_summed_not_averaged_also_match():
    r = train(TrainConfig(GPT, strategy="cp", devices=4, cp=2, dp=2, global_batch=4, steps=2, gradients_mean=False))
    assert r.max_rel_weight_diff_vs_single < 1e-9


def test_load_balanced_chunks_give_every_rank_the_same_causal_work():
    pos = chunk_positions(16, 4, "ring")
    assert pos[0] == (0, 1, 14, 15) and pos[3] == (6, 7, 8, 9)
    assert sorted(p for ps in pos for p in ps) == list(range(16))
    work = [sum(1 for q in ps for k in range(16) if k <= q) for ps in pos]  # unmasked (query, key) pairs
    assert len(set(work)) == 1
    contiguous = [sum(1 for q in range(i * 4, i * 4 + 4) for k in range(16) if k <= q) for i in range(4)]
    assert contiguous[-1] > 3 * contiguous[0]  # what the balanced split avoids
    assert chunk_positions(8, 2, "all-to-all") == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_online_softmax_over_blocks_equals_softmax_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 8, 8)) for _ in range(3))
    want, _ = attention_forward(q, k, v, 2, causal=True)
    pos = chunk_positions(8, 2, "ring")
    for rank, mine in enumerate(pos):
        state = ()
        for owner in (rank, 1 - rank):  # the ring order: own block first
            kv = np.stack([k[:, list(pos[owner])], v[:, list(pos[owner])]])
            state = ring_attn_fwd_step(q[:, list(mine)], kv, *state, heads=2, q_pos=mine, k_pos=pos[owner])
        out, _ = ring_attn_finish(state[0])
        assert np.allclose(out, want[:, list(mine)], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind,kinds", [("ring", {"send"}), ("all-to-all", {"all_to_all"})])
def test_bytes_per_step_match_the_formula(kind, kinds):
    cp, m = 4, 2
    r = train(TrainConfig(GPT, strategy="cp", devices=cp, cp=cp, cp_comm_type=COMM[kind], global_batch=4, microbatches=m, steps=1))
    got = {k: v for k, v in r.trace.bytes_by_collective().items() if k != "all_reduce"}
    assert set(got) == kinds
    per_rank = attention_bytes_per_step(GPT, GPT.layers, 4 // m, m, cp, kind)
    assert sum(got.values()) == cp * per_rank
    if kind == "ring":  # each rank sends cp-1 K/V blocks per attention forward
        from simulator.program import Send
        fwd = [i for i in r.compiled.program.code[0] if isinstance(i, Send) and "/kv" in i.tag]
        assert len(fwd) == GPT.layers * m * (cp - 1)
        assert {i.nbytes for i in fwd} == {2 * (4 // m) * (GPT.seq_len // cp) * GPT.hidden * 8}


@pytest.mark.parametrize("kind", ["ring", "all-to-all"])
def test_activation_memory_shrinks_as_one_over_cp(kind):
    peaks = {cp: _act_peak(train(TrainConfig(GPT, strategy="cp", devices=cp, cp=cp, cp_comm_type=COMM[kind], global_batch=4)))
             for cp in (1, 2, 4)}
    formula = {cp: GPT.layers * block_activation_bytes(GPT, 4, cp, kind) for cp in peaks}
    for cp in (2, 4):
        assert peaks[1] / peaks[cp] == pytest.approx(cp, rel=0.02)
        assert peaks[cp] >= formula[cp]
        # beside the formula: what the blocks' formula leaves out (embedding, LM head, loss) shrinks as 1/cp too
        assert (peaks[cp] - formula[cp]) * cp == peaks[1] - formula[1]


@pytest.mark.parametrize("kw,message", [
    (dict(cp=3, devices=3), "sequence length 16 is not divisible by 6"),
    (dict(cp=8, devices=8, cp_comm_type="a2a"), "4 heads cannot be split 8 ways"),
    (dict(cp=2, devices=2, strategy="dp"), "runs with strategies cp and hybrid"),
    (dict(cp=2, devices=3), "do not multiply to 3 devices"),
])
def test_bad_combinations_are_refused_in_one_line(kw, message):
    with pytest.raises(ParasimError, match=message) as e:
        train(TrainConfig(GPT, **{"strategy": "cp", "global_batch": 4, **kw}))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["ring", "all-to-all"])
@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "dualpipe"])
def test_zero_bubble_schedules_split_the_context_parallel_backward(kind, schedule):
    """B (input gradients, with the ring's K/V and dK/dV hops or Ulysses' all-to-alls) runs at once;
    W (the weight gradients of the projections, MLP, layer norms and embedding) is deferred."""
    cfg = TrainConfig(GPT, strategy="cp", devices=4, cp=2, pp=2, cp_comm_type=COMM[kind], schedule=schedule, global_batch=4,
                      microbatches=4, steps=2)
    r = train(cfg)
    assert r.max_rel_weight_diff_vs_single < 1e-9
    weight = [i for i in r.compiled.program.code[0] if getattr(i, "phase", None) == "wgrad"]
    assert {i.op for i in weight} >= {"block_bwd_weight", "cp_qkv_bwd_weight", "cp_o_bwd_weight"}
    def deferred(code):  # some micro-batch's W runs after a later micro-batch's B
        at = {(i.op, i.microbatch): n for n, i in enumerate(code) if getattr(i, "op", "").startswith("block_bwd_")}
        return any(at[("block_bwd_weight", j)] > at[("block_bwd_input", k)] for j in range(cfg.m)
                   for k in range(cfg.m) if k != j and ("block_bwd_weight", j) in at and ("block_bwd_input", k) in at)

    assert any(deferred(code) for code in r.compiled.program.code) or schedule == "dualpipe"  # p = 2: W follows B


@pytest.mark.ray
@pytest.mark.parametrize("kind", ["ring", "all-to-all"])
def test_context_parallel_on_ray_equals_one_device_and_the_local_runtime(ray_runtime, kind):
    cfg = TrainConfig(GPT, strategy="cp", devices=8, cp=4, dp=2, cp_comm_type=COMM[kind], global_batch=4, steps=2)
    on_ray = train(cfg, runtime=ray_runtime)
    assert on_ray.max_rel_weight_diff_vs_single < 1e-9
    assert on_ray.losses == train(cfg).losses


def test_megatron_rank_order_tensor_fastest_then_context_then_data_then_pipeline():
    from simulator import DeviceMesh
    mesh = DeviceMesh.megatron(tp=2, cp=2, dp=2, pp=2)
    assert repr(mesh) == "Mesh(pp=2, dp=2, ep=1, cp=2, tp=2)"
    assert mesh.groups("tp")[:2] == [(0, 1), (2, 3)]
    assert mesh.groups("cp")[:2] == [(0, 2), (1, 3)]
    assert mesh.groups("dp")[:2] == [(0, 4), (1, 5)]
    assert mesh.groups("pp")[0] == (0, 8)


@pytest.mark.parametrize("kind", ["ring", "all-to-all"])
@pytest.mark.parametrize("kw", [dict(devices=4, cp=2, tp=2), dict(devices=16, dp=2, cp=2, tp=2, pp=2, microbatches=2)])
def test_hybrid_with_context_axis_equals_one_device(kind, kw):
    g = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=16)
    r = train(TrainConfig(g, strategy="hybrid", cp_comm_type=COMM[kind], global_batch=4, steps=2, **kw))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.compiled.mesh.axes == {"pp": kw.get("pp", 1), "dp": kw.get("dp", 1), "ep": 1, "cp": 2, "tp": 2}
    kinds = set(r.trace.bytes_by_collective())
    assert ("send" if kind == "ring" else "all_to_all") in kinds and "all_reduce" in kinds


def test_hybrid_refuses_expert_parallelism_of_a_dense_model_and_indivisible_heads_in_one_line():
    with pytest.raises(ParasimError, match="spreads the experts of a mixture-of-experts model; GPT.* has none") as e:
        TrainConfig(GPT, strategy="hybrid", devices=4, ep=2, cp=2).resolved()
    assert "\n" not in str(e.value)
    with pytest.raises(ParasimError, match="4 heads cannot be split tp x cp = 4 x 2 = 8 ways"):
        TrainConfig(GPT, strategy="hybrid", devices=8, cp=2, tp=4, cp_comm_type="a2a").resolved()


def test_cli_trains_context_parallel_and_hybrid_with_dualpipe(capsys):
    import json

    from simulator.cli import main

    assert main(["train", "--strategy", "cp", "--devices", "4", "--cp", "4", "--cp-kind", "all-to-all", "--steps", "1",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # the JSON speaks the vocabulary (Megatron's --cp-comm-type a2a); the older --cp-kind all-to-all is mapped
    assert d["cp"] == 4 and d["cp_comm_type"] == "a2a" and d["max_rel_weight_diff_vs_single"] < 1e-9
    assert {"peak_memory_bytes_per_device", "bytes_by_collective", "bubble_fraction"} <= set(d)
    assert main(["train", "--strategy", "hybrid", "--devices", "8", "--dp", "1", "--cp", "2", "--tp", "2", "--pp", "2",
                 "--ep", "1", "--schedule", "dualpipe", "--microbatches", "4", "--steps", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"] == "dualpipe" and d["max_rel_weight_diff_vs_single"] < 1e-9
    assert main(["train", "--strategy", "cp", "--devices", "3", "--cp", "3", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not divisible by 6" in err


@pytest.mark.ray
def test_hybrid_context_tensor_pipeline_dualpipe_on_ray_equals_one_device(ray_runtime):
    g = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=16)
    cfg = TrainConfig(g, strategy="hybrid", devices=8, cp=2, tp=2, pp=2, microbatches=4, schedule="dualpipe",
                      global_batch=4, steps=1)
    on_ray = train(cfg, runtime=ray_runtime)
    assert on_ray.max_rel_weight_diff_vs_single < 1e-9
    assert on_ray.losses == train(cfg).losses
