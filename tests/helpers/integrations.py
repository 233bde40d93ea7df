"""A tiny tokenizer and model for the tests of SymBERT with other libraries, and their outputs."""

import pytest
import torch
import transformers
from transformers import BertTokenizerFast

from helpers.tiny import tiny_config

SENTENCES = ["the cat sat on the mat", "a big red dog ran", "paris is the capital of france"]


LABELS = {0: "NEG", 1: "NEU", 2: "POS"}  # no "O": token-classification would drop it
WORDS = "the a cat dog sat ran on under mat house big small red blue is was paris france capital of city river".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


def probabilities(logits):
    return torch.softmax(logits.double(), dim=-1)


def save_with_tokenizer(model, tokenizer, folder):
    torch.manual_seed(0)
    with torch.no_grad():  # an untrained MLM bias is zero; give every tensor some signal
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def symbert_config(attention_type):
    return tiny_config(
        attention_type, vocab_size=len(VOCAB), num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab_file = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")
    vocab_argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"  # renamed in 5.0
    return BertTokenizerFast(**{vocab_argument: str(vocab_file)})
