import json
import random
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel

from symbert import ATTENTION_TYPES, SymBertConfig

# the fixtures defined beside the helpers that use them (tests/helpers/), for every test file
pytest_plugins = ["helpers.glue", "helpers.integrations", "helpers.release", "helpers.runs"]

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


# ------------------------------------------------------------------------------------- tiny pre-training runs

CORPUS_WORDS = (
    "the a river man woman house walked slowly along bank old young city night morning light water stone road "
    "looked said went came saw heard small great long dark bright quiet under over through before after"
).split()


def tiny_sentences(count: int, words: list[str] = CORPUS_WORDS, seed: int = 0, longest: int = 25) -> list[str]:
    """`count` seeded random sentences of 5 to `longest` of `words`, each ending in a full stop."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, longest))) + "." for _ in range(count)]


def train_tokenizer(folder: Path, lines: list[str], vocab_size: int = 200) -> Path:
    """A WordPiece tokenizer trained on `lines` (as pre-training trains one), saved to `folder`."""
    from symbert.training.tokenizer import (
        train_wordpiece,  # imports datasets: only the tests that train a tokenizer wait for it
    )

    train_wordpiece(lines, vocab_size=vocab_size).save_pretrained(folder)
    return folder


def tiny_corpus(folder: Path, lines: list[str], vocab_size: int = 200) -> Path:
    """`folder` with `lines` as train.txt and a tokenizer trained on them in tokenizer/, the layout run_args reads."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.txt").write_text("\n".join(lines) + "\n")
    train_tokenizer(folder / "tokenizer", lines, vocab_size)
    return folder


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """600 random sentences and a WordPiece tokenizer trained on them (tiny_corpus's layout); tests only read it."""
    return tiny_corpus(tmp_path_factory.mktemp("corpus"), tiny_sentences(600))


def run_args(corpus: Path, output_dir: Path, *extra: str, **overrides) -> list[str]:
    """symbert-pretrain's arguments of a tiny cpu-demo run on `corpus` (tiny_corpus's layout): 8 steps of 4 blocks of
    32 tokens. `overrides` replace an option's value by name (None leaves the option out: a named option is one the
    run records as chosen); `extra` follows, and its options win as on a command line."""
    options = {
        "recipe": "cpu-demo",
        "output_dir": output_dir,
        "train_files": corpus / "train.txt",
        "tokenizer": corpus / "tokenizer",
        "max_seq_length": 32,
        "eval_blocks": 8,
        "per_device_train_batch_size": 4,
        "max_steps": 8,
        "warmup_steps": 2,
        "eval_steps": 4,
        "save_steps": 4,
        "logging_steps": 2,
        "eval_on_start": "false",
        "report_to": "none",
        "disable_tqdm": "true",
        "data_seed": 42,
        **overrides,
    }
    named = [item for name, value in options.items() if value is not None for item in (f"--{name}", str(value))]
    return [*named, *extra]


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
