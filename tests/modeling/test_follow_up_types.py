"""The two follow-up types against their papers: `symmetric_init` (Saponati et al.: BERT's attention with the key
initialised equal to the query) and `no_query` (Karbevski & Mijoski: the query is the hidden state itself)."""

import json

import pytest
import torch

from helpers.corpora import run_args
from helpers.models import bert_like
from helpers.tiny import padded_batch, tiny_config
from symbert import SymBertConfig, SymBertForMaskedLM, attention_class
from symbert.hub_cards.card import implementation_choices
from symbert.tools.symmetry import symmetric_share
from symbert.training.arguments import parse_arguments
from symbert.training.pretrain import pretrain


def layers(model):
    return [layer.attention.self for layer in model.bert.encoder.layer]


def scores(attention, hidden_states):
    query, key, _ = attention.project(hidden_states)
    return query @ key.transpose(-1, -2) * attention.scaling


def test_symmetric_init_starts_with_the_key_equal_to_the_query():
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("symmetric_init"))
    hidden_states = torch.randn(2, 7, 128)
    for attention in layers(model):
        assert torch.equal(attention.key.weight, attention.query.weight)
        assert torch.equal(attention.key.bias, attention.query.bias)
        assert attention.query.weight.std().item() == pytest.approx(0.02, rel=0.05)  # BERT's initialisation
        initial = scores(attention, hidden_states)
        torch.testing.assert_close(initial, initial.transpose(-1, -2), atol=1e-6, rtol=0)
    assert model.num_parameters() == SymBertForMaskedLM(tiny_config("original")).num_parameters()


def test_symmetric_init_is_berts_attention_and_trains_query_and_key_apart():
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("symmetric_init"))
    original = SymBertForMaskedLM(tiny_config("original")).eval()
    original.load_state_dict(model.state_dict())  # same tensors: the same function of the same weights
    input_ids, attention_mask = padded_batch()
    torch.testing.assert_close(
        model.eval()(input_ids, attention_mask=attention_mask).logits,
        original(input_ids, attention_mask=attention_mask).logits,
        atol=0,
        rtol=0,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    optimizer.step()
    attention = layers(model)[0]
    assert not torch.equal(attention.key.weight, attention.query.weight)  # two parameters, not one


def test_symmetric_init_leaves_a_loaded_key_alone(tmp_path):
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("symmetric_init"))
    with torch.no_grad():
        for attention in layers(model):
            attention.key.weight.add_(1.0)
    model.save_pretrained(tmp_path / "trained")
    loaded = SymBertForMaskedLM.from_pretrained(tmp_path / "trained")
    for mine, theirs in zip(layers(loaded), layers(model)):
        assert torch.equal(mine.key.weight, theirs.key.weight)


@pytest.mark.parametrize("scaling, scale", [("paper", 1 / 16), ("standard", 1 / 8)])
def test_no_query_scores_are_the_hidden_state_against_its_keys(scaling, scale):
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("no_query", no_query_scaling=scaling))  # d = 64
    hidden_states = torch.randn(2, 5, 128)
    attention = layers(model)[0]
    assert not hasattr(attention, "query") and attention.scaling == scale
    key = attention.key(hidden_states).view(2, 5, 2, 64).transpose(1, 2)
    query = hidden_states.view(2, 5, 2, 64).transpose(1, 2)
    torch.testing.assert_close(scores(attention, hidden_states), query @ key.transpose(-1, -2) * scale)


def test_no_query_score_forms_give_its_scores():
    torch.manual_seed(0)
    attention = layers(SymBertForMaskedLM(tiny_config("no_query")))[0]
    with torch.no_grad():
        attention.key.bias.zero_()  # the forms leave biases aside
    weights = {name: tensor.detach() for name, tensor in attention.state_dict().items()}
    forms = attention_class("no_query").score_forms(weights, 2)
    hidden_states = torch.randn(1, 6, 128)
    expected = torch.einsum("bih,nhg,bjg->bnij", hidden_states, forms, hidden_states) * attention.scaling
    torch.testing.assert_close(scores(attention, hidden_states), expected, atol=1e-5, rtol=1e-5)
    assert symmetric_share(forms[0].double()) < 0.6  # nothing makes it symmetric


def test_no_query_scaling_is_checked():
    with pytest.raises(ValueError, match="no_query_scaling='half' is not supported; allowed: paper, standard"):
        SymBertConfig(attention_type="no_query", no_query_scaling="half")


def test_from_bert_keeps_berts_key_and_value_for_no_query_and_everything_for_symmetric_init(tmp_path):
    bert = bert_like(tiny_config())
    bert.save_pretrained(tmp_path)
    no_query, new_parameters = SymBertForMaskedLM.from_bert(tmp_path, attention_type="no_query")
    assert new_parameters == []  # BERT's query has no place in it and is dropped
    for mine, berts in zip(layers(no_query), (layer.attention.self for layer in bert.bert.encoder.layer)):
        assert torch.equal(mine.key.weight, berts.key.weight) and torch.equal(mine.value.weight, berts.value.weight)
    symmetric_init, new_parameters = SymBertForMaskedLM.from_bert(tmp_path, attention_type="symmetric_init")
    assert new_parameters == []
    input_ids, attention_mask = padded_batch()
    expected = bert(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(
        symmetric_init.eval()(input_ids, attention_mask=attention_mask).logits, expected, atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("attention_type, factor", [("no_query", 0.3125), ("original", 1.0)])
def test_paper_weight_decay_scales_the_recipes_decay_by_the_types_factor(corpus, tmp_path, attention_type, factor):
    output = tmp_path / attention_type
    extra = ("--attention_type", attention_type, "--max_steps", "1", "--paper_weight_decay", "true")
    pretrain(*parse_arguments(run_args(corpus, output, *extra, "--weight_decay", "0.1")))
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["training_arguments"]["weight_decay"] == pytest.approx(0.1 * factor)
    assert summary["model_arguments"]["paper_weight_decay"] is True


@pytest.mark.parametrize("scaling, text", [("paper", "scaled by 1/(2√d)"), ("standard", "scaled by BERT's 1/√d")])
def test_no_query_card_states_its_scaling(scaling, text):
    choices = implementation_choices(SymBertConfig(attention_type="no_query", no_query_scaling=scaling))
    assert any(text in choice for choice in choices)
    last = choices[-1]
    assert ("1/(2√d)" in last) == (scaling == "paper") and ("1/√d, as in BERT" in last) == (scaling == "standard")
