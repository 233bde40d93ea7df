"""A tiny pre-trained model and GLUE files for symbert-glue's tests, and how they run it."""

import random
import sys
from pathlib import Path

import pytest

from helpers.tiny import tiny_config
from symbert import SymBertForMaskedLM
from symbert.training.data.tokenizer import train_wordpiece
from symbert.training.glue import command as glue
from symbert.training.glue import sweep as glue_sweep

MAX_LENGTH = "32"  # tiny_config has 64 positions


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny pairwise SymBERT with a WordPiece tokenizer, and GLUE-shaped TSV data for every task."""
    root = tmp_path_factory.mktemp("glue")
    rng = random.Random(1)
    tokenizer = train_wordpiece([sentence(rng) for _ in range(200)], vocab_size=120)
    config = tiny_config("pairwise", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    SymBertForMaskedLM(config).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    write_glue_tsv(root / "data")
    return root


@pytest.fixture
def fake_fine_tune(monkeypatch):
    """Replaces training by fixed metrics (from `accuracies[model folder name]`, default 0.5) and counts the calls."""
    calls, accuracies = [], {}

    def fine_tune(model_name, revision, task, tokenized, tokenizer, seed, training_args, trust_remote_code=False):
        calls.append((model_name, task, seed))
        accuracy = accuracies.get("/".join(Path(model_name).parts[-2:]), 0.5)
        accuracy += 0.01 * (seed - 1)
        return {"accuracy": accuracy, "f1": accuracy, "score": 100 * accuracy}

    monkeypatch.setattr(glue_sweep, "fine_tune", fine_tune)
    return calls, accuracies


def refused(argv, capsys):
    """Runs the command as `symbert-glue` expecting a user error: exit status 2 and one line on stderr, returned."""
    capsys.readouterr()  # what earlier commands printed
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["symbert-glue"])
        with pytest.raises(SystemExit) as exit_info:
            glue.main(argv)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("symbert-glue: error: ") and stderr.count("\n") == 1 and "Traceback" not in stderr
    return stderr


def suite_args(assets, output_dir, *extra):
    return [
        "--model",
        str(assets / "model"),
        "--data_dir",
        str(assets / "data"),
        "--output_dir",
        str(output_dir),
        "--max_length",
        MAX_LENGTH,
        *FAST,
        *extra,
    ]


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))


def write_glue_tsv(root, rows=24, seed=0):
    """The eight tasks and wnli in GLUE's official TSV layout (headers, label spellings, MNLI's two dev files)."""
    rng = random.Random(seed)
    nli = ("entailment", "neutral", "contradiction")

    def write(folder, name, header, make_row):
        path = root / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = ([] if header is None else [header]) + ["\t".join(map(str, make_row(i))) for i in range(rows)]
        path.write_text("\n".join(lines) + "\n")

    for split in ("train.tsv", "dev.tsv"):
        write("CoLA", split, None, lambda i: ("gj04", i % 2, "*" if i % 2 == 0 else "", sentence(rng)))
        write("SST-2", split, "sentence\tlabel", lambda i: (sentence(rng), i % 2))
        write(
            "MRPC",
            split,
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
            lambda i: (i % 2, 100 + i, 200 + i, sentence(rng), sentence(rng)),
        )
        write(
            "QQP",
            split,
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            lambda i: (i, 2 * i, 2 * i + 1, sentence(rng) + "?", sentence(rng) + "?", (i // 2) % 2),
        )
        write(
            "STS-B",
            split,
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
            lambda i: (
                i,
                "main-news",
                "f",
                "2012",
                i,
                "s",
                "s",
                sentence(rng),
                sentence(rng),
                round(i * 5 / (rows - 1), 3),
            ),
        )
        write(
            "QNLI",
            split,
            "index\tquestion\tsentence\tlabel",
            lambda i: (i, sentence(rng) + "?", sentence(rng), ("entailment", "not_entailment")[i % 2]),
        )
        write(
            "RTE",
            split,
            "index\tsentence1\tsentence2\tlabel",
            lambda i: (i, f'"{sentence(rng)}', sentence(rng), ("entailment", "not_entailment")[i % 2]),
        )
        write("WNLI", split, "index\tsentence1\tsentence2\tlabel", lambda i: (i, sentence(rng), sentence(rng), i % 2))
    mnli = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1"
    write(
        "MNLI",
        "train.tsv",
        mnli + "\tgold_label",
        lambda i: (i, i, f"{i}e", "fiction", "(", "(", "(", "(", sentence(rng), sentence(rng), nli[i % 3], nli[i % 3]),
    )
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        write(
            "MNLI",
            name,
            mnli + "\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
            lambda i: (i, i, f"{i}n", "fiction", "(", "(", "(", "(", sentence(rng), sentence(rng), *[nli[i % 3]] * 6),
        )
    return root


FAST = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--logging_steps", "1", "--disable_tqdm", "true"]


WORDS = "the a cat dog sat ran on under house river old new big small red blue said saw went came".split()
