import json

import pytest
from transformers import AutoConfig, BertConfig

from symbert import ATTENTION_TYPES, SIZE_PRESETS, SymBertConfig


def test_defaults_are_berts():
    ours, bert = SymBertConfig().to_dict(), BertConfig().to_dict()
    for field in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
        "pad_token_id",
        "use_cache",
        "classifier_dropout",
        "is_decoder",
        "add_cross_attention",
        "bos_token_id",
        "eos_token_id",
        "tie_word_embeddings",
    ):
        assert ours[field] == bert[field], field
    assert ours["model_type"] == "symbert"
    assert ours["attention_type"] == "original" and ours["pairwise_init"] == "normal"


@pytest.mark.parametrize(
    "size, shape",
    [
        ("tiny", (2, 2, 128, 512)),
        ("mini", (4, 4, 256, 1024)),
        ("small", (4, 8, 512, 2048)),
        ("base", (12, 12, 768, 3072)),
    ],
)
def test_size_presets(size, shape):
    config = SymBertConfig.from_preset(size, attention_type="pairwise")
    assert (config.num_hidden_layers, config.num_attention_heads, config.hidden_size, config.intermediate_size) == shape
    assert config.attention_type == "pairwise"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"attention_type": "linear"},
            "attention_type='linear'.*allowed: original, symmetric, pairwise, shared, mhe_add, mhe_mul",
        ),
        ({"pairwise_init": "zeros"}, "pairwise_init='zeros'.*allowed: normal, identity"),
        ({"hidden_size": 100, "num_attention_heads": 3}, "hidden_size=100 is not divisible by num_attention_heads=3"),
        ({"hidden_size": 0}, "hidden_size=0 .*positive integer"),
        ({"num_hidden_layers": -1}, "num_hidden_layers=-1 .*positive integer"),
        ({"num_attention_heads": 0}, "num_attention_heads=0 .*positive integer"),
        ({"intermediate_size": 2.5}, "intermediate_size=2.5 .*positive integer"),
        ({"vocab_size": 0}, "vocab_size=0 .*positive integer"),
        ({"max_position_embeddings": 0}, "max_position_embeddings=0 .*positive integer"),
        ({"hidden_dropout_prob": 1.0}, r"hidden_dropout_prob=1.0 .*\[0, 1\)"),
        ({"attention_probs_dropout_prob": -0.1}, r"attention_probs_dropout_prob=-0.1 .*\[0, 1\)"),
        ({"classifier_dropout": 1.5}, r"classifier_dropout=1.5 .*\[0, 1\)"),
        ({"layer_norm_eps": 0}, "layer_norm_eps=0 .*positive number"),
        ({"hidden_act": "swishy"}, "hidden_act='swishy' is not supported"),
        ({"is_decoder": True}, "SymBERT is an encoder"),
    ],
)
def test_invalid_values_raise_naming_value_and_allowed(overrides, message):
    with pytest.raises(ValueError, match=message):
        SymBertConfig(**overrides)


def test_unknown_preset():
    with pytest.raises(ValueError, match="Unknown SymBERT size preset 'huge'; allowed: tiny, mini, small, base"):
        SymBertConfig.from_preset("huge")


def test_round_trip(tmp_path):
    config = SymBertConfig.from_preset("mini", attention_type="mhe_mul", pairwise_init="identity")
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, SymBertConfig)
    without_path = lambda c: {k: v for k, v in c.to_dict().items() if k != "_name_or_path"}  # noqa: E731
    assert without_path(loaded) == without_path(config)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("attention_type", "bogus", "attention_type='bogus'"),
        ("hidden_dropout_prob", 2.0, "hidden_dropout_prob=2.0"),
        ("num_attention_heads", 5, "hidden_size=128 is not divisible by num_attention_heads=5"),
    ],
)
def test_bad_config_json_fails_on_load(tmp_path, field, value, message):
    SymBertConfig.from_preset("tiny").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(tmp_path)


def test_every_attention_type_accepted():
    for attention_type in ATTENTION_TYPES:
        assert SymBertConfig(attention_type=attention_type).attention_type == attention_type
    assert set(SIZE_PRESETS) >= {"tiny", "mini", "small", "base"}
