"""`original` is BERT; every variant can start from a BERT checkpoint."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from symbert import SymBertForMaskedLM, SymBertForSequenceClassification

from conftest import padded_batch, tiny_config


def bert_like(config):
    names = (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "hidden_dropout_prob", "attention_probs_dropout_prob",
    )  # fmt: skip
    torch.manual_seed(3)
    return BertForMaskedLM(BertConfig(**{name: getattr(config, name) for name in names})).eval()


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
        ("shared", {"attention.self.shared.weight", "attention.self.shared.bias", "attention.self.scale_q", "attention.self.scale_k", "attention.self.scale_v"}),
        ("mhe_add", {f"attention.self.{p}.{t}" for p in ("query", "key", "value") for t in ("weight", "bias")} | {"attention.self.head_embeddings"}),
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
    model, new_parameters = SymBertForSequenceClassification.from_bert(tmp_path, attention_type="symmetric", num_labels=3)
    assert model.classifier.out_features == 3
    assert new_parameters == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias", "classifier.weight"]
