"""Software stacks as data (issue 25 item 2, `simulator.cost.stack`): shipped presets with a source per
figure, user files that work like presets, one-line refusals, the overlaps a stack performs, and the
closed form and the event clock reading the same profile."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from simulator.cli import main
from simulator.cost.analytic import estimate
from simulator.cost.assumptions import assumptions_of
from simulator.cost.hardware_files import tomllib
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig
from simulator.cost.sac import block_linears, sac_recompute_flops_per_token, sac_recomputed
from simulator.cost.scale_kernels import layer_kernels
from simulator.cost.scale_sim import simulate_at_scale
from simulator.cost.stack import CHOICES, NUMBERS, OVERLAP_FIELDS, get_stack, stack_names
from simulator.errors import ParasimError

GPT = ModelSpec("gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257)
CFG = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16)


def _preset_text(name: str) -> str:
    return (resources.files("simulator.cost") / "stack_presets" / f"{name}.toml").read_text()


def _write(tmp_path, name: str = "mine", **changes) -> str:
    """A user's stack file (JSON): megatron-core's fields with `changes` (None deletes a field)."""
    data = tomllib.loads(_preset_text("megatron-core"))
    for key, value in changes.items():
        table, _, field = key.rpartition("__")
        target = data[table] if table else data
        target.pop(field) if value is None else target.__setitem__(field, value)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_shipped_stacks_load_and_every_figure_names_its_source():
    assert {"megatron-core", "nemo", "torchtitan", "deepspeed"} <= set(stack_names())
    for name in stack_names():
        st = get_stack(name)
        assert st.name == name and all(st.source_of(k).strip() for k in (*NUMBERS, *CHOICES, "overlaps", "always_overlaps"))
        assert set(st.always_overlaps) <= set(st.overlaps) <= set(OVERLAP_FIELDS)


def test_a_user_file_works_like_the_preset_it_copies(tmp_path, capsys):
    same, slow = _write(tmp_path, "same"), _write(tmp_path, "slow", gemm_peak_fraction=0.6)
    base, copy, other = (estimate(GPT, CFG, "a100-80gb", Assumptions(stack=s)) for s in ("megatron-core", same, slow))
    assert copy.step_time_s == base.step_time_s and other.step_time_s > 1.1 * base.step_time_s
    argv = ["simulate", "--hardware", "a100-80gb", "--layers", "8", "--hidden", "2048", "--heads", "16",
            "--seq", "1024", "--vocab", "50257", "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "16", "--json"]
    assert main(argv + ["--stack", slow]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == pytest.approx(other.step_time_s, rel=1e-12)
    assert out["assumptions"]["stack"]["value"] == slow and out["assumptions"]["stack"]["source"] == "flag"
    assert main(["sweep", "estimate", "--set", "model=megatron-1.7b", "--set", "hardware=a100-80gb", "--set", "dp=8",
                 "--set", "global_batch=64", "--vary", f"stack=megatron-core,{slow}", "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)["records"]
    assert recs[1]["step_time_s"] > recs[0]["step_time_s"]


@pytest.mark.parametrize("edit,match", [
    (dict(warp_speed=9), "unknown field.*warp_speed"),
    (dict(gemm_peak_fraction=1.2), r"gemm_peak_fraction must be in \(0, 1\], got 1.2"),
    (dict(step_overhead_ms=-1), "step_overhead_ms must be a finite number >= 0"),
    (dict(always_overlaps=["warp"]), "always_overlaps must be a list of overlaps"),
    (dict(overlaps=["grad_reduce"], always_overlaps=["tp_comm"]), "always_overlaps tp_comm must also be listed"),
    (dict(sources__kernel_gap_us=None), "sources must name one source per figure.*missing kernel_gap_us"),
    (dict(memory_efficiency=None), "missing field.*memory_efficiency"),
    (dict(selective_recompute="half"), "selective_recompute must be one of attention_core, every_other_matmul, got 'half'"),
    (dict(norm_bytes=-4), "norm_bytes must be a finite number >= 0"),
    (dict(sources__rope_bytes=None), "sources must name one source per figure.*missing rope_bytes"),
])
def test_bad_stack_files_are_refused_in_one_line(tmp_path, edit, match):
    path = _write(tmp_path, **edit)
    with pytest.raises(ParasimError, match=match) as err:
        Assumptions(stack=path)
    assert "\n" not in str(err.value)


def test_unknown_stacks_are_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ParasimError, match="unknown software stack 'nope'; known: deepspeed, megatron-core"):
        Assumptions(stack="nope")
    with pytest.raises(ParasimError, match="cannot open stack file"):
        Assumptions(stack=str(tmp_path / "missing.toml"))


def test_a_stack_performs_its_own_overlaps_and_refuses_others():
    llama = get_model("llama3-8b")
    A = Assumptions(stack="nemo").resolved(llama)
    assert A.overlap_grad_reduce and A.overlap_param_gather and A.overlap_tp_comm
    rows = assumptions_of(llama, Assumptions(stack="nemo"), door="flag")
    assert rows["overlap_tp_comm"] == {"value": True, "source": "stack nemo"}
    assert rows["stack"]["value"] == "nemo" and rows["stack"]["source"] == "flag"
    titan = Assumptions(stack="torchtitan").resolved(llama)
    assert titan.overlap_param_gather and titan.overlap_grad_reduce and not titan.overlap_tp_comm
    with pytest.raises(ParasimError, match="stack deepspeed does not perform the tp_comm overlap"):
        Assumptions(stack="deepspeed", overlap_tp_comm=True)
    same = estimate(llama, ParallelConfig(tp=2, dp=4, zero_stage=1), "h100-sxm",
                    Assumptions(stack="nemo")).step_time_s
    asked = estimate(llama, ParallelConfig(tp=2, dp=4, zero_stage=1), "h100-sxm",
                     Assumptions(overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=True)).step_time_s
    assert same == asked          # nemo = Megatron-Core's kernels with its recipes' overlaps on


def test_closed_form_and_clock_read_the_same_overheads(tmp_path):
    """A stack with a per-kernel gap and a per-step host overhead: both models add the same step
    overhead as `other` (exactly) and the same kernel gaps (within the 2 % of tests/test_step_model.py)."""
    heavy = Assumptions(stack=_write(tmp_path, "heavy", kernel_gap_us=20.0, step_overhead_ms=30.0))
    cfg = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16)
    bare = Assumptions(stack=_write(tmp_path, "bare", kernel_gap_us=0.0, step_overhead_ms=0.0))
    base_cf, base_ck = estimate(GPT, cfg, "a100-80gb", bare), simulate_at_scale(GPT, cfg, "a100-80gb", bare, fold_tp=True)
    cf, ck = estimate(GPT, cfg, "a100-80gb", heavy), simulate_at_scale(GPT, cfg, "a100-80gb", heavy, fold_tp=True)
    assert base_cf.breakdown.other_s == 0.0 and base_ck.breakdown.other_s == 0.0
    assert cf.breakdown.other_s == pytest.approx(0.030 - cf.breakdown.exposed_comm_s["dp"], rel=1e-12)
    assert ck.breakdown.other_s == pytest.approx(0.030 - ck.breakdown.exposed_comm_s["dp"], rel=1e-12)
    assert cf.breakdown.compute_s > base_cf.breakdown.compute_s       # the kernel gaps
    assert cf.step_time_s == pytest.approx(ck.step_time_s, rel=0.02)
    assert cf.step_time_s == pytest.approx(cf.breakdown.step_s, rel=1e-12)


def test_the_step_overhead_hides_under_exposed_data_parallel_communication():
    st = get_stack("megatron-core")
    assert st.exposed_step_overhead_s(1.0) == 0.0
    assert st.exposed_step_overhead_s(0.0) == pytest.approx(st.step_overhead_ms * 1e-3, rel=1e-12)


def test_presets_parse_as_plain_toml():
    for name in stack_names():
        assert tomllib.loads(_preset_text(name))["name"] == name


def test_every_command_door_takes_the_stack_and_states_it(capsys):
    """simulate with Megatron-LM's flags, memory and search: --stack is applied and stated."""
    base = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--stack", "nemo", "--json"]
    for argv in (["simulate", "--tensor-model-parallel-size", "2", *base],
                 ["memory", "--tensor-model-parallel-size", "2", *base],
                 ["search", "--global-batch", "16", "--schedules", "1f1b", "--top", "1", *base]):
        assert main(argv) == 0
        rows = json.loads(capsys.readouterr().out)["assumptions"]
        assert rows["stack"]["value"] == "nemo" and rows["stack"]["source"] == "flag"
        assert rows["overlap_grad_reduce"] == {"value": True, "source": "stack nemo"}
    assert main(["simulate", "--tensor-model-parallel-size", "2", *base[:-3], "--stack", "deepspeed",
                 "--tp-comm-overlap"]) == 2
    assert "stack deepspeed does not perform the tp_comm overlap" in capsys.readouterr().err


def test_element_wise_traffic_is_the_stacks_per_op_count():
    """One Llama 3 8B layer, one 8192-token micro-batch, no TP: the forward element-wise bytes are
    the stack's per-element counts times the widths (`scale_kernels.layer_kernels`): norm and
    residual on h, RoPE on q + kv, the K/V repeat on both K and V (q + kv each), the attention copy
    on q, SwiGLU on f."""
    m, cfg = get_model("llama3-8b"), ParallelConfig(dp=8, global_batch=8)
    T, h, q, kv, f = m.seq, m.hidden, m.heads * m.head_dim, m.kv_dim, m.ffn_hidden
    for name in ("megatron-core", "torchtitan", "torchtitan-compile"):
        st = get_stack(name)
        K = layer_kernels(m, cfg, Assumptions(stack=name))
        attn = T * ((st.norm_bytes + st.residual_bytes) * h + st.rope_bytes * (q + kv)
                    + st.kv_repeat_bytes * 2 * (q + kv) + st.attention_copy_bytes * q)
        assert K.attn_fwd.ew_nbytes == pytest.approx(attn, rel=1e-12)
        assert K.mlp_fwd.ew_nbytes == pytest.approx(T * ((st.norm_bytes + st.residual_bytes) * h
                                                         + st.swiglu_bytes * f), rel=1e-12)
    assert get_stack("megatron-core").norm_bytes + get_stack("megatron-core").residual_bytes == 11   # 8 + 14 sbh per layer
    assert get_stack("torchtitan").norm_bytes == 36 and get_stack("torchtitan-compile").norm_bytes == 4


def test_torchtitan_op_policy_recomputes_every_second_matmul_and_every_element_wise_op():
    """torchtitan's policy counts a block's matmuls wq, wk, wv, wo, w1, w3, w2 and recomputes the
    even ones (wk, wo, w3), with all element-wise ops; Megatron's selective repeats nothing more
    under FlashAttention."""
    m = get_model("llama3-8b")
    assert [n for n, _i, _o in block_linears(m)] == ["q", "k", "v", "proj", "gate", "up", "down"]
    assert sac_recomputed(m) == ("k", "proj", "up")
    h, kv, f = m.hidden, m.kv_dim, m.ffn_hidden
    assert sac_recompute_flops_per_token(m) == 2 * (h * kv + h * h + h * f)
    sel, none = (ParallelConfig(dp=8, global_batch=8, recompute=r) for r in ("selective", "none"))
    titan = Assumptions(stack="torchtitan")
    Ks, Kn = layer_kernels(m, sel, titan), layer_kernels(m, none, titan)
    assert Ks.attn_b.flops - Kn.attn_b.flops == pytest.approx(2 * m.seq * (h * kv + h * h), rel=1e-12)
    assert Ks.mlp_b.flops - Kn.mlp_b.flops == pytest.approx(2 * m.seq * h * f, rel=1e-12)
    assert Ks.attn_b.ew_nbytes - Kn.attn_b.ew_nbytes == pytest.approx(Kn.attn_fwd.ew_nbytes, rel=1e-12)
    mc_s, mc_n = (layer_kernels(m, c, Assumptions()) for c in (sel, none))
    assert mc_s.attn_b.flops == mc_n.attn_b.flops and mc_s.mlp_b.ew_nbytes == mc_n.mlp_b.ew_nbytes
    moe = ModelSpec("moe", layers=2, hidden=1024, heads=8, seq=1024, vocab=32000, num_experts=8, gated_mlp=True)
    with pytest.raises(ParasimError, match="op-level selective recompute .* dense models only") as err:
        layer_kernels(moe, ParallelConfig(dp=8, global_batch=8, recompute="selective"), titan)
    assert "\n" not in str(err.value)
