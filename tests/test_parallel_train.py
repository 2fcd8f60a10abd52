"""Real training I: every strategy and schedule equals one device; DP optimisations are measurable;
memory really held follows the schedule; bad configurations are refused up front."""

import json

import pytest

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.models import GPTConfig, MLPConfig
from simulator.parallel.config import TrainConfig
from simulator.training import train

GPT = GPTConfig(layers=3, hidden=16, heads=2, seq_len=8, vocab=16)  # 5 model layers: emb, 3 blocks, head
MLP = MLPConfig(in_dim=8, hidden=16, layers=4, classes=4)

CASES = [
    ("single", dict()),
    ("dp", dict(devices=2)),
    ("dp", dict(devices=3)),  # odd world size
    ("dp", dict(devices=4, bucket_mb=0.002)),
    ("dp", dict(devices=2, accumulate=2)),
    ("layer", dict(devices=2)),
    ("layer", dict(devices=3)),  # uneven split: 5 layers on 3 devices
    ("pp", dict(devices=2, microbatches=4, schedule="gpipe")),
    ("pp", dict(devices=3, microbatches=4, schedule="1f1b")),
    ("pp", dict(devices=2, microbatches=4, schedule="interleaved", virtual_stages=2)),
    ("pp", dict(devices=4, microbatches=4, schedule="zb-h1")),
    ("pp", dict(devices=4, dp=2, microbatches=2, schedule="1f1b")),
]


@pytest.mark.parametrize("model", [GPT, MLP], ids=["gpt", "mlp"])
@pytest.mark.parametrize("strategy,kw", CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CASES)])
def test_every_strategy_equals_one_device(model, strategy, kw):
    if model is MLP and kw.get("virtual_stages", 1) * kw.get("devices", 1) > 4:
        kw = dict(kw, devices=2)
    r = train(TrainConfig(model, strategy=strategy, global_batch=12 if kw.get("devices") == 3 else 8, steps=3, **kw))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.losses == pytest.approx(r.reference_losses, rel=1e-9)


def test_loss_falls_under_pipeline_training():
    r = train(TrainConfig(GPT, strategy="pp", devices=2, microbatches=2, global_batch=8, steps=25, lr=3e-2))
    assert r.losses[-1] < 0.7 * r.losses[0]
    assert r.max_rel_weight_diff_vs_single < 1e-9


def test_sum_gradients_without_mean_match_the_scaled_reference():
    r = train(TrainConfig(MLP, strategy="dp", devices=2, global_batch=8, steps=2, gradients_mean=False, optimizer="sgd"))
    assert r.max_rel_weight_diff_vs_single < 1e-9


def _ar_count(result):
    return sum(1 for e in result.trace.events if e.kind == "all_reduce" and e.device == 0)


def test_default_buckets_wait_for_the_backward_and_small_buckets_overlap_it():
    # bucket_mb None: buckets of DEFAULT_BUCKET_MB (25 MB, the whole model here), reduced after the
    # backward (Megatron-LM without --overlap-grad-reduce); 0.05 MB: several buckets under the backward
    plain = train(TrainConfig(GPT, strategy="dp", devices=2, steps=1))
    bucketed = train(TrainConfig(GPT, strategy="dp", devices=2, steps=1, bucket_mb=0.05))
    assert _ar_count(plain) == 1 < _ar_count(bucketed)
    assert sum(bucketed.trace.bytes_by_collective().values()) == sum(plain.trace.bytes_by_collective().values())

    def ar_start_and_last_backward(result):
        last_bwd = max(e.end_s for e in result.trace.events if e.device == 0 and e.phase == "backward")
        return min(e.start_s for e in result.trace.events if e.device == 0 and e.kind == "all_reduce"), last_bwd

    first_ar, last_bwd = ar_start_and_last_backward(bucketed)
    assert first_ar < last_bwd       # at least one bucket's AllReduce starts before the backward ends
    first_ar, last_bwd = ar_start_and_last_backward(plain)
    assert first_ar >= last_bwd
    assert bucketed.max_rel_weight_diff_vs_single < 1e-9 and plain.max_rel_weight_diff_vs_single < 1e-9


def test_accumulation_synchronises_once_per_step():
    once = train(TrainConfig(GPT, strategy="dp", devices=2, steps=1))
    accumulated = train(TrainConfig(GPT, strategy="dp", devices=2, steps=1, accumulate=4))
    assert _ar_count(accumulated) == _ar_count(once)  # 4 micro-steps, still one AllReduce per gradient
    assert accumulated.max_rel_weight_diff_vs_single < 1e-9


def test_float16_gradients_quarter_the_bytes_and_report_their_error():
    full = train(TrainConfig(GPT, strategy="dp", devices=2, steps=2))
    half = train(TrainConfig(GPT, strategy="dp", devices=2, steps=2, grad_dtype="float16"))
    assert sum(half.trace.bytes_by_collective().values()) * 4 == sum(full.trace.bytes_by_collective().values())
    assert 1e-9 < half.max_rel_weight_diff_vs_single < 1.0  # a real, reported rounding error


def _act_peak(result, device):
    return max(s.bytes_by_category.get("act", 0) for s in result.trace.memory if s.device == device)


def test_1f1b_holds_fewer_activations_than_gpipe_on_the_first_stage():
    kw = dict(strategy="pp", devices=2, microbatches=8, global_batch=16, steps=1)
    gpipe = train(TrainConfig(GPT, schedule="gpipe", **kw))
    ofob = train(TrainConfig(GPT, schedule="1f1b", **kw))
    assert _act_peak(ofob, 0) < _act_peak(gpipe, 0)
    # GPipe keeps all m micro-batches in flight on stage 0, 1F1B at most p = 2
    assert _act_peak(gpipe, 0) > 3 * _act_peak(ofob, 0)


def test_memory_categories_are_tracked():
    r = train(TrainConfig(GPT, strategy="dp", devices=2, steps=1))
    cats = set().union(*(s.bytes_by_category for s in r.trace.memory))
    assert {"param", "grad", "opt", "act"} <= cats
    assert all(p > 0 for p in r.trace.peak_memory_bytes())


def test_layer_parallel_devices_wait_for_each_other():
    r = train(TrainConfig(GPT, strategy="layer", devices=3, steps=1))
    stats = r.trace.device_stats()
    # each device computes well under half of the step: the others' layers keep it waiting
    assert all(s["compute_fraction"] < 0.5 for s in stats)


@pytest.mark.parametrize("kw,words", [
    (dict(strategy="pp", devices=8), r"exceeds the model's 5 layers \(Embedding, 3 x TransformerBlock, LMHead\)"),
    (dict(strategy="dp", devices=4, accumulate=3), r"dp=4 x micro-batches=1 x accumulate=3 = 12 equal parts"),
    (dict(strategy="pp", devices=2, microbatches=3), "cannot be split"),
    (dict(strategy="hybrid", devices=8, dp=3, pp=2), "do not multiply to 8 devices"),
    (dict(strategy="pp", devices=2, microbatches=5, schedule="interleaved", virtual_stages=2, global_batch=10),
     "2 rounds of equal size: m = 5 with p = 2"),
    (dict(strategy="single", devices=2), "1 device"),
])
def test_bad_configurations_are_refused_with_a_reason(kw, words):
    with pytest.raises(ParasimError, match=words):
        TrainConfig(GPT, **kw).resolved()


def test_train_cli_refuses_a_model_too_big_for_memory_in_one_line(capsys):
    # a (1e6, 3e6) float64 QKV weight is 22 TiB: refused from the configuration, before anything is built
    assert main(["train", "--strategy", "dp", "--devices", "2", "--hidden", "1000000", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: the model's parameters of 48,000,080,000,000 elements") \
        and "more than the 20,000,000 elements parasim accepts" in captured.err


def test_train_cli_json(capsys):
    rc = main(["train", "--model", "gpt", "--strategy", "pp", "--devices", "2", "--microbatches", "2",
               "--steps", "2", "--layers", "2", "--hidden", "16", "--heads", "2", "--seq", "8", "--vocab", "16",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("losses", "max_rel_weight_diff_vs_single", "bytes_by_collective", "messages", "bubble_fraction",
                "peak_memory_bytes_per_device"):
        assert key in out
    assert len(out["losses"]) == 2 and out["max_rel_weight_diff_vs_single"] < 1e-9
    assert out["bytes_by_collective"]["send"] > 0


def test_train_cli_refuses_in_one_line(capsys):
    rc = main(["train", "--strategy", "pp", "--devices", "2", "--microbatches", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_a_hand_written_schedule_trains_and_a_broken_one_is_refused(tmp_path, capsys):
    good = "F0 F1 BW0 BW1\nF0 BW0 F1 BW1"
    r = train(TrainConfig(GPT, strategy="pp", devices=2, microbatches=2, global_batch=4, steps=2, schedule_text=good))
    assert r.max_rel_weight_diff_vs_single < 1e-9 and r.compiled.notes["schedule"] == "custom"
    bad = tmp_path / "bad.txt"
    bad.write_text("F0 F1 BW0 BW1\nBW0 F0 F1 BW1")
    rc = main(["train", "--strategy", "pp", "--devices", "2", "--microbatches", "2", "--batch", "4",
               "--schedule-file", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "BW0 before its own F0" in err


def test_train_takes_a_runtime_by_name():
    """train(cfg, runtime="local") makes (and closes) the named runtime; it used to raise AttributeError."""
    cfg = TrainConfig(GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16), strategy="dp", devices=2, steps=2)
    by_name, default = train(cfg, runtime="local"), train(cfg)
    assert by_name.losses == default.losses and by_name.max_rel_weight_diff_vs_single < 1e-9
    with pytest.raises(ParasimError, match="unknown runtime 'gpu'; valid: local, ray"):
        train(cfg, runtime="gpu")
