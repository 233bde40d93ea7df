"""Malformed model inputs raise a ValueError naming the shapes (checked from shapes only, never from values)."""

import pytest
import torch
from transformers import BertConfig, BertModel

from helpers.tiny import VOCAB_SIZE, padded_batch, tiny_config
from symbert import SymBertForMaskedLM, SymBertForMultipleChoice, SymBertForSequenceClassification, SymBertModel
from symbert.modeling_symbert import TRANSFORMERS_V5

IDS = torch.randint(1, VOCAB_SIZE, (2, 5), generator=torch.Generator().manual_seed(0))
EMBEDS = torch.randn(2, 5, 128, generator=torch.Generator().manual_seed(0))

MALFORMED = {
    "empty batch": (dict(input_ids=IDS[:0]), r"input_ids has shape \[0, 5\]: an empty batch or sequence"),
    "empty sequence": (dict(input_ids=IDS[:, :0]), r"input_ids has shape \[2, 0\]: an empty batch or sequence"),
    "empty embeds": (dict(inputs_embeds=EMBEDS[:0]), r"inputs_embeds has shape \[0, 5\]: an empty batch or sequence"),
    "1-D input_ids": (dict(input_ids=IDS[0]), r"input_ids has shape \[5\]; expected \[batch, sequence\]"),
    "3-D input_ids": (dict(input_ids=IDS[None]), r"input_ids has shape \[1, 2, 5\]; expected \[batch, sequence\]"),
    "list input_ids": (
        dict(input_ids=IDS.tolist()),
        r"input_ids must be a torch.Tensor of shape \[batch, sequence\], not a list",
    ),
    "2-D inputs_embeds": (
        dict(inputs_embeds=EMBEDS[0]),
        r"inputs_embeds has shape \[5, 128\]; expected \[batch, sequence, hidden_size=128\]",
    ),
    "inputs_embeds width": (
        dict(inputs_embeds=EMBEDS[..., :64]),
        r"inputs_embeds has shape \[2, 5, 64\]; expected \[batch, sequence, 128\]",
    ),
    "shorter attention_mask": (
        dict(input_ids=IDS, attention_mask=torch.ones(2, 4)),
        r"attention_mask has shape \[2, 4\], input_ids \[2, 5\]; attention_mask must have the same \[batch, sequence\] shape",
    ),
    "1-D attention_mask": (
        dict(input_ids=IDS, attention_mask=torch.ones(5)),
        r"attention_mask has shape \[5\], input_ids \[2, 5\]",
    ),
    "list attention_mask": (
        dict(input_ids=IDS, attention_mask=[[1] * 5] * 2),
        r"attention_mask must be a torch.Tensor of the shape of input_ids \[2, 5\], not a list",
    ),
    "4-D attention_mask of other length": (
        dict(input_ids=IDS, attention_mask=torch.ones(2, 1, 4, 4)),
        r"attention_mask has shape \[2, 1, 4, 4\], input_ids \[2, 5\]",
    ),
    "attention_mask with inputs_embeds": (
        dict(inputs_embeds=EMBEDS, attention_mask=torch.ones(3, 5)),
        r"attention_mask has shape \[3, 5\], inputs_embeds \[2, 5\]",
    ),
    "token_type_ids": (
        dict(input_ids=IDS, token_type_ids=torch.zeros(2, 4, dtype=torch.long)),
        r"token_type_ids has shape \[2, 4\], input_ids \[2, 5\]",
    ),
    "token_type_ids with inputs_embeds": (
        dict(inputs_embeds=EMBEDS, token_type_ids=torch.zeros(1, 5, dtype=torch.long)),
        r"token_type_ids has shape \[1, 5\], inputs_embeds \[2, 5\]",
    ),
    "position_ids": (
        dict(input_ids=IDS, position_ids=torch.arange(4)[None]),
        r"position_ids has shape \[1, 4\], input_ids \[2, 5\]; position_ids must have the same \[batch, sequence\] shape \(or \[1, sequence\]\)",
    ),
    "position_ids with inputs_embeds": (
        dict(inputs_embeds=EMBEDS, position_ids=torch.arange(5)),
        r"position_ids has shape \[5\], inputs_embeds \[2, 5\]",
    ),
}


@pytest.mark.parametrize("model_class", [SymBertModel, SymBertForMaskedLM])
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_inputs_name_the_shapes(model_class, case):
    inputs, message = MALFORMED[case]
    model = model_class(tiny_config("pairwise"))
    with pytest.raises(ValueError, match=message):
        model(**inputs)


@pytest.mark.parametrize(
    "inputs, message",
    [
        (dict(input_ids=IDS), r"input_ids has shape \[2, 5\]; expected \[batch, choices, sequence\]"),
        (
            dict(input_ids=IDS[None].tolist()),
            r"input_ids must be a torch.Tensor of shape \[batch, choices, sequence\], not a list",
        ),
        (
            dict(inputs_embeds=EMBEDS),
            r"inputs_embeds has shape \[2, 5, 128\]; expected \[batch, choices, sequence, hidden_size\]",
        ),
        (
            dict(input_ids=IDS[None], attention_mask=torch.ones(1, 2, 4)),
            r"attention_mask has shape \[2, 4\], input_ids \[2, 5\]",
        ),
    ],
)
def test_malformed_multiple_choice_inputs(inputs, message):
    with pytest.raises(ValueError, match=message):
        SymBertForMultipleChoice(tiny_config())(**inputs)


def test_exclusive_inputs_raise_berts_error():
    message = "You must specify exactly one of input_ids or inputs_embeds"
    models = [SymBertModel(tiny_config())]
    if TRANSFORMERS_V5:  # transformers 4's BERT words it in two other ways
        models.append(
            BertModel(BertConfig(vocab_size=VOCAB_SIZE, hidden_size=128, num_hidden_layers=1, num_attention_heads=2))
        )
    for model in models:
        with pytest.raises(ValueError, match=message):
            model(input_ids=IDS, inputs_embeds=EMBEDS)
        with pytest.raises(ValueError, match=message):
            model()


def test_well_formed_variants_are_accepted():
    model = SymBertModel(tiny_config("symmetric")).eval()
    input_ids, attention_mask = padded_batch()
    expected = model(input_ids, attention_mask=attention_mask).last_hidden_state
    length = input_ids.shape[1]
    shared_positions = model(input_ids, attention_mask=attention_mask, position_ids=torch.arange(length)[None])
    torch.testing.assert_close(shared_positions.last_hidden_state, expected)  # [1, sequence] positions, as in BERT
    four_d = attention_mask[:, None, None, :].expand(-1, 1, length, -1).bool()  # a ready-made 4-D mask, as in BERT
    if TRANSFORMERS_V5:  # transformers 4's mask helpers take [batch, sequence] masks only
        torch.testing.assert_close(model(input_ids, attention_mask=four_d).last_hidden_state, expected)
    else:
        with pytest.raises(ValueError, match=rf"attention_mask has shape \[3, 1, {length}, {length}\]"):
            model(input_ids, attention_mask=four_d)
    assert model(torch.tensor([[7]])).last_hidden_state.shape == (1, 1, 128)


@pytest.mark.parametrize("bad_id, shown", [(VOCAB_SIZE, str(VOCAB_SIZE)), (-1, "-1")])
def test_input_ids_outside_the_vocabulary(bad_id, shown):
    model = SymBertForMaskedLM(tiny_config())
    with pytest.raises(
        ValueError, match=rf"input_ids contains {shown}, outside \[0, {VOCAB_SIZE - 1}\] \(vocab_size={VOCAB_SIZE}\)"
    ):
        model(torch.tensor([[1, 2, bad_id]]))


def test_token_type_ids_outside_range():
    model = SymBertForSequenceClassification(tiny_config())
    with pytest.raises(ValueError, match=r"token_type_ids contains 2, outside \[0, 1\] \(type_vocab_size=2\)"):
        model(torch.tensor([[1, 2, 3]]), token_type_ids=torch.tensor([[0, 1, 2]]))


def test_sequence_longer_than_max_positions():
    model = SymBertForMaskedLM(tiny_config(max_position_embeddings=16))
    with pytest.raises(ValueError, match="Sequence length 17 exceeds max_position_embeddings=16"):
        model(torch.ones(1, 17, dtype=torch.long))
    assert model(torch.ones(1, 16, dtype=torch.long)).logits.shape == (1, 16, VOCAB_SIZE)


def test_input_ids_and_inputs_embeds_are_exclusive():
    model = SymBertForMaskedLM(tiny_config())
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(torch.tensor([[1, 2]]), inputs_embeds=torch.zeros(1, 2, 128))


def test_inputs_embeds_match_input_ids():
    model = SymBertForMaskedLM(tiny_config("mhe_mul")).eval()
    input_ids, attention_mask = padded_batch()
    embeds = model.bert.embeddings.word_embeddings(input_ids)
    torch.testing.assert_close(
        model(inputs_embeds=embeds, attention_mask=attention_mask).logits,
        model(input_ids, attention_mask=attention_mask).logits,
    )
