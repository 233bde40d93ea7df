import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from helpers.models import EXPECTED
from symbert import ATTENTION_TYPES, SymBertConfig, SymBertForMaskedLM, attention_class


@pytest.mark.parametrize("size, attention_type", sorted(EXPECTED))
def test_parameter_count_matches_spec(size, attention_type):
    with torch.device("meta"):
        model = SymBertForMaskedLM(SymBertConfig.from_preset(size, attention_type=attention_type))
    assert model.num_parameters() == EXPECTED[size, attention_type]


@pytest.mark.parametrize("size", ["small", "base"])
def test_original_count_equals_transformers_bert(size):
    config = SymBertConfig.from_preset(size)
    bert_config = BertConfig(
        **{
            k: getattr(config, k)
            for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")
        }
    )
    with torch.device("meta"):
        bert = BertForMaskedLM(bert_config)
    assert bert.num_parameters() == EXPECTED[size, "original"]


@pytest.mark.parametrize("size", ["tiny", "small", "base"])
def test_each_types_parameter_formula_counts_its_module(size):
    for attention_type in ATTENTION_TYPES:
        config = SymBertConfig.from_preset(size, attention_type=attention_type)
        with torch.device("meta"):
            module = attention_class(attention_type)(config)
        assert sum(p.numel() for p in module.parameters()) == attention_class(attention_type).qkv_parameters(config)


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_gqa_count_by_hand(kv_heads):
    h, d, layers = 512, 64, 4  # small
    config = SymBertConfig.from_preset("small", attention_type="gqa", num_key_value_heads=kv_heads)
    with torch.device("meta"):
        count = SymBertForMaskedLM(config).num_parameters()
    per_layer_saving = 3 * (h * h + h) - (h * h + h + 2 * (h * d * kv_heads + d * kv_heads))
    assert count == EXPECTED["small", "original"] - layers * per_layer_saving
    assert (kv_heads == 8) == (count == EXPECTED["small", "original"])
