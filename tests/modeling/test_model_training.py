"""The model under training: gradient checkpointing gives the same gradients, the decoder stays tied to the
embeddings after a vocabulary resize, sparse prediction gives the loss and gradients of the full head, and the full
head's loss reads only the labelled rows on a CPU with the loss and gradients of reading them all."""

from unittest import mock

import torch

from helpers.tiny import VOCAB_SIZE, padded_batch, tiny_config
from symbert import SymBertForMaskedLM
from symbert.modeling_symbert import _rows_to_score


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


def test_decoder_stays_tied_after_resizing_the_vocabulary():
    model = SymBertForMaskedLM(tiny_config("symmetric"))
    model.resize_token_embeddings(VOCAB_SIZE + 13)
    decoder, embeddings = model.cls.predictions.decoder, model.bert.embeddings.word_embeddings
    assert decoder.weight is embeddings.weight and decoder.weight.shape == (VOCAB_SIZE + 13, 128)
    assert decoder.bias is model.cls.predictions.bias and decoder.bias.shape == (VOCAB_SIZE + 13,)
    assert model.config.vocab_size == VOCAB_SIZE + 13
    assert model(torch.tensor([[VOCAB_SIZE + 12]])).logits.shape == (1, 1, VOCAB_SIZE + 13)


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


def test_the_full_heads_loss_scores_only_labelled_rows_with_the_same_loss_and_gradients():
    input_ids, attention_mask = padded_batch(seed=5)
    labels = torch.full_like(input_ids, -100)
    labels[:, 2::5] = input_ids[:, 2::5]
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("mhe_mul")).train()
    scored_rows = []
    cross_entropy = torch.nn.functional.cross_entropy

    def recording(logits, *args, **kwargs):
        scored_rows.append(logits.shape[0])
        return cross_entropy(logits, *args, **kwargs)

    for num_items in (None, 40):
        kwargs = {} if num_items is None else {"num_items_in_batch": num_items}
        torch.manual_seed(1)  # the same dropout masks in both passes
        with mock.patch.object(torch.nn.functional, "cross_entropy", recording):
            output = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
        model.zero_grad()
        output.loss.backward()
        labelled_only = {n: p.grad.clone() for n, p in model.named_parameters()}
        torch.manual_seed(1)
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        reduction = "mean" if num_items is None else "sum"
        every_row = cross_entropy(logits.view(-1, VOCAB_SIZE), labels.view(-1), reduction=reduction)
        every_row = every_row if num_items is None else every_row / num_items
        model.zero_grad()
        every_row.backward()
        assert scored_rows[-1] == (labels != -100).sum() < labels.numel()
        torch.testing.assert_close(output.loss, every_row, atol=1e-6, rtol=0)
        for name, param in model.named_parameters():
            torch.testing.assert_close(labelled_only[name], param.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_off_the_cpu_the_loss_reads_every_row():
    """Selecting rows has a data-dependent shape: a host sync on an accelerator (the meta device stands in for one)."""
    logits, labels = torch.zeros(6, VOCAB_SIZE, device="meta"), torch.zeros(6, dtype=torch.long, device="meta")
    assert _rows_to_score(logits, labels) == (logits, labels)
