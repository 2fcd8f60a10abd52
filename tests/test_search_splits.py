"""`search` tries uneven stage splits: Megatron-LM's first/last stage layers and the balanced
embedding (the embedding and the loss counted in the split), so pipeline depths that do not
divide the layer count are searched (issue 25 item 7)."""

import pytest

from simulator.cli import main
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.search import search_training
from simulator.cost.search_cases import LLAMA_405B_KW
from simulator.cost.search_space import STAGE_SPLITS, stage_splits
from simulator.errors import ParasimError

LLAMA = get_model("llama3-405b")   # 126 layers


def test_the_splits_of_126_layers():
    # pp16: 126 + embedding + head = 128 slots, 8 a stage, the end stages hold 7 layers (Llama 3,
    # Dubey et al. 2024 Sec. 3.3.2: "reducing one Transformer layer each from the first and the
    # last stages"); first/last 7/7 is that same split, so only 14/14 (middle 7) is added
    assert stage_splits(LLAMA, 16, 1, STAGE_SPLITS) == [{"balance_embedding": True},
                                                        {"first_stage_layers": 14, "last_stage_layers": 14}]
    # interleaved v=2: the balanced split's chunks are 3, 4, ..., 4, 3; an odd end stage cannot split in 2
    assert stage_splits(LLAMA, 16, 2, STAGE_SPLITS) == [{"balance_embedding": True}]
    assert ParallelConfig(pp=16, virtual_stages=2, schedule="interleaved", balance_embedding=True).chunk_layers(126) \
        == (3,) + (4,) * 30 + (3,)
    assert stage_splits(LLAMA, 16, 1, ("even",)) == []          # 16 does not divide 126
    assert stage_splits(LLAMA, 2, 1, STAGE_SPLITS) == [{}]      # the balanced 63/63 is the even split


KW = LLAMA_405B_KW


@pytest.fixture(scope="module")
def llama_24k():
    """Llama 3 405B on 24,576 H100, B = 3072 sequences of 8192 (16 per data-parallel rank at d = 192,
    as Llama 3's Table 4 trains 405B at 16 per DP rank), b = 1, SP, ZeRO-1: even splits only (the
    search before this change) and every split."""
    even = search_training(LLAMA, "h100-sxm", 24576, 3072, stage_splits=("even",), **KW)
    every = search_training(LLAMA, "h100-sxm", 24576, 3072, **KW)
    return even, every


def test_llama3_405b_on_24576_h100_finds_pp16_with_the_balanced_embedding(llama_24k):
    even, every = llama_24k
    # even splits only: p must divide 126, and p = 6 interleaved (v = 3) with full recomputation wins
    best = even.best
    assert (best.config.tp, best.config.pp, best.config.virtual_stages, best.config.recompute) == (8, 6, 3, "full")
    assert round(best.result.step_time_s, 3) == 9.115
    assert all(126 % p == 0 for p in even.space["pp"])
    # every split: pp16 interleaved, v = 4 (2 layers a chunk, 1 on the end chunks), embedding balanced,
    # fits with selective recomputation (77.0 of 85.5 GB) at 6.327 s; v = 2 gives 7.310 s
    best = every.best
    cfg = best.config
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.virtual_stages, cfg.balance_embedding) == (8, 16, 192, 4, True)
    assert cfg.recompute == "selective" and not best.result.oom
    assert round(best.result.step_time_s, 3) == 6.327
    v2 = next(c for c in every.top if (c.config.pp, c.config.virtual_stages) == (16, 2))
    assert round(v2.result.step_time_s, 3) == 7.31
    assert 16 in every.space["pp"] and every.space["balance_embedding"] == (True,)
    assert every.considered > even.considered


def test_a_split_name_that_does_not_exist_is_refused_in_one_line(capsys):
    with pytest.raises(ParasimError, match="unknown stage split"):
        search_training("megatron-1.7b", "a100-80gb", 8, 16, stage_splits=("uneven",))
    assert main(["search", "--model", "megatron-1.7b", "--gpus", "8", "--global-batch", "16",
                 "--stage-splits", "even,bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown stage split(s) ['bogus']" in err and "\n" not in err


def test_docs_search_quotes_these_figures(llama_24k):
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "search.md").read_text(encoding="utf-8")
    even, every = llama_24k
    v2 = next(c for c in every.top if (c.config.pp, c.config.virtual_stages) == (16, 2))
    for cand in (even.best, every.best, v2):
        assert f"| {cand.result.step_time_s:.3f} s |" in doc


def test_fsdp_x_tp_x_pp_is_one_axis_of_the_space():
    kw = dict(schedules=("1f1b",), zero_stages=(3,), sequence_parallel=(True,), recomputes=("full",), top=200)
    fsdp = search_training("llama3-8b", "h100-sxm", 32, 64, fsdp=("fsdp2",), **kw)
    # ZeRO-3 sharded as PyTorch fully_shard composes with a pipeline (torchtitan's FSDP x TP x PP)
    assert {c.config.fsdp for c in fsdp.top} == {"fsdp2"} and max(c.config.pp for c in fsdp.top) > 1
    assert any(c.config.tp > 1 and c.config.pp > 1 for c in fsdp.top) and fsdp.space["fsdp"] == ("fsdp2",)
    deepspeed = search_training("llama3-8b", "h100-sxm", 32, 64, fsdp=("none",), **kw)
    assert {c.config.pp for c in deepspeed.top} == {1}           # DeepSpeed's ZeRO-3 refuses a pipeline
    with pytest.raises(ParasimError, match="fsdp must be a non-empty list of none, fsdp2, megatron_fsdp"):
        search_training("llama3-8b", "h100-sxm", 8, 8, fsdp=("torch",))
