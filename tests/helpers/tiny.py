"""Tiny models, configs and batches the tests build: the test config, BERT-like teachers and classifiers, a padded
batch."""

import json

import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from symbert import SymBertConfig

VOCAB_SIZE = 99


MAX_POSITIONS = 64


def tiny_config(attention_type="original", **overrides):
    """The `tiny` preset with a small vocabulary and no dropout, so outputs are deterministic."""
    settings = dict(
        attention_type=attention_type,
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return SymBertConfig.from_preset("tiny", **{**settings, **overrides})


def bert_config(**overrides):
    """transformers' BERT of the tiny preset's shape, the reference for transformers' own behaviour."""
    settings = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=MAX_POSITIONS,
    )
    return BertConfig(**{**settings, **overrides})


def padded_batch(seed=0, batch=3, length=11):
    """Random ids with right padding of different lengths (row 0 unpadded)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB_SIZE, (batch, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch):
        attention_mask[row, length - 2 * row :] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


# the tiny BERT the distillation and transfer tests use as a teacher: 2 layers, 2 heads of 64
TINY_BERT = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    initializer_range=0.1,
)


def bert_teacher(folder, tokenizer, head=False, seed=3, **overrides):
    """A tiny random BERT (TINY_BERT) on `tokenizer`'s vocabulary, saved with it in `folder`."""
    torch.manual_seed(seed)
    config = BertConfig(**{"vocab_size": len(tokenizer), **TINY_BERT, **overrides})
    model = BertForMaskedLM(config) if head else BertModel(config, add_pooling_layer=False)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def two_texts():
    """A batch of two texts of the tiny tokenizer ([CLS]=2 ... [SEP]=3), the second padded (0), with one masked
    position (the student's MLM loss, which distillation keeps in the graph at weight 0, is over one token)."""
    input_ids = torch.tensor([[2, 10, 11, 12, 13, 3], [2, 20, 21, 3, 0, 0]])
    labels = torch.full_like(input_ids, -100)
    labels[0, 2] = 11
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}


def bert_classifier(folder, tokenizer, num_labels=3, seed=5):
    """A tiny random BertForSequenceClassification (TINY_BERT) on `tokenizer`'s vocabulary, saved with it."""
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), **TINY_BERT, num_labels=num_labels)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sentence_embedding_bert(folder, tokenizer):
    """A tiny random BERT dressed as a sentence-transformers model (mean pooling, normalised), with a licence."""
    bert_teacher(folder, tokenizer)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": False}))
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 128, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\nlibrary_name: sentence-transformers\n---\n# tiny\n")
    return folder
