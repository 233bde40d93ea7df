import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from symbert import SymBertConfig, SymBertForMaskedLM

# The spec's table (the paper's Table 2 for original / symmetric / pairwise).
EXPECTED = {
    ("small", "original"): 28_795_194,
    ("small", "symmetric"): 27_744_570,
    ("small", "pairwise"): 27_875_642,
    ("small", "shared"): 26_700_090,
    ("small", "mhe_add"): 26_043_450,
    ("small", "mhe_mul"): 26_043_450,
    ("base", "original"): 109_514_298,
    ("base", "symmetric"): 102_427_194,
    ("base", "pairwise"): 103_017_018,
    ("base", "shared"): 95_367_738,
    ("base", "mhe_add"): 90_052_410,
    ("base", "mhe_mul"): 90_052_410,
}


@pytest.mark.parametrize("size, attention_type", sorted(EXPECTED))
def test_parameter_count_matches_spec(size, attention_type):
    with torch.device("meta"):
        model = SymBertForMaskedLM(SymBertConfig.from_preset(size, attention_type=attention_type))
    assert model.num_parameters() == EXPECTED[size, attention_type]


@pytest.mark.parametrize("size", ["small", "base"])
def test_original_count_equals_transformers_bert(size):
    config = SymBertConfig.from_preset(size)
    bert_config = BertConfig(**{k: getattr(config, k) for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")})
    with torch.device("meta"):
        bert = BertForMaskedLM(bert_config)
    assert bert.num_parameters() == EXPECTED[size, "original"]
