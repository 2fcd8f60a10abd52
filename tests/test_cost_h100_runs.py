"""The cost model against published H100 runs: Llama 3 405B on 8k and 16k H100s (Meta's 4D parallelism).

Reference (Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4; BF16 MFU
against the 989 TFLOP/s dense peak, 16M tokens per batch):
  8,192 GPUs   tp8 cp1  pp16 dp64  seq 8,192    batch/DP 32  430 TFLOP/s/GPU  43% MFU
  16,384 GPUs  tp8 cp1  pp16 dp128 seq 8,192    batch/DP 16  400 TFLOP/s/GPU  41% MFU
  16,384 GPUs  tp8 cp16 pp16 dp8   seq 131,072  batch/DP 16  380 TFLOP/s/GPU  38% MFU
Section 3.3.2 of the paper: interleaved pipeline schedule; the first and last stages hold one layer
fewer (126 layers, the embedding and the output layer each take a layer's place); FSDP-style
sharding of the optimizer states (ZeRO-1 with a pipeline here); FlashAttention-style attention;
communication overlapped with computation. The paper does not give the number of virtual stages;
v = 2 chunks of 4 layer slots (3 in the first and last chunks) is the smallest interleaving that
reduces one layer at each end, and what we price. TP communication is not overlapped (no
--tp-comm-overlap): Meta's stack is not Transformer Engine's userbuffers.

Memory (Sec. 3.3.2: "we could pretrain Llama 3 on sequences of 8K tokens without activation
checkpointing"): Llama trains without dropout (no dropout masks: `ModelSpec.dropout=False`,
Megatron --attention-dropout 0 --hidden-dropout 0), and the first device's in-flight chunks are
counted with their own layers (3 or 4 with v = 2; `memory_report._layers_in_flight`). With
m = p = 16 micro-batches (16k GPUs) Megatron's interleaved schedule runs every forward first, so
the first device holds m v = 32 chunks, not p v + p - 1 = 47.
"""

import pytest

from simulator.cost.analytic import estimate
from simulator.cost.hardware import get_hardware
from simulator.cost.memory_report import memory_report
from simulator.cost.model_presets import get_model
from simulator.cost.parallel_config import Assumptions, ParallelConfig

LLAMA3_STACK = Assumptions(flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True)
# (gpus, cp, dp, seq, sequences per batch, published MFU)
TABLE4 = [(8192, 1, 64, 8192, 2048, 0.43), (16384, 1, 128, 8192, 2048, 0.41), (16384, 16, 8, 131072, 128, 0.38)]


def _cfg(cp, dp, batch, v=2):
    return ParallelConfig(tp=8, pp=16, dp=dp, cp=cp, global_batch=batch, schedule="interleaved", virtual_stages=v,
                          sequence_parallel=True, zero_stage=1, balance_embedding=True)


@pytest.mark.parametrize("gpus,cp,dp,seq,batch,mfu", TABLE4, ids=["8k", "16k", "16k-cp16"])
def test_llama3_405b_on_h100_within_15_percent_of_table4(gpus, cp, dp, seq, batch, mfu):
    model = get_model("llama3-405b", seq=seq)
    cfg = _cfg(cp, dp, batch)
    assert cfg.gpus == gpus and cfg.stage_layers(126)[0] == 7 and set(cfg.stage_layers(126)[1:-1]) == {8}
    res = estimate(model, cfg, "h100-sxm", LLAMA3_STACK)
    assert res.mfu == pytest.approx(mfu, rel=0.15)
    assert res.model_tflops_per_gpu == pytest.approx(mfu * 989, rel=0.15)


def test_llama3_405b_published_layouts_fit_without_dropout_masks():
    """The three layouts ran without activation checkpointing, so they fit. Per layer Llama keeps
    29 s b h / t (Megatron's 18 + 4 f/h = 31 less the two 1-byte dropout masks); model states are
    18.9 GB (bf16 weights, fp32 main gradients, Adam sharded over d). 16k GPUs (m = p): 73 GB of
    the 85.5 GB an H100 reports (15 % margin). 8k GPUs (m = 32): with v = 2, 47 chunks in flight
    need 95 GB, 11 % over; the paper does not give v, and v = 4 (47 + 32 = 79 chunks of 1-2 layers,
    127 layers instead of 164.5) fits with a 6 % margin: under Megatron's accounting Meta's 8k run
    needs v >= 4. (At v = 4 our time model is 22 % above Table 4's MFU: it prices interleaving's
    extra p2p but not its smaller, less efficient chunks, so the throughput tests keep v = 2.)
    With Megatron's default dropout masks the 8k layout at v = 4 fills 99.7 % of the device: no
    margin left."""
    cap = get_hardware("h100-sxm").memory_bytes
    mem = {}
    for key, (cp, dp, seq, batch, v, drop) in {"16k": (1, 128, 8192, 2048, 2, False),
                                               "16k-cp16": (16, 8, 131072, 128, 2, False),
                                               "8k v2": (1, 64, 8192, 2048, 2, False),
                                               "8k v4": (1, 64, 8192, 2048, 4, False),
                                               "8k v4 dropout": (1, 64, 8192, 2048, 4, True)}.items():
        model = get_model("llama3-405b", seq=seq, dropout=drop)
        mem[key] = memory_report(model, _cfg(cp, dp, batch, v), "h100-sxm", flash_attention=True).total_bytes / cap
    assert mem["16k"] < 1 and mem["16k-cp16"] < 1 and mem["8k v2"] > 1 and mem["8k v4"] < 1
    recorded = {"16k": 0.855, "16k-cp16": 0.855, "8k v2": 1.114, "8k v4": 0.943, "8k v4 dropout": 0.997}
    assert {k: round(x, 3) for k, x in mem.items()} == recorded    # a change of the memory model shows


def test_dropout_masks_and_uneven_chunks_as_counted():
    """No dropout removes 2 s b h / t per layer (SP) and s b h / t per in-flight micro-batch at the
    embedding; uneven chunks count 3 + 4 layers, even ones Megatron's L_1 x in-flight."""
    from simulator.cost.memory import activation_bytes_per_layer
    s, b, h, a, t = 8192, 1, 16384, 128, 8
    with_masks = activation_bytes_per_layer(s, b, h, a, t, True, "none", 53248, True)
    without = activation_bytes_per_layer(s, b, h, a, t, True, "none", 53248, True, dropout=False)
    assert with_masks - without == pytest.approx(2 * s * b * h / t, rel=1e-12)
    assert with_masks == pytest.approx(s * b * h / t * (18 + 4 * 53248 / h), rel=1e-12)
    cfg = _cfg(1, 64, 2048)                   # chunks on the first device: 3 and 4 layers, p = 16
    model = get_model("llama3-405b", dropout=False)
    acts = memory_report(model, cfg, flash_attention=True).activation_bytes
    held = 16 * 3 + 16 * 4 + 15 * 3           # 47 chunk forwards: chunk 0, chunk 1, then 15 of chunk 0
    assert acts == pytest.approx(without * held + 8 * s * b * 23.5 / t, rel=1e-12)


def test_megatron_dropout_flags():
    from simulator.cost.megatron_args import megatron_run, parse_megatron_args
    from simulator.errors import ParasimError

    def model(flags):
        return megatron_run(parse_megatron_args(flags), model="llama3-8b").model

    assert model("--attention-dropout 0 --hidden-dropout 0.0").dropout is False
    assert model("--attention-dropout 0").dropout is True      # the hidden dropout's masks stay
    with pytest.raises(ParasimError, match=r"--hidden-dropout is a probability in \[0, 1\), got 1.5"):
        parse_megatron_args("--hidden-dropout 1.5")


def test_llama3_405b_scaling_trend_follows_the_paper():
    """Doubling the data-parallel size halves the micro-batches per pipeline (32 -> 16), so the bubble
    grows and MFU falls, as Table 4 shows (43% -> 41%)."""
    model = get_model("llama3-405b")
    r8k = estimate(model, _cfg(1, 64, 2048), "h100-sxm", LLAMA3_STACK)
    r16k = estimate(model, _cfg(1, 128, 2048), "h100-sxm", LLAMA3_STACK)
    assert r16k.mfu < r8k.mfu and r16k.bubble_fraction > r8k.bubble_fraction
