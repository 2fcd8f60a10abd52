"""Model presets carry the published shapes; fields can be overridden; vocabulary padded as Megatron-LM."""

import pytest

from simulator.cost.model_presets import ModelSpec, get_model, model_names
from simulator.errors import ParasimError


# published parameter counts (billions): Llama 3 Herd Table 3 / model cards; Llama 2 paper Table 1
# model cards (6.74, 13.0, 69.0); GPT-3 Table 2.1 (125M, 350M, 760M, 1.3B, 2.7B, 6.7B, 13B, 175B)
@pytest.mark.parametrize("name, billions", [
    ("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85), ("llama3.1-405b", 405.85),
    ("llama2-7b", 6.74), ("llama2-13b", 13.02), ("llama2-70b", 68.98),
    ("gpt3-125m", 0.125), ("gpt3-350m", 0.35), ("gpt3-760m", 0.76), ("gpt3-1.3b", 1.3), ("gpt3-2.7b", 2.7),
    ("gpt3-6.7b", 6.7), ("gpt3-13b", 13.0), ("gpt3-175b", 175.0)])
def test_preset_parameter_counts_match_the_papers(name, billions):
    assert get_model(name).params() / 1e9 == pytest.approx(billions, rel=0.025)


def test_llama3_shapes_with_megatron_names():
    m = get_model("llama3-405b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length) == (126, 16384, 128, 8192)
    assert (m.ffn_hidden_size, m.num_query_groups, m.swiglu, m.untie_embeddings_and_output_weights) == (
        53248, 8, True, True)
    assert get_model("llama3-8b").ffn_hidden == 14336 and get_model("llama3-70b").ffn_hidden == 28672
    assert m.vocab == 128256


def test_vocab_padding_as_megatron():
    """Megatron-LM vocab_size_with_padding: round up to a multiple of 128 x tp."""
    m = get_model("llama3-8b")
    assert m.padded_vocab(1) == 128256          # 1002 x 128 already
    assert m.padded_vocab(8) == 129024          # 126 x 1024
    assert get_model("gpt3-13b").padded_vocab(1) == 50304
    assert get_model("gpt3-13b").padded_vocab(8) == 51200
    assert get_model("llama3-8b", vocab_divisible_by=1).padded_vocab(3) == 128256


def test_any_field_overridable_by_field_or_megatron_name():
    m = get_model("llama-70b", seq=8192)
    assert m.seq == 8192 and m.kv_heads == 8
    assert get_model("llama3-8b", seq_length=4096, untie_embeddings_and_output_weights=False).tied_embeddings
    gpt = get_model("gpt3-2.7b", hidden_size=4096)
    assert gpt.ffn_hidden == 4 * 4096 and gpt.kv_heads == gpt.heads   # GPT shape follows h and a
    assert get_model("llama3-8b", hidden=8192).ffn_hidden == 14336     # explicit f kept


def test_overrides_refuse_unknown_fields_with_a_suggestion():
    with pytest.raises(ParasimError, match="did you mean 'num_query_groups'"):
        get_model("llama3-8b", num_query_group=4)
    with pytest.raises(ParasimError, match="did you mean 'llama3-8b'"):
        get_model("llama3-8")
    with pytest.raises(ParasimError, match="kv_heads 5 must divide heads 32"):
        get_model("llama3-8b", kv_heads=5)


def test_custom_moe_model_counts_every_expert_and_the_active_ones():
    dense = ModelSpec("d", 2, 256, 4, 128, 1000, gated_mlp=True, ffn_hidden=512, biases=False)
    moe = dense.with_overrides(num_experts=8, moe_router_topk=2)
    expert = 3 * 256 * 512
    assert moe.params() - dense.params() == 2 * (7 * expert + 256 * 8)
    assert moe.active_params() - dense.params() == 2 * (expert + 256 * 8)


def test_every_preset_is_valid_and_named_as_listed():
    for name in model_names():
        assert get_model(name).name == name
