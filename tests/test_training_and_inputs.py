"""Gradient checkpointing, the fill-mask pipeline, and clear errors on bad input."""

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import AutoModelForMaskedLM, PreTrainedTokenizerFast, pipeline

from conftest import VOCAB_SIZE, padded_batch, tiny_config
from symbert import SymBertForMaskedLM, SymBertForSequenceClassification


def gradients(model, input_ids, attention_mask):
    model.zero_grad()
    model(input_ids, attention_mask=attention_mask, labels=input_ids).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_gives_the_same_gradients(attention_type):
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config(attention_type)).train()
    input_ids, attention_mask = padded_batch()
    plain = gradients(model, input_ids, attention_mask)
    # transformers >= 5.23 renames gradient_checkpointing_enable; both set GradientCheckpointingLayer's switch
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    assert all(layer.gradient_checkpointing for layer in model.bert.encoder.layer)
    checkpointed = gradients(model, input_ids, attention_mask)
    assert plain.keys() == checkpointed.keys() and len(plain) == len(list(model.parameters()))
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-5, rtol=0, msg=name)


def word_piece_tokenizer(words):
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def test_fill_mask_pipeline_from_a_saved_folder(tmp_path):
    words = "the cat sat on a mat dog ran in park".split()
    tokenizer = word_piece_tokenizer(words)
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("pairwise", vocab_size=len(tokenizer)))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    fill_mask = pipeline("fill-mask", model=str(tmp_path), tokenizer=str(tmp_path), trust_remote_code=True, top_k=3)
    predictions = fill_mask("the cat sat on the [MASK] .")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    encoded = tokenizer("the cat sat on the [MASK] .", return_tensors="pt")
    with torch.no_grad():
        logits = reloaded(**encoded).logits[0, encoded.input_ids[0].tolist().index(tokenizer.mask_token_id)]
    top3 = logits.softmax(-1).topk(3)
    assert [p["token"] for p in predictions] == top3.indices.tolist()
    assert [p["score"] for p in predictions] == pytest.approx(top3.values.tolist(), abs=1e-6)
    from_objects = pipeline("fill-mask", model=reloaded, tokenizer=tokenizer, top_k=3)
    assert from_objects("the cat sat on the [MASK] .") == predictions


def test_decoder_stays_tied_after_resizing_the_vocabulary():
    model = SymBertForMaskedLM(tiny_config("symmetric"))
    model.resize_token_embeddings(VOCAB_SIZE + 13)
    decoder, embeddings = model.cls.predictions.decoder, model.bert.embeddings.word_embeddings
    assert decoder.weight is embeddings.weight and decoder.weight.shape == (VOCAB_SIZE + 13, 128)
    assert decoder.bias is model.cls.predictions.bias and decoder.bias.shape == (VOCAB_SIZE + 13,)
    assert model.config.vocab_size == VOCAB_SIZE + 13
    assert model(torch.tensor([[VOCAB_SIZE + 12]])).logits.shape == (1, 1, VOCAB_SIZE + 13)


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


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_weights_file_is_named(tmp_path, damage):
    SymBertForMaskedLM(tiny_config()).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        weights.write_bytes(b"not a safetensors file")
    with pytest.raises(OSError, match=rf"Cannot read {weights}: the file is truncated or corrupt"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)
    with pytest.raises(OSError, match=rf"Cannot read {weights}"):
        AutoModelForMaskedLM.from_pretrained(tmp_path, trust_remote_code=True)


def test_sparse_prediction_gives_the_same_loss_and_gradients():
    input_ids, attention_mask = padded_batch(seed=3)
    labels = torch.full_like(input_ids, -100)
    labels[:, 1::4] = input_ids[:, 1::4]
    results = []
    for sparse in (False, True):
        torch.manual_seed(0)
        model = SymBertForMaskedLM(tiny_config("pairwise", sparse_prediction=sparse))
        output = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        output.loss.backward()
        results.append((output, {n: p.grad for n, p in model.named_parameters()}))
        assert model(input_ids=input_ids).logits.shape == (*input_ids.shape, VOCAB_SIZE)  # no labels: full logits
    (dense, dense_grads), (sparse, sparse_grads) = results
    labelled = labels != -100
    assert sparse.logits.shape == (labelled.sum().item(), VOCAB_SIZE)
    torch.testing.assert_close(sparse.logits, dense.logits[labelled], atol=1e-5, rtol=0)
    torch.testing.assert_close(sparse.loss, dense.loss, atol=1e-6, rtol=0)
    for name, grad in dense_grads.items():
        torch.testing.assert_close(sparse_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)
