"""The 5-D mesh: dp x cp x tp x pp with expert parallelism carved from dp x cp (Megatron-LM's MoE
parallel folding), trained for real and equal to one device; its groups, bytes and refusals."""

import json

import pytest

from simulator.errors import ParasimError
from simulator.mesh import DeviceMesh
from simulator.models import GPTConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.cp_split import attention_bytes_per_step
from simulator.parallel.expert_parallel import expert_bytes_per_step
from simulator.parallel.experts import MoEGPTConfig
from simulator.parallel.hybrid import axis_groups
from simulator.program import Collective
from simulator.training import train
from simulator.vocabulary import VALUE_ALIASES

# capacity C = ceil(1.0 x 2 x 8 / 4) = 4 slots per sequence and expert: some tokens are dropped
MOE = MoEGPTConfig(layers=2, hidden=8, heads=4, seq_len=8, vocab=16, experts=4, top_k=2, capacity_factor=1.0)

CASES = [  # (devices, dp, cp, tp, pp, ep, extra)
    (8, 8, 1, 1, 1, 4, {}),
    (8, 2, 1, 2, 2, 2, {"microbatches": 2}),
    (8, 2, 2, 2, 1, 2, {}),
    (8, 1, 4, 2, 1, 4, {}),
    (8, 2, 2, 1, 2, 4, {"microbatches": 2, "schedule": "gpipe"}),
    (8, 1, 2, 2, 2, 2, {"microbatches": 4, "schedule": "dualpipe"}),
    (8, 4, 1, 1, 2, 4, {"microbatches": 2, "schedule": "interleaved", "virtual_stages": 2}),
    (16, 2, 2, 2, 2, 4, {"microbatches": 2}),
    (16, 4, 2, 2, 1, 8, {"cp_comm_type": "a2a"}),
    (12, 3, 2, 2, 1, 3, {"global_batch": 6}),  # not a power of two: ep = 3 of dp x cp = 6
]

COMM = VALUE_ALIASES["cp_comm_type"]   # the tests' ring / all-to-all as the vocabulary's p2p / a2a


@pytest.mark.parametrize("devices,dp,cp,tp,pp,ep,extra", CASES,
                         ids=[f"{c[0]}dev-dp{c[1]}-cp{c[2]}-tp{c[3]}-pp{c[4]}-ep{c[5]}" for c in CASES])
def test_every_5d_combination_equals_one_device(devices, dp, cp, tp, pp, ep, extra):
    model = MoEGPTConfig(**{**MOE.__dict__, "experts": 6 if ep == 3 else max(4, ep)})
    kw = {"global_batch": 8, **extra}
    r = train(TrainConfig(model, strategy="hybrid", devices=devices, dp=dp, cp=cp, tp=tp, pp=pp, ep=ep, steps=2, **kw))
    assert (r.config.dp, r.config.cp, r.config.tp, r.config.pp, r.config.ep) == (dp, cp, tp, pp, ep)
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)
    assert sum(layer["dropped"] for layer in r.to_dict()["moe"].values()) > 0  # capacity is exercised


def test_routing_counts_under_context_parallelism_equal_one_device():
    """Each cp rank holds part of every sequence; the AllGathered expert choices let it number the
    capacity slots as one device does, so the same tokens are kept and dropped."""
    kw = dict(strategy="hybrid", global_batch=4, steps=1)
    split = train(TrainConfig(MOE, devices=4, dp=1, cp=4, ep=2, **kw)).to_dict()["moe"]
    whole = train(TrainConfig(MOE, devices=2, dp=2, ep=2, **kw)).to_dict()["moe"]
    assert split == whole and split["moe0"]["dropped"] > 0


def test_expert_groups_carved_from_data_x_context_in_megatron_order():
    cfg = TrainConfig(MOE, strategy="hybrid", devices=8, dp=2, cp=2, tp=2, ep=2)
    g = axis_groups(cfg)
    assert g["cp"] == [(0, 2), (1, 3), (4, 6), (5, 7)] and g["dp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert g["ep"] == [(0, 2), (1, 3), (4, 6), (5, 7)] and g["edp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert repr(DeviceMesh.megatron_experts(tp=2, cp=2, ep=4, dp=2)) == "Mesh(pp=1, edp=1, ep=4, tp=2)"
    r = train(TrainConfig(MOE, strategy="hybrid", devices=8, dp=2, cp=2, tp=2, ep=2, global_batch=4, steps=1))
    code = r.compiled.program.code
    a2a = {i.group for c in code for i in c if isinstance(i, Collective) and "/ep_" in i.tag}  # block_lane.expert_parallel
    assert a2a == set(g["ep"])
    # the gradient buckets (grad_sync.GradSync): the experts' part of each over its expert-data group
    buckets = [i for c in code for i in c if isinstance(i, Collective) and i.tag.startswith("grad/bucket")]
    expert = {i.group for i in buckets if "/experts" in i.tag}
    dense = {i.group for i in buckets if "/experts" not in i.tag}
    assert expert == set(g["edp"]) and dense == {(0, 2, 4, 6), (1, 3, 5, 7)}
    for r_ in range(8):  # each rank holds E/ep = 2 experts
        assert r.compiled.initial[r_]["param/1/w_fc"].shape == (2, 8, 32)


@pytest.mark.parametrize("dp,cp,ep,kind", [(4, 1, 4, "ring"), (2, 2, 2, "ring"), (1, 4, 2, "all-to-all")])
def test_bytes_per_step_match_the_formula(dp, cp, ep, kind):
    cfg = TrainConfig(MOE, strategy="hybrid", devices=dp * cp, dp=dp, cp=cp, ep=ep, cp_comm_type=COMM[kind], global_batch=4,
                      microbatches=1, steps=1).resolved()
    got = train(cfg).trace.bytes_by_collective()
    want = expert_bytes_per_step(MOE, cfg.micro_batch_size, cfg.m, ep, cp)
    ulysses = attention_bytes_per_step(MOE, MOE.layers, cfg.micro_batch_size, cfg.m, cp, kind) if kind != "ring" else 0
    assert got["all_to_all"] == cfg.devices * (want["all_to_all"] + ulysses)
    assert got.get("all_gather", 0) == cfg.devices * want.get("all_gather", 0)
    if kind == "ring" and cp > 1:
        assert got["send"] == cfg.devices * attention_bytes_per_step(MOE, MOE.layers, cfg.micro_batch_size, cfg.m, cp)
    per_token = want["all_to_all"] / (MOE.layers * cfg.m * cfg.micro_batch_size * MOE.seq_len / cp)
    assert per_token == pytest.approx(32 * 1.0 * 2 * MOE.hidden * (ep - 1) / ep * cp)  # 32 cf k h (ep-1)/ep x cp


@pytest.mark.parametrize("kw,message", [
    (dict(devices=4, dp=4, ep=3), "ep=3 must divide the experts \\(4\\)"),
    (dict(devices=4, dp=2, tp=2, ep=4), r"etp x ep = 2 x 4 = 8 to divide the tp x cp x dp = 2 x 1 x 2 = 4 ranks .* ep must divide dp x cp = 2"),
    (dict(devices=4, dp=2, pp=2, ep=2, zero_stage=2, microbatches=2), "DeepSpeed refuses ZeRO-2/3 with pipeline"),
    (dict(devices=4, dp=4, ep=2, bucket_mb=1.0), "drop --bucket-mb"),
    (dict(devices=3, dp=1, pp=3, ep=1, microbatches=6, schedule="dualpipe"), "even number of stages; got 3"),
    (dict(devices=4, dp=1, cp=4, ep=1, cp_comm_type="a2a", model=MoEGPTConfig(**{**MOE.__dict__, "heads": 2})),
     "2 heads cannot be split 4 ways"),
    (dict(devices=4, dp=1, cp=4, model=MoEGPTConfig(**{**MOE.__dict__, "seq_len": 12})),
     "sequence length 12 is not divisible by 8"),
    (dict(devices=2, dp=2, ep=2, model=GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=8)), "has none"),
    (dict(devices=2, dp=2, ep=2, strategy="dp"), "shards experts with strategies ep and hybrid, not dp"),
])
def test_bad_combinations_are_refused_in_one_line(kw, message):
    kw = {"strategy": "hybrid", "global_batch": 12, "model": MOE, **kw}
    with pytest.raises(ParasimError, match=message) as e:
        TrainConfig(kw.pop("model"), **kw).resolved()
    assert "\n" not in str(e.value)


def _cli(*args) -> list[str]:
    return ["train", "--model", "moe", "--strategy", "hybrid", "--layers", "1", "--hidden", "8", "--heads", "4",
            "--seq", "8", "--vocab", "16", "--experts", "4", "--top-k", "2", "--batch", "4", "--steps", "1", "--json",
            *args]


def test_cli_trains_the_5d_mesh_and_reports_the_json_fields(capsys):
    from simulator.cli import main

    assert main(_cli("--devices", "8", "--dp", "2", "--cp", "2", "--tp", "2", "--pp", "1", "--ep", "2")) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["dp"], d["cp"], d["tp"], d["pp"], d["ep"]) == (2, 2, 2, 1, 2)
    assert d["max_rel_weight_diff_vs_single"] < 1e-9
    assert len(d["peak_memory_bytes_per_device"]) == 8 and d["bubble_fraction"] >= 0
    assert {"all_to_all", "all_gather", "all_reduce", "send"} <= set(d["bytes_by_collective"])
    assert main(_cli("--devices", "4", "--dp", "2", "--tp", "2", "--ep", "4")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "etp x ep = 2 x 4 = 8 to divide the tp x cp x dp = 2 x 1 x 2 = 4 ranks" in err


@pytest.mark.ray
def test_5d_mesh_on_ray_equals_one_device_and_the_local_runtime(ray_runtime):
    cfg = TrainConfig(MoEGPTConfig(**{**MOE.__dict__, "layers": 1}), strategy="hybrid", devices=8, dp=2, cp=2, tp=2,
                      ep=2, global_batch=4, steps=1)
    on_ray = train(cfg, runtime=ray_runtime)
    assert on_ray.max_rel_weight_diff_vs_single < 1e-9
    local = train(cfg)
    assert on_ray.losses == local.losses and on_ray.bytes_sent_per_device == local.bytes_sent_per_device


@pytest.mark.parametrize("args,message", [
    (["--devices", "4", "--dp", "1", "--cp", "4", "--seq", "12"], "sequence length 12 is not divisible by 8"),
    (["--devices", "8", "--dp", "1", "--cp", "8", "--cp-comm-type", "a2a"], "4 heads cannot be split 8 ways"),
    (["--devices", "3", "--dp", "1", "--pp", "3", "--layers", "4", "--schedule", "dualpipe", "--microbatches", "6"],
     "even number of stages; got 3"),
    (["--devices", "4", "--dp", "4", "--ep", "3"], "ep=3 must divide the experts \\(4\\)"),
    (["--devices", "4", "--dp", "2", "--pp", "2", "--ep", "2", "--zero", "2", "--microbatches", "2"],
     "DeepSpeed refuses ZeRO-2/3 with pipeline"),
])
def test_cli_refuses_bad_combinations_in_one_line_with_exit_2(capsys, args, message):
    import re

    from simulator.cli import main

    assert main(_cli(*args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and re.search(message, err), err
