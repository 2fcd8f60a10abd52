"""Zero-bubble schedules (ZB-H1, ZB-H2, DualPipe) with tensor, sequence, context and expert
parallelism: the Megatron layers' and MoE blocks' backward split into B (input gradients with their
TP collectives, ring hops and AllToAlls) and W (weight gradients, no communication), trained equal
to one device and priced on the event clock."""

import json

import pytest

from simulator import GPTConfig, TrainConfig, train
from simulator.parallel.experts import MoEGPTConfig
from simulator.program import Collective, Compute

GPT = GPTConfig(layers=4, hidden=16, heads=4, seq_len=8, vocab=16)

LAYERS = {"block_bwd_weight"}  # block_bwd: the segments of the blocks' and the LM head's steps
TP_ATTN = set()  # the embedding is its steps too: its W is a block_bwd_weight
CP_ATTN = {"cp_o_bwd_weight", "cp_qkv_bwd_weight"}
CASES = [  # (strategy, degrees, schedule)
    *(("hybrid", dict(devices=4, tp=2, pp=2), s) for s in ("zb-h1", "zb-h2", "dualpipe")),
    ("sp", dict(devices=4, tp=2, pp=2), "zb-h1"),
    ("sp", dict(devices=4, tp=2, pp=2), "dualpipe"),
    *(("hybrid", dict(devices=8, tp=2, cp=2, pp=2), s) for s in ("zb-h1", "zb-h2", "dualpipe")),
    ("hybrid", dict(devices=8, tp=2, cp=2, pp=2, cp_comm_type="a2a"), "zb-h2"),
    ("hybrid", dict(devices=8, tp=2, cp=2, pp=2, cp_comm_type="a2a"), "dualpipe"),
    ("hybrid", dict(devices=16, dp=2, tp=2, cp=2, pp=2), "zb-h1"),
]


def _run(strategy, schedule, steps=2, **kw):
    return train(TrainConfig(GPT, strategy=strategy, schedule=schedule, global_batch=8,
                             microbatches=4 if kw.get("dp", 1) == 1 else 2 * kw["pp"], steps=steps, **kw))


@pytest.mark.parametrize("strategy,kw,schedule", CASES,
                         ids=[f"{s}-" + "-".join(f"{k}{v}" for k, v in kw.items()) + f"-{z}" for s, kw, z in CASES])
def test_split_backward_with_tensor_parallelism_equals_one_device(strategy, kw, schedule):
    r = _run(strategy, schedule, **kw)
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)
    code = r.compiled.program.code
    weight = [{i.op for i in c if isinstance(i, Compute) and i.phase == "wgrad"} for c in code]
    assert all(weight)  # every rank runs W
    expected = LAYERS | (CP_ATTN if kw.get("cp", 1) > 1 else TP_ATTN)
    if schedule == "dualpipe":  # its steps 4-5 run some backwards whole (BW), the others split
        assert {"block_bwd_weight"} <= set().union(*weight) <= expected
        return
    assert set().union(*weight) == expected
    whole = {"block_bwd", "cp_qkv_bwd", "cp_o_bwd"}
    assert not any(isinstance(i, Compute) and i.op in whole for c in code for i in c)


def test_w_is_deferred_past_a_later_micro_batchs_b_and_moves_no_bytes():
    """ZB-H1 on p = 2: the last stage runs W of micro-batch j after the B of j + 1, and the step sends
    exactly the bytes 1F1B sends (the split moves computation, not communication)."""
    kw = dict(devices=4, tp=2, pp=2)
    zb, base = _run("hybrid", "zb-h1", steps=1, **kw), _run("hybrid", "1f1b", steps=1, **kw)
    code = zb.compiled.program.code[2]  # stage 1 (ranks 2, 3) runs B1 before W0
    at = {(i.op, i.microbatch): n for n, i in enumerate(code) if isinstance(i, Compute) and i.op.startswith("block_bwd")}
    assert any(at[("block_bwd_weight", j)] > at[("block_bwd_input", j + 1)] for j in range(3))
    # W holds no collective: the collectives between a micro-batch's first and last W are none
    for j in range(4):
        w = [n for n, i in enumerate(code) if isinstance(i, Compute) and i.phase == "wgrad" and i.microbatch == j]
        between = code[w[0]:w[-1] + 1]
        assert not any(isinstance(i, Collective) for i in between)
    assert zb.trace.bytes_by_collective() == base.trace.bytes_by_collective()
    assert zb.bytes_sent_per_device == base.bytes_sent_per_device
    assert zb.trace.bubble_fraction() < base.trace.bubble_fraction()  # on the cost model's clock


def _grad_allreduce_bytes(r) -> int:
    """The gradient AllReduces of a run, by the ring formula: each group of N ranks holding S bytes
    sends 2 (N - 1) S in all (ranks' shares 2 (N-1)/N S)."""
    total = 0
    for code in r.compiled.program.code:
        for i in code:
            if isinstance(i, Collective) and i.kind == "all_reduce" and i.tensor.startswith("grad/"):
                total += 2 * (len(i.group) - 1) * i.nbytes // len(i.group)
    return total


def test_cli_prices_dualpipe_with_context_and_tensor_parallelism(capsys):
    """`parasim train --strategy hybrid --dp 1 --cp 2 --tp 2 --pp 2 --schedule dualpipe` (devices
    derived: 8): the same activation collectives as 1F1B; the gradient AllReduce runs over the
    context ranks and DualPipe's mirror copies (4 ranks) instead of the context ranks (2)."""
    from simulator.cli import main

    args = ["train", "--strategy", "hybrid", "--dp", "1", "--cp", "2", "--tp", "2", "--pp", "2",
            "--layers", "2", "--microbatches", "4", "--steps", "1", "--json"]
    assert main([*args, "--schedule", "dualpipe"]) == 0
    dual = json.loads(capsys.readouterr().out)
    assert main([*args, "--schedule", "1f1b"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert dual["devices"] == 8 and dual["schedule"] == "dualpipe" and dual["max_rel_weight_diff_vs_single"] < 1e-9
    assert {k: v for k, v in dual["bytes_by_collective"].items() if k != "all_reduce"} == \
           {k: v for k, v in base["bytes_by_collective"].items() if k != "all_reduce"}
    cfg = dict(strategy="hybrid", devices=8, dp=1, cp=2, tp=2, pp=2, microbatches=4, global_batch=8, steps=1)
    g = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32)  # the CLI's defaults
    runs = {s: train(TrainConfig(g, schedule=s, **cfg)) for s in ("dualpipe", "1f1b")}
    assert {s: r.trace.bytes_by_collective() for s, r in runs.items()} == \
           {"dualpipe": dual["bytes_by_collective"], "1f1b": base["bytes_by_collective"]}
    extra = _grad_allreduce_bytes(runs["dualpipe"]) - _grad_allreduce_bytes(runs["1f1b"])
    assert extra > 0 and dual["bytes_by_collective"]["all_reduce"] - base["bytes_by_collective"]["all_reduce"] == extra
    assert dual["bubble_fraction"] < base["bubble_fraction"]


MOE = MoEGPTConfig(layers=2, hidden=8, heads=4, seq_len=8, vocab=16, experts=4, top_k=2, capacity_factor=1.0)
MOE_CASES = [  # (degrees, schedule, the attention half's W kernels)
    (dict(devices=4, pp=2, dp=2, ep=2), "zb-h1", {"block_bwd_weight"}),
    (dict(devices=4, pp=2, tp=2), "zb-h2", {"block_bwd_weight"}),
    (dict(devices=4, pp=2, cp=2, ep=2), "zb-h1", {"block_bwd_weight", "cp_qkv_bwd_weight", "cp_o_bwd_weight"}),
    (dict(devices=8, pp=2, cp=2, tp=2, ep=2), "dualpipe", {"cp_o_bwd_weight", "cp_qkv_bwd_weight"}),
    (dict(devices=16, dp=2, pp=2, cp=2, tp=2, ep=4), "zb-h1", {"cp_o_bwd_weight", "cp_qkv_bwd_weight"}),
]


@pytest.mark.parametrize("kw,schedule,attention", MOE_CASES,
                         ids=["-".join(f"{k}{v}" for k, v in c[0].items()) + f"-{c[1]}" for c in MOE_CASES])
def test_split_backward_of_moe_blocks_on_every_lane_equals_one_device(kw, schedule, attention):
    """B runs the combine, the expert and router input gradients with the AllToAlls between them;
    W the expert, router and attention-half weight gradients (compute only)."""
    r = train(TrainConfig(MOE, strategy="hybrid", schedule=schedule, global_batch=8, microbatches=4, steps=2, **kw))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert sum(layer["dropped"] for layer in r.to_dict()["moe"].values()) > 0  # capacity is exercised
    weight = {i.op for c in r.compiled.program.code for i in c if isinstance(i, Compute) and i.phase == "wgrad"}
    experts = {i.label.split()[-1] for c in r.compiled.program.code for i in c
               if isinstance(i, Compute) and i.phase == "wgrad" and i.op == "block_bwd_weight"}
    assert {"block_bwd_weight"} | attention <= weight and {"experts", "router"} <= {s for e in experts for s in e.split("+")}


@pytest.mark.ray
def test_split_backward_with_tensor_and_context_parallelism_on_ray(ray_runtime):
    cfg = TrainConfig(GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=16), strategy="hybrid", devices=8,
                      cp=2, tp=2, pp=2, microbatches=4, schedule="zb-h1", global_batch=4, steps=2)
    on_ray = train(cfg, runtime=ray_runtime)
    assert on_ray.max_rel_weight_diff_vs_single < 1e-9
    local = train(cfg)
    assert on_ray.losses == local.losses and on_ray.bytes_sent_per_device == local.bytes_sent_per_device
