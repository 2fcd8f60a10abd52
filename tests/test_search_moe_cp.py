"""`search` over expert- and context-parallel sizes: MoE fields with Megatron's flag names, the e
and c lists searched, memory headroom in the JSON, one-line refusals."""

import json

import pytest

from simulator.cli import main
from simulator.cost.hardware import get_hardware
from simulator.cost.model_presets import get_model
from simulator.cost.search import search_training
from simulator.errors import ParasimError

BASE = ["search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--schedules", "1f1b", "--json"]


def run_json(capsys, *extra) -> dict:
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_moe_flags_and_the_expert_parallel_sizes_searched(capsys):
    out = run_json(capsys, "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "7168",
                   "--ep", "2,4", "--gpus", "32", "--global-batch", "32", "--top", "20")
    moe = get_model("llama3-8b", num_experts=8, moe_router_topk=2, moe_ffn_hidden=7168)
    assert out["params"] == moe.params()
    rows = out["top"] + out["alternatives"]
    assert {r["ep"] for r in rows} <= {2, 4} and {r["ep"] for r in out["top"]} == {2, 4}
    # e divides the data-parallel ranks and the tensor ranks the experts leave (etp < t: parallel folding)
    assert all(r["tp"] // (r["etp"] or r["tp"]) * r["dp"] % r["ep"] == 0 for r in rows)
    cap = get_hardware("h100-sxm").memory_bytes
    for r in out["top"]:
        assert r["memory_headroom_bytes"] == pytest.approx(cap - r["memory_per_gpu_bytes"]) and r["memory_headroom_bytes"] > 0


def test_context_parallel_sizes_searched_for_a_long_sequence(capsys):
    out = run_json(capsys, "--seq-length", "32768", "--use-flash-attn", "--cp", "1,2,4", "--gpus", "16",
                   "--global-batch", "16", "--top", "20")
    assert {r["cp"] for r in out["top"]} - {1} and {r["cp"] for r in out["top"]} <= {1, 2, 4}
    assert all(r["tp"] * r["cp"] * r["pp"] * r["dp"] == 16 for r in out["top"])


@pytest.mark.parametrize("extra, message", [
    (["--ep", "2"], "needs a mixture-of-experts model"),
    (["--ep", "0"], "--ep must be comma-separated positive integers"),
    (["--cp", "two"], "--cp must be comma-separated positive integers"),
])
def test_bad_sizes_are_refused_in_one_line(capsys, extra, message):
    assert main([*BASE, "--gpus", "8", "--global-batch", "8", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_api_refuses_non_integer_sizes():
    with pytest.raises(ParasimError, match="context_parallel must be a non-empty list of positive integers"):
        search_training("llama3-8b", "h100-sxm", 8, 8, context_parallel=[1.5])
