"""Tiny pre-training inputs: random sentences, a corpus folder with its trained tokenizer, and a tiny run's
symbert-pretrain arguments."""

import random
from pathlib import Path

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
    from symbert.training.data.tokenizer import (
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
