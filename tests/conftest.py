import pytest
import torch
from transformers import BertConfig

from symbert import ATTENTION_TYPES, SymBertConfig

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


@pytest.fixture(params=ATTENTION_TYPES)
def attention_type(request):
    return request.param


# What a BERT tokenizer's save_pretrained writes beyond tokenizer.json and tokenizer_config.json under transformers
# 4.x (and not under 5.x), for tests that list a folder's files.
TOKENIZER_EXTRAS_4X = {"special_tokens_map.json", "vocab.txt"}


def file_names(names):
    """`names` sorted, without the 4.x-only tokenizer files."""
    return sorted(name for name in names if name not in TOKENIZER_EXTRAS_4X)


def assert_one_line(main, argv, message, capsys, **paths):
    """`main(argv)` refuses `argv` as a command does: exit status 2, one line on stderr that holds `message`. Each
    `{NAME}` in `argv` and `message` stands for the path `paths[NAME]`."""

    def fill(text):
        for name, path in paths.items():
            text = text.replace(f"{{{name}}}", str(path))
        return text

    with pytest.raises(SystemExit) as stopped:
        main([fill(arg) for arg in argv])
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and "\n" not in error and fill(message) in error, error
