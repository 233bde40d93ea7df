"""`pad_vocab_size_multiple`: the word embeddings and the MLM decoder get padding rows (aligned GPU matrix products),
which no id reaches and no logit predicts; the same weights without the padding give the same loss and logits."""

import pytest
import torch

from helpers.tiny import VOCAB_SIZE, padded_batch, tiny_config
from symbert import SymBertConfig, SymBertForMaskedLM
from symbert.modeling_symbert import VOCABULARY_TENSORS

MULTIPLE = 64


def padded_and_plain(attention_type="original", **overrides):
    """A padded model (padding rows and their bias made large, so a wrong path would pick them) and the same
    weights without padding."""
    torch.manual_seed(0)
    padded = SymBertForMaskedLM(tiny_config(attention_type, pad_vocab_size_multiple=MULTIPLE, **overrides))
    with torch.no_grad():
        padded.cls.predictions.bias[VOCAB_SIZE:] = 1e4
        padded.bert.embeddings.word_embeddings.weight[VOCAB_SIZE:] = 1.0
    plain = SymBertForMaskedLM(tiny_config(attention_type, **overrides))
    state = {name: t[:VOCAB_SIZE] if name in VOCABULARY_TENSORS else t for name, t in padded.state_dict().items()}
    plain.load_state_dict(state, strict=True)
    return padded.eval(), plain.eval()


def test_rows_are_padded_and_the_config_records_it():
    config = tiny_config(pad_vocab_size_multiple=MULTIPLE)
    assert VOCAB_SIZE % MULTIPLE and config.padded_vocab_size == -(-VOCAB_SIZE // MULTIPLE) * MULTIPLE
    assert config.vocab_size == VOCAB_SIZE and config.to_dict()["pad_vocab_size_multiple"] == MULTIPLE
    assert SymBertConfig(vocab_size=30522, pad_vocab_size_multiple=64).padded_vocab_size == 30528
    assert SymBertConfig(vocab_size=30522).padded_vocab_size == 30522  # converted models: exactly BERT's
    model = SymBertForMaskedLM(config)
    rows = config.padded_vocab_size
    assert model.bert.embeddings.word_embeddings.weight.shape[0] == rows
    assert model.cls.predictions.decoder.weight.shape[0] == model.cls.predictions.bias.shape[0] == rows
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    with pytest.raises(ValueError, match="pad_vocab_size_multiple=0 is invalid"):
        tiny_config(pad_vocab_size_multiple=0)


@pytest.mark.parametrize("sparse", [False, True])
def test_loss_logits_and_gradients_equal_the_unpadded_model(sparse):
    padded, plain = padded_and_plain(sparse_prediction=sparse)
    input_ids, attention_mask = padded_batch()
    labels = torch.where(attention_mask.bool(), input_ids, -100)
    outputs = []
    for model in (padded, plain):
        output = model(input_ids, attention_mask=attention_mask, labels=labels)
        output.loss.backward()
        outputs.append(output)
    assert padded.cls.predictions.decoder.out_features > VOCAB_SIZE
    assert outputs[0].logits.shape == outputs[1].logits.shape and outputs[0].logits.shape[-1] == VOCAB_SIZE
    torch.testing.assert_close(outputs[0].logits, outputs[1].logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(outputs[0].loss, outputs[1].loss, atol=1e-6, rtol=1e-6)
    plain_grads = dict(plain.named_parameters())
    for name, parameter in padded.named_parameters():
        grad, reference = parameter.grad, plain_grads[name].grad
        if name in VOCABULARY_TENSORS:  # the padding rows get no gradient
            assert torch.count_nonzero(grad[VOCAB_SIZE:]) == 0
            grad = grad[:VOCAB_SIZE]
        torch.testing.assert_close(grad, reference, atol=1e-6, rtol=1e-5, msg=name)


def test_padding_rows_never_win_the_argmax():
    padded, _ = padded_and_plain()
    input_ids, attention_mask = padded_batch()
    logits = padded(input_ids, attention_mask=attention_mask).logits
    assert logits.shape[-1] == VOCAB_SIZE and torch.isfinite(logits).all()
    inside = padded.cls(padded.bert(input_ids, attention_mask=attention_mask).last_hidden_state)
    assert torch.isneginf(inside[..., VOCAB_SIZE:]).all()  # 1e4 bias or not
    assert (inside.argmax(-1) < VOCAB_SIZE).all()


def test_ids_past_vocab_size_are_refused():
    padded, _ = padded_and_plain()
    with pytest.raises(ValueError, match=rf"input_ids contains {VOCAB_SIZE}, outside \[0, {VOCAB_SIZE - 1}\]"):
        padded(torch.tensor([[1, VOCAB_SIZE]]))
    with pytest.raises(ValueError, match=rf"labels contains {VOCAB_SIZE}; allowed: \[0, {VOCAB_SIZE - 1}\]"):
        padded(torch.tensor([[1, 2]]), labels=torch.tensor([[1, VOCAB_SIZE]]))


def test_save_load_round_trip_and_bert_export(tmp_path):
    padded, plain = padded_and_plain("gqa")
    padded.save_pretrained(tmp_path)
    loaded = SymBertForMaskedLM.from_pretrained(tmp_path).eval()
    assert loaded.config.pad_vocab_size_multiple == MULTIPLE
    input_ids, attention_mask = padded_batch()
    expected = plain(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(loaded(input_ids, attention_mask=attention_mask).logits, expected, atol=0, rtol=0)
    bert = padded.to_bert()  # BERT's own vocabulary: vocab_size rows
    assert bert.bert.embeddings.word_embeddings.weight.shape[0] == VOCAB_SIZE
    torch.testing.assert_close(bert(input_ids, attention_mask=attention_mask).logits, expected, atol=1e-6, rtol=1e-6)
