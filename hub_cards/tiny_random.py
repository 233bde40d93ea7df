"""Tiny randomly initialised SymBERT models, one per attention type, for other projects' CI, like transformers'
`hf-internal-testing/tiny-random-*` models: a few hundred kB each, with a real WordPiece tokenizer trained on the
first lines of the embedded corpus. Same seed, same weights."""

import gzip
from itertools import islice
from pathlib import Path

import torch
from transformers import BertTokenizerFast, PreTrainedTokenizerBase

from .. import SymBertConfig, SymBertForMaskedLM
from ..training.data.corpus_files import EMBEDDED_CORPUS
from ..training.data.tokenizer import train_wordpiece

SHAPE = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=37)
VOCAB_SIZE = 1024
CORPUS_LINES = 2000
SEED = 0
DATASET = f"tokenizer only: the first {CORPUS_LINES} lines of the embedded corpus of nine public-domain English books"


def tiny_tokenizer() -> BertTokenizerFast:
    with gzip.open(EMBEDDED_CORPUS, "rt", encoding="utf-8") as corpus:
        texts = list(islice(corpus, CORPUS_LINES))
    return train_wordpiece(texts, VOCAB_SIZE)


def save_tiny_random(attention_type: str, folder: Path, tokenizer: PreTrainedTokenizerBase) -> Path:
    """Save a tiny random `SymBertForMaskedLM` (weights, code, config) and `tokenizer` into `folder`."""
    config = SymBertConfig(
        **SHAPE, attention_type=attention_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(SEED)
    SymBertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
