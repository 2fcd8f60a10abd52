"""DualPipe (DeepSeek-V3 report Sec. 3.2.1): validated, executed for real, priced, compared."""

import pytest

from simulator import GPTConfig, TrainConfig, train
from simulator.errors import ParasimError
from simulator.parallel.schedule_check import validate
from simulator.parallel.schedule_registry import make_schedule
from simulator.parallel.schedule_sim import simulate_schedule

GPT = GPTConfig(layers=6, hidden=16, heads=4, seq_len=8, vocab=16)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16)])
def test_dualpipe_is_valid_and_holds_p_plus_one_activations(p, m):
    s = make_schedule("dualpipe", p, m)
    validate(s)
    assert s.bidirectional and s.n_stages == p and s.v == 2
    # each device is stage d of one copy and stage p-1-d of the other
    assert {s.model_stage(d, 0) for d in range(p)} == {s.model_stage(d, 1) for d in range(p)} == set(range(p))
    # m/2 micro-batches per direction, fed from both ends
    assert {a.microbatch for a in s.actions[0] if a.kind == "F" and a.chunk == 0} == set(range(m // 2))
    assert {a.microbatch for a in s.actions[p - 1] if a.kind == "F" and a.chunk == 1} == set(range(m // 2, m))
    assert max(simulate_schedule(s).peak_in_flight) == p + 1  # the report's Table 2: PP + 1


@pytest.mark.parametrize("t", [(1, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 0.5)])
@pytest.mark.parametrize("p", [4, 8])
def test_bubbles_side_by_side_with_the_report_formulas(t, p):
    """DeepSeek-V3 Table 2 with F forward, B full backward (= B_in + W), W weight gradient:
    1F1B (p-1)(F+B), ZB1P (p-1)(F+B-2W), DualPipe (p/2-1)(F&B+B-3W); F&B = F + B here (one stream)."""
    tf, tb, tw = t
    F, B, W = tf, tb + tw, tw
    m = 4 * p
    bubble = {name: max(simulate_schedule(make_schedule(name, p, m), tf, tb, tw).bubble_time)
              for name in ("1f1b", "zb-h1", "dualpipe")}
    assert bubble["1f1b"] == pytest.approx((p - 1) * (F + B))
    assert bubble["zb-h1"] == pytest.approx((p - 1) * (F + B - 2 * W))
    assert 0 < bubble["dualpipe"] <= (p / 2 - 1) * ((F + B) + B - 3 * W) + 1e-12
    assert bubble["dualpipe"] < bubble["zb-h1"] < bubble["1f1b"]


@pytest.mark.parametrize("kw", [dict(strategy="pp", devices=2, pp=2, microbatches=4),
                                dict(strategy="pp", devices=4, pp=4, microbatches=8),
                                dict(strategy="pp", devices=8, pp=4, dp=2, microbatches=8),
                                dict(strategy="hybrid", devices=8, pp=2, cp=2, tp=2, microbatches=4)])
def test_dualpipe_trains_like_one_device(kw):
    r = train(TrainConfig(GPT, schedule="dualpipe", global_batch=16, steps=2, **kw))
    assert r.max_rel_weight_diff_vs_single < 1e-9
    assert r.to_dict()["schedule"] == "dualpipe"


def test_dualpipe_on_the_clock_beats_1f1b_and_zb_h1_and_keeps_two_parameter_copies():
    runs = {s: train(TrainConfig(GPT, strategy="pp", devices=4, schedule=s, microbatches=8, global_batch=16))
            for s in ("1f1b", "zb-h1", "dualpipe")}
    bubble = {s: r.trace.bubble_fraction() for s, r in runs.items()}
    assert bubble["dualpipe"] < bubble["zb-h1"] < bubble["1f1b"]

    def params(r):
        return sum(max(x.bytes_by_category.get("param", 0) for x in r.trace.memory if x.device == d) for d in range(4))

    assert params(runs["dualpipe"]) == 2 * params(runs["1f1b"])  # the report: 2x parameters


@pytest.mark.parametrize("kw,message", [(dict(devices=3, pp=3, microbatches=6), "even number of stages; got 3"),
                                        (dict(devices=4, pp=4, microbatches=4), "m = 4 with p = 4")])
def test_bad_dualpipe_refused_in_one_line(kw, message):
    with pytest.raises(ParasimError, match=message) as e:
        train(TrainConfig(GPT, strategy="pp", schedule="dualpipe", global_batch=12, **kw))
    assert "\n" not in str(e.value)
