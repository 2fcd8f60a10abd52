"""Memory formulas against the ZeRO paper (Rajbhandari et al. 2020, Fig. 1) and Korthikanti et al. 2022."""

import pytest

from simulator.cost.memory import (
    activation_bytes_per_layer,
    in_flight_microbatches,
    logits_bytes,
    megatron_bytes_per_param,
    model_state_bytes_per_device,
)
from simulator.errors import ParasimError


def test_zero_paper_figure_1_numbers_exactly_as_rounded():
    psi, nd = 7.5e9, 64
    got = [round(model_state_bytes_per_device(psi, nd, z) / 1e9, 1) for z in range(4)]
    assert got == [120.0, 31.4, 16.6, 1.9]


def test_zero_stage_formulas_general():
    psi, nd, K = 1e9, 8, 12
    assert model_state_bytes_per_device(psi, nd, 0) == (4 + K) * psi
    assert model_state_bytes_per_device(psi, nd, 1) == 4 * psi + K * psi / nd
    assert model_state_bytes_per_device(psi, nd, 2) == 2 * psi + (2 + K) * psi / nd
    assert model_state_bytes_per_device(psi, nd, 3) == (4 + K) * psi / nd
    # fp32 variant: 4 + 4 + 8
    assert model_state_bytes_per_device(psi, 1, 0, "fp32") == 16 * psi
    assert model_state_bytes_per_device(psi, nd, 2, "fp32") == 4 * psi + 12 * psi / nd


def test_zero_refuses_bad_input():
    with pytest.raises(ParasimError):
        model_state_bytes_per_device(1e9, 4, 4)
    with pytest.raises(ParasimError):
        model_state_bytes_per_device(-1, 4, 0)
    with pytest.raises(ParasimError):
        model_state_bytes_per_device(1e9, 0, 0)


S, B, H, A = 2048, 4, 6144, 48


def test_activations_no_parallelism():
    assert activation_bytes_per_layer(S, B, H, A) == pytest.approx(S * B * H * (34 + 5 * A * S / H), rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_activations_tensor_and_sequence_parallel(t):
    sbh = S * B * H
    assert activation_bytes_per_layer(S, B, H, A, t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * A * S / (H * t)), rel=1e-12)
    assert activation_bytes_per_layer(S, B, H, A, t, sequence_parallel=True) == pytest.approx(
        sbh / t * (34 + 5 * A * S / H), rel=1e-12)
    assert activation_bytes_per_layer(S, B, H, A, t, True, "selective") == pytest.approx(34 * sbh / t, rel=1e-12)
    assert activation_bytes_per_layer(S, B, H, A, t, False, "selective") == pytest.approx(
        sbh * (10 + 24 / t), rel=1e-12)
    assert activation_bytes_per_layer(S, B, H, A, t, False, "full") == 2 * sbh


def test_tp_without_sp_equals_no_parallelism_at_t1():
    assert activation_bytes_per_layer(S, B, H, A, 1) == pytest.approx(activation_bytes_per_layer(S, B, H, A), rel=1e-12)


def test_one_f_one_b_first_stage_holds_the_whole_model_with_sp():
    """1F1B: p micro-batches of L/p layers in flight = s b h L / t (34 + 5 a s / h) (Korthikanti)."""
    L, p, t, m = 48, 8, 8, 64
    per_layer = activation_bytes_per_layer(S, 1, H, A, t, sequence_parallel=True)
    total = per_layer * (L // p) * in_flight_microbatches("1f1b", p, m)
    assert total == pytest.approx(S * H * L / t * (34 + 5 * A * S / H), rel=1e-12)
    for v in (2, 3):   # Korthikanti Sec. 4.2.3 and Megatron-LM's penalty, met by the executed schedule when p | m
        inter = per_layer * (L // p) * in_flight_microbatches("interleaved", p, m, v=v)
        assert inter == pytest.approx(total * (1 + (p - 1) / (p * v)), rel=1e-12)
    assert in_flight_microbatches("interleaved", p, m, v=1) == p  # v = 1 runs plain 1F1B


def test_interleaved_in_flight_is_counted_on_the_executed_schedule():
    """Megatron's p (1 + (p-1)/(p v)) ignores m: 5.5 stage units at p 4, v 2 for every m. Device 0 of
    the executed schedule holds 4.0 at m 4 (all 8 chunk forwards, m v = 8, before its first backward),
    2.0 at m 2, and 6.0 at m 6 and m 10 (PyTorch's rounds of 6 and of 5: warmup (v-1) q + 2(p-1) = 12
    and 11 chunks)."""
    assert 4 * (1 + 3 / 8) == 5.5
    got = {m: in_flight_microbatches("interleaved", 4, m, v=2) for m in (2, 4, 6, 8, 10)}
    assert got == {2: 2.0, 4: 4.0, 6: 6.0, 8: 5.5, 10: 6.0}


def test_in_flight_per_schedule():
    p, m = 4, 16
    assert in_flight_microbatches("gpipe", p, m) == m
    assert in_flight_microbatches("1f1b", p, m) == p
    assert in_flight_microbatches("1f1b", p, 2) == 2
    assert in_flight_microbatches("zb-h1", p, m) == p
    assert in_flight_microbatches("zb-h2", p, m) == 2 * p - 1
    with pytest.raises(ParasimError):
        in_flight_microbatches("dualpipe", p, m)


def test_logits_and_megatron_estimate():
    assert logits_bytes(2048, 2, 51200, 8) == 4 * 2048 * 2 * 51200 / 8
    assert megatron_bytes_per_param() == 18
    assert megatron_bytes_per_param(8, distributed_optimizer=True) == 6 + 12 / 8


def test_megatron_per_layer_constant_for_any_ffn_and_flash_attention():
    """Megatron-LM theoretical_memory_usage: s b h (18 + 4 f / h) / t with SP; FlashAttention keeps
    no s^2 scores, so recompute none with flash equals selective."""
    f = 14336
    sel = activation_bytes_per_layer(S, B, 4096, 32, 8, True, "selective", ffn=f)
    assert sel == pytest.approx(S * B * 4096 / 8 * (18 + 4 * f / 4096), rel=1e-12)
    assert activation_bytes_per_layer(S, B, 4096, 32, 8, True, "none", ffn=f, flash_attention=True) == sel
    assert activation_bytes_per_layer(S, B, 4096, 32, 8, True, "none", ffn=f) > sel
