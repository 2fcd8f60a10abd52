"""Every figure docs/validation.md quotes is asserted here at the value it prints (issue 24 item 7).

Each table of docs/validation.md follows a marker `<!-- figures: KEY -->`; its first column names a
row, its last column is the figure, printed to the digits shown. FIGURES[KEY](row) recomputes it
from the configuration of the test that validates that source (the rows, published values and
helpers are imported from those tests: one home each), and the printed text must be equal. A
change of the cost model that moves a figure fails here until the doc is updated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_cost_a100_runs as a100
import test_cost_h100_bf16_megatron as bf16
import test_cost_h100_megatron_core as fp8
import test_cost_h100_runs as llama
import test_cost_megatron as megatron
import test_cost_moe_published as moe
import test_cost_torchtitan_published as titan
import test_cost_zero3_published as zero3

from simulator.cost.analytic import estimate
from simulator.cost.memory import model_state_bytes_per_device
from simulator.cost.memory_report import memory_report
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import ParallelConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "validation.md"
A100 = "a100-80gb"


def _table1(row):
    run = next(r for r in megatron.TABLE1 if r.model == row)
    return estimate(run.model, megatron._cfg(run), A100).tflops_per_gpu / run.tflops_per_gpu


def _table2(row):
    model, t, p, d, b, tflops = next(r for r in a100.TABLE2_PTDP if f"{r[0]} d{r[3]}" == row)
    return estimate(model, ParallelConfig(tp=t, pp=p, dp=d, global_batch=b, recompute="full"), A100).tflops_per_gpu / tflops


def _korthikanti(row):
    name, kind = row.split()
    model, p, gpus, b, t_full, t_sel = a100.KORTHIKANTI[["22b", "175b", "530b", "1t"].index(name)]
    kw = dict(tp=8, pp=p, dp=gpus // (8 * p), global_batch=b)
    cfg = ParallelConfig(recompute="full", **kw) if kind == "full" else \
        ParallelConfig(recompute="selective", sequence_parallel=True, **kw)
    return estimate(model, cfg, A100).step_time_s / (t_full if kind == "full" else t_sel)


def _korthikanti_mfu(row):
    kw = dict(tp=8, pp=35, dp=8, global_batch=2240)
    cfg = ParallelConfig(recompute="full", **kw) if row == "full" else \
        ParallelConfig(recompute="selective", sequence_parallel=True, **kw)
    return 100 * estimate("megatron-529.6b", cfg, A100).mfu


def _llama3(row):
    gpus, cp, dp, seq, batch, _mfu = llama.TABLE4[["8k", "16k", "16k-cp16"].index(row)]
    return 100 * estimate(get_model("llama3-405b", seq=seq), llama._cfg(cp, dp, batch), "h100-sxm",
                          llama.LLAMA3_STACK).mfu


def _llama3_memory(row):
    cp, dp, seq, batch, v = {"16k": (1, 128, 8192, 2048, 2), "8k v2": (1, 64, 8192, 2048, 2),
                             "8k v4": (1, 64, 8192, 2048, 4)}[row]
    model = get_model("llama3-405b", seq=seq, dropout=False)
    return memory_report(model, llama._cfg(cp, dp, batch, v), "h100-sxm", flash_attention=True).total_bytes / 1e9


def _fp8(row):
    tflops = next(r for r in fp8.ROWS if r[0] == row)[-1]
    return fp8.priced_row(row).model_tflops_per_gpu / tflops


def _bf16(row):
    *cfg, tflops = bf16.TABLE[bf16.IDS.index(row)]
    return bf16._priced(*cfg).model_tflops_per_gpu / tflops


def _zero3(row):
    gpus = int(row.split()[1])
    if row.startswith("175b"):
        tflops = next(t for g, _b, t in zero3.TABLE2_ZERO3 if g == gpus)
        return zero3._priced(gpus, next(b for g, b, _t in zero3.TABLE2_ZERO3 if g == gpus)).tflops_per_gpu / tflops
    _g, b, batch, tflops, _r = next(r for r in zero3.TABLE2_ZERO3_530B if r[0] == gpus)
    cfg = ParallelConfig(dp=gpus, micro_batch_size=b, global_batch=batch, zero_stage=3, recompute="full")
    return estimate("megatron-529.6b", cfg, A100).tflops_per_gpu / tflops


def _mt_nlg(row):
    nodes, step_s, _tflops, _r = next(r for r in a100.MT_NLG if r[0] == int(row))
    cfg = ParallelConfig(tp=8, pp=35, dp=nodes // 35, global_batch=1920, recompute="full")
    return step_s / estimate(get_model("megatron-529.6b", vocab=50257), cfg, A100).step_time_s


def _deepspeed_runs(row):
    if row == "BLOOM 176B":
        return 105.22 / estimate(a100.BLOOM, a100.BLOOM_CFG, a100._jean_zay(), a100.DEEPSPEED_BF16).step_time_s
    if row == "BLOOM 176B as Megatron-LM":
        return estimate(a100.BLOOM, a100.BLOOM_CFG, a100._jean_zay()).tflops_per_gpu / 150
    opt = a100.ModelSpec("opt-175b", layers=96, hidden=12288, heads=96, seq=2048, vocab=50272)
    cfg = ParallelConfig(tp=8, dp=124, micro_batch_size=8, global_batch=992, recompute="full", zero_stage=3)
    fsdp = a100.Assumptions(overlap_param_gather=True, overlap_grad_reduce=True)
    return estimate(opt, cfg, A100, fsdp).model_tflops_per_gpu / 147


def _torchtitan(row):
    tps = next(r for r in titan.TABLE if r[0] == row)[-2]
    res = titan.priced(row)
    return res.tokens_per_s / res.gpus / tps


def _moe_bridge(row):
    tps = next(r for r in moe.TABLE if r[0] == row)[-1]
    res = moe.priced(row)
    return res.tokens_per_s / res.gpus / tps


def _zero_figure1(row):
    return model_state_bytes_per_device(7.5e9, 64, int(row)) / 1e9


FIGURES = {"megatron-table1": _table1, "megatron-table2": _table2, "korthikanti-table4": _korthikanti,
           "korthikanti-mfu": _korthikanti_mfu, "llama3-table4": _llama3, "llama3-memory": _llama3_memory,
           "nvidia-fp8": _fp8, "megatron-core-bf16": _bf16, "zero3-table2": _zero3, "mt-nlg": _mt_nlg,
           "deepspeed-runs": _deepspeed_runs, "torchtitan": _torchtitan, "zero-figure1": _zero_figure1,
           "moe-bridge": _moe_bridge}


def doc_tables() -> dict[str, list[tuple[str, str]]]:
    """{KEY: [(row, printed figure), ...]} for every marked table of docs/validation.md."""
    tables = {}
    for key, body in re.findall(r"<!-- figures: ([\w-]+) -->\n((?:\|.*\n)+)", DOC.read_text(encoding="utf-8")):
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.strip().splitlines()[2:]]
        tables[key] = [(r[0], r[-1]) for r in rows]
    return tables


TABLES = doc_tables()
CASES = [(key, row, printed) for key, rows in TABLES.items() for row, printed in rows]


def test_every_marked_table_is_recomputed():
    assert set(TABLES) == set(FIGURES) and all(TABLES.values())


@pytest.mark.parametrize("key,row,printed", CASES, ids=[f"{k}:{r}" for k, r, _ in CASES])
def test_the_doc_prints_the_recomputed_figure(key, row, printed):
    digits = len(printed.split(".")[1]) if "." in printed else 0
    assert f"{FIGURES[key](row):.{digits}f}" == printed
