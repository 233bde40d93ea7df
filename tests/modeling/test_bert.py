"""`original` is BERT; every variant can start from a BERT checkpoint."""

import pytest
import torch

from helpers.models import bert_like
from helpers.tiny import padded_batch, tiny_config
from symbert import SymBertForMaskedLM, SymBertForSequenceClassification


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_original_with_bert_weights_gives_berts_logits(implementation):
    config = tiny_config("original", attn_implementation=implementation)
    bert = bert_like(config)
    bert.set_attn_implementation(implementation)
    with torch.no_grad():  # make the decoder bias non-trivial so its tying is tested too
        bert.cls.predictions.bias.normal_()
    model = SymBertForMaskedLM(config).eval()
    model.load_state_dict(bert.state_dict())
    input_ids, attention_mask = padded_batch()
    token_type_ids = torch.randint(0, 2, input_ids.shape)
    expected = bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
    actual = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
    assert (actual - expected).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "attention_type, new",
    [
        ("original", set()),
        ("symmetric", set()),
        ("pairwise", {"attention.self.pairwise"}),
        (
            "shared",
            {
                "attention.self.shared.weight",
                "attention.self.shared.bias",
                "attention.self.scale_q",
                "attention.self.scale_k",
                "attention.self.scale_v",
            },
        ),
        (
            "mhe_add",
            {f"attention.self.{p}.{t}" for p in ("query", "key", "value") for t in ("weight", "bias")}
            | {"attention.self.head_embeddings"},
        ),
    ],
)
def test_from_bert_copies_shared_tensors_and_reports_new_ones(tmp_path, attention_type, new):
    bert = bert_like(tiny_config())
    bert.save_pretrained(tmp_path)
    model, new_parameters = SymBertForMaskedLM.from_bert(tmp_path, attention_type=attention_type)
    assert model.config.attention_type == attention_type
    expected_new = sorted(f"bert.encoder.layer.{i}.{name}" for i in range(2) for name in new)
    assert new_parameters == expected_new
    bert_tensors = bert.state_dict()
    for name, tensor in model.state_dict().items():
        if name not in new_parameters and name in bert_tensors:
            assert torch.equal(tensor, bert_tensors[name]), name
    if attention_type == "pairwise":
        assert model.bert.encoder.layer[0].attention.self.pairwise.std() > 0.5  # initialised as usual, N(0, 1)
    if attention_type == "shared":
        assert torch.equal(model.bert.encoder.layer[1].attention.self.scale_k, torch.ones(128))


def test_from_bert_for_a_task_head(tmp_path):
    bert_like(tiny_config()).save_pretrained(tmp_path)
    model, new_parameters = SymBertForSequenceClassification.from_bert(
        tmp_path, attention_type="symmetric", num_labels=3
    )
    assert model.classifier.out_features == 3
    assert new_parameters == [
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
        "classifier.bias",
        "classifier.weight",
    ]


def test_gqa_with_as_many_key_value_heads_as_heads_is_original():
    input_ids, attention_mask = padded_batch()
    torch.manual_seed(0)
    original = SymBertForMaskedLM(tiny_config("original")).eval()
    gqa = SymBertForMaskedLM(tiny_config("gqa", num_key_value_heads=2)).eval()
    gqa.load_state_dict(original.state_dict())  # same names and shapes
    for implementation in ("eager", "sdpa"):
        original.set_attn_implementation(implementation)
        gqa.set_attn_implementation(implementation)
        expected = original(input_ids, attention_mask=attention_mask).logits
        assert torch.equal(gqa(input_ids, attention_mask=attention_mask).logits, expected)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_gqa_from_bert_with_every_head_gives_berts_logits(tmp_path, implementation):
    bert = bert_like(tiny_config())
    bert.save_pretrained(tmp_path)
    model, new_parameters = SymBertForMaskedLM.from_bert(
        tmp_path, attention_type="gqa", num_key_value_heads=2, attn_implementation=implementation
    )
    assert new_parameters == [] and model.converted_from_bert == []
    input_ids, attention_mask = padded_batch()
    expected = bert(input_ids, attention_mask=attention_mask).logits
    assert (model.eval()(input_ids, attention_mask=attention_mask).logits - expected).abs().max() <= 1e-5


def test_gqa_from_bert_mean_pools_each_groups_key_and_value_heads(tmp_path):
    config = tiny_config(num_attention_heads=4)  # d = 32
    bert = bert_like(config)
    bert.save_pretrained(tmp_path)
    model, new_parameters = SymBertForMaskedLM.from_bert(tmp_path, attention_type="gqa", num_key_value_heads=2)
    assert new_parameters == []
    assert model.converted_from_bert == sorted(
        f"bert.encoder.layer.{i}.attention.self.{p}.{t}"
        for i in range(2)
        for p in ("key", "value")
        for t in ("weight", "bias")
    )
    for layer, bert_layer in zip(model.bert.encoder.layer, bert.bert.encoder.layer):
        for name in ("key", "value"):
            mine, berts = getattr(layer.attention.self, name), getattr(bert_layer.attention.self, name)
            # heads 0, 1 -> key/value head 0; heads 2, 3 -> 1
            heads = berts.weight.view(4, 32, 128)
            assert torch.equal(mine.weight[:32], (heads[0] + heads[1]) / 2)
            assert torch.equal(mine.weight[32:], (heads[2] + heads[3]) / 2)
            assert torch.equal(mine.bias, berts.bias.view(2, 2, 32).mean(1).flatten())
        assert torch.equal(layer.attention.self.query.weight, bert_layer.attention.self.query.weight)
