"""Models and tables shared by the model tests: BERT-like weights, the expected parameter counts, the heads."""

import torch
from transformers import BertConfig, BertForMaskedLM

import symbert


def bert_like(config):
    names = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
    )
    torch.manual_seed(3)
    return BertForMaskedLM(BertConfig(**{name: getattr(config, name) for name in names})).eval()


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
    # num_key_value_heads by default: 2 of 8 heads (small), 3 of 12 (base)
    ("small", "gqa"): 27_219_258,
    ("base", "gqa"): 98_883_642,
    # symmetric_init is BERT's attention (only initialised otherwise); no_query has symmetric's two h×h projections
    ("small", "symmetric_init"): 28_795_194,
    ("base", "symmetric_init"): 109_514_298,
    ("small", "no_query"): 27_744_570,
    ("base", "no_query"): 102_427_194,
}


HEADS = {
    "AutoModel": symbert.SymBertModel,
    "AutoModelForMaskedLM": symbert.SymBertForMaskedLM,
    "AutoModelForSequenceClassification": symbert.SymBertForSequenceClassification,
    "AutoModelForTokenClassification": symbert.SymBertForTokenClassification,
    "AutoModelForQuestionAnswering": symbert.SymBertForQuestionAnswering,
    "AutoModelForMultipleChoice": symbert.SymBertForMultipleChoice,
}
