"""symbert-pretrain's inputs: degenerate numbers, bad corpus files, bad recipes and a corrupt tokenizer cache are
refused with one line naming the value, file or line, before anything is written."""

import functools
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import TrainingArguments

from helpers.corpora import train_tokenizer
from symbert import SymBertForMaskedLM
from symbert.cli import UserError
from symbert.training import evaluation
from symbert.training.arguments import (
    argument_names,
    model_config,
    optimizer_for,
    parse_arguments,
)
from symbert.training.data import block_cutting, corpus_files
from symbert.training.data import loading as data
from symbert.training.data.masking import ResumableMLMCollator
from symbert.training.precision import LAUNCHER_PRECISION_VARIABLE, precision_for
from symbert.training.pretrain import SymBertPretrainingTrainer, main, pretrain

WORDS = "the a river man house walked slowly along bank old city night light water stone road said went".split()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    rng = random.Random(0)
    lines = [" ".join(rng.choices(WORDS, k=12)) for _ in range(200)]
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"), lines, vocab_size=100)


def sentences(count, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(5, 15))) + "." for _ in range(count)]


def args(output_dir, *extra, tokenizer=None):
    return [
        "--output_dir",
        str(output_dir),
        "--max_seq_length",
        "32",
        "--eval_blocks",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "2",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--use_cpu",
        "true",
        *(["--tokenizer", str(tokenizer)] if tokenizer else []),
        *extra,
    ]


def snapshot(folder):
    """Every file under `folder` with its bytes; None if the folder does not exist."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def output_dir(tmp_path):
    """An output folder that already holds a file: a refused run must leave it byte for byte as it was."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "notes.txt").write_text("kept\n")
    return folder


def refused(argv, capsys, monkeypatch):
    """Run the command; return its one error line, after checking it exits with status 2 and no traceback."""
    monkeypatch.setattr(sys, "argv", ["symbert-pretrain"])
    capsys.readouterr()  # only what the command prints
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symbert-pretrain: error: "), lines
    return lines[0]


# --- numbers ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mlm_probability", "0"], "mlm_probability=0.0 is not allowed; it must be strictly between 0 and 1"),
        (["--mlm_probability", "1"], "mlm_probability=1.0 is not allowed; it must be strictly between 0 and 1"),
        (["--mlm_probability", "nan"], "mlm_probability=nan is not allowed"),
        (
            ["--max_seq_length", "1"],
            r"max_seq_length=1 is too short to mask: .*mlm_probability=0.15 .*max_seq_length ≥ 9",
        ),
        (["--max_seq_length", "8"], r"max_seq_length=8 is too short to mask: .*max_seq_length ≥ 9"),
        (["--max_seq_length", "9", "--mlm_probability", "0.1"], r"max_seq_length=9 is too short .*max_seq_length ≥ 12"),
        (["--learning_rate", "nan"], "learning_rate=nan is not allowed; it must be a finite number above 0"),
        (["--learning_rate", "inf"], "learning_rate=inf is not allowed"),
        (["--learning_rate", "0"], "learning_rate=0.0 is not allowed"),
        (["--learning_rate=-1e-4"], "learning_rate=-0.0001 is not allowed"),
        (["--weight_decay", "-0.01"], "weight_decay=-0.01 is not allowed; it must be a finite number ≥ 0"),
        (
            ["--warmup_steps", "nan"],
            r"warmup_steps=nan is not allowed|--warmup_steps.*invalid int value: 'nan'",
        ),  # 4.x: int
        # TrainingArguments' own check (5.x; 4.x words it differently)
        (
            ["--warmup_steps", "-1"],
            r"warmup_steps = -1.0, Expected value warmup_steps >= 0|warmup_steps must be .* 0 or a positive",
        ),
        (["--adam_beta2", "1"], r"adam_beta2=1.0 is not allowed; it must be in \[0, 1\)"),
        (["--adam_epsilon=-1e-8"], "adam_epsilon=-1e-08 is not allowed"),
        (["--max_grad_norm", "nan"], "max_grad_norm=nan is not allowed"),
        (["--max_steps", "0"], "max_steps=0 is not allowed; it must be a positive number of steps, or -1"),
        (["--max_steps", "-1", "--num_train_epochs", "0"], "num_train_epochs=0.0 is not allowed"),
        (["--per_device_train_batch_size", "0"], "per_device_train_batch_size=0 is not allowed; it must be at least 1"),
        (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps=0 is not allowed"),
        (
            ["--eval_strategy", "steps", "--eval_steps", "-5"],
            "eval_steps=-5.0 is not allowed; it must be above 0 with eval_strategy=steps",
        ),
        (["--save_strategy", "steps", "--save_steps", "-1"], "save_steps=-1.0 is not allowed"),
        (["--seed", "-1"], "seed=-1 is not allowed; it must be an integer ≥ 0"),
        (["--seed", str(2**64)], f"seed={2**64} is not allowed; it must be an integer ≥ 0 and at most {2**32 - 1}"),
        (["--data_seed", str(2**32)], f"data_seed={2**32} is not allowed; it must be an integer ≥ 0 and at most"),
        (["--global_batch_size", "0"], "global_batch_size=0 is not allowed; it must be at least 1"),
        (["--num_proc", "0"], "num_proc=0 is not allowed; it must be at least 1"),
        (["--dataloader_num_workers", "-1"], "dataloader_num_workers=-1 is not allowed; it must be an integer ≥ 0"),
        (["--target_eval_loss", "nan"], "target_eval_loss=nan is not allowed"),
        (["--streaming", "true", "--max_steps", "-1"], "streaming=True needs --max_steps"),
        (
            ["--config_overrides", '{"sparse_predicton": true}'],
            r"config_overrides: unknown SymBertConfig field 'sparse_predicton' \(did you mean 'sparse_prediction'\?\)",
        ),
        (
            ["--config_overrides", '{"hidden_size": 65}'],
            "config_overrides: hidden_size=65 is not divisible by num_attention_heads",
        ),
        (
            ["--config_overrides", '{"hidden_dropout_prob": 2}'],
            r"config_overrides: hidden_dropout_prob=2 is invalid; .*\[0, 1\)",
        ),
        (
            ["--pad_vocab_to_multiple_of", "0"],
            "pad_vocab_to_multiple_of=0 is not allowed; it must be a positive integer",
        ),
        (["--pad_vocab_to_multiple_of=-64"], "pad_vocab_to_multiple_of=-64 is not allowed"),
        (
            ["--pad_vocab_to_multiple_of", "1000000000"],
            "pad_vocab_to_multiple_of=1000000000 is not allowed; it must be a positive integer of at most 65536",
        ),
        (["--pad_vocab_to_multiple_of", "2.5"], "--pad_vocab_to_multiple_of.*invalid int value: '2.5'"),
        (
            ["--config_overrides", '{"max_predictions_per_seq": 0}'],
            "config_overrides: max_predictions_per_seq=0 is invalid; it must be None or a positive integer",
        ),
    ],
)
def test_degenerate_numbers_are_refused_before_anything_is_read(output_dir, capsys, monkeypatch, extra, message):
    before = snapshot(output_dir)
    # a corpus path that does not exist: the numbers are refused before any data is looked at
    line = refused(args(output_dir, "--train_files", "not-read.txt", *extra), capsys, monkeypatch)
    assert re.search(message, line), line
    assert snapshot(output_dir) == before


def test_shortest_block_is_the_one_with_a_masked_token_on_average(tmp_path):
    for probability, shortest in [(0.15, 9), (0.1, 12), (0.5, 4), (0.2, 7), (0.9, 4)]:

        def parse(length):
            return parse_arguments(
                args(tmp_path, "--mlm_probability", str(probability), "--max_seq_length", str(length))
            )

        assert (parse(shortest)[2].max_seq_length - 2) * probability >= 1 - 1e-9
        with pytest.raises(UserError, match=f"max_seq_length ≥ {shortest}"):
            parse(shortest - 1)


@pytest.mark.heavy
def test_command_prints_one_line_and_exits_2(tmp_path):
    output_dir = tmp_path / "never"
    result = subprocess.run(
        [Path(sys.executable).with_name("symbert-pretrain"), "--output_dir", str(output_dir), "--learning_rate", "nan"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    message = "learning_rate=nan is not allowed; it must be a finite number above 0."
    assert result.stderr == f"symbert-pretrain: error: {message}\n"
    assert not output_dir.exists()


def test_optimizer_is_fused_adamw_on_cuda_unless_named():
    trainer_default = next(f.default for f in fields(TrainingArguments) if f.name == "optim")
    assert optimizer_for("cuda", trainer_default, optim_named=False) == "adamw_torch_fused"
    assert optimizer_for("cuda", "adamw_torch", optim_named=True) == "adamw_torch"  # --optim or the recipe's
    assert optimizer_for("cpu", trainer_default, optim_named=False) == trainer_default  # CPU results unchanged
    assert argument_names(["--recipe", "x", "--optim=sgd", "--learning_rate", "-1"]) == {
        "recipe",
        "optim",
        "learning_rate",
    }


def test_optimizer_on_cpu_stays_the_trainers_default_or_the_named_one(tmp_path):
    trainer_default = next(f.default for f in fields(TrainingArguments) if f.name == "optim")
    assert parse_arguments(args(tmp_path))[3].optim == trainer_default
    assert parse_arguments(args(tmp_path, "--optim", "adamw_torch"))[3].optim == "adamw_torch"
    recipe = tmp_path / "sgd.json"
    recipe.write_text('{"optim": "sgd"}')
    assert parse_arguments(args(tmp_path, "--recipe", str(recipe)))[3].optim == "sgd"


# --- precision -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, device, bf16_supported, launcher, expected",
    [
        ("auto", "cuda", True, "no", "bf16"),
        ("auto", "cuda", False, "no", "fp16"),
        ("auto", "cpu", True, "no", "fp32"),
        ("auto", "cuda", True, "fp16", "fp16"),  # the launcher's --mixed_precision
        ("fp16", "cuda", True, "no", "fp16"),
        ("bf16", "cpu", True, "no", "bf16"),  # CPU autocast
        ("fp16", "cpu", True, "no", "precision 'fp16' cannot run on the CPU: .* would train in fp32"),
        ("auto", "cpu", True, "fp16", "the launcher's mixed precision 'fp16' .* cannot run on the CPU"),
        ("bf16", "cpu", False, "no", "bf16 on the cpu needs --use_cpu true"),
        ("bf16", "cuda", False, "no", "bf16 on the cuda is not supported"),
        ("fp32", "cuda", True, "bf16", "precision 'fp32' disagrees with the launcher's mixed precision 'bf16'"),
        ("auto", "cuda", True, "fp8", "the launcher's mixed precision 'fp8' .* is not supported"),
    ],
)
def test_precision_is_what_the_device_runs_or_refused(requested, device, bf16_supported, launcher, expected):
    if expected in ("bf16", "fp16", "fp32"):
        assert precision_for(requested, device, bf16_supported, launcher) == expected
    else:
        with pytest.raises(UserError, match=expected):
            precision_for(requested, device, bf16_supported, launcher)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--precision", "fp16"], "precision 'fp16' cannot run on the CPU"),
        (["--fp16", "true"], "fp16=True disagrees with precision='auto', which trains in fp32 here"),
        (["--precision", "bf16", "--bf16", "false"], "bf16=False disagrees with precision='bf16'"),
    ],
)
def test_a_precision_the_cpu_does_not_run_is_refused_in_one_line(output_dir, capsys, monkeypatch, extra, message):
    monkeypatch.setenv(LAUNCHER_PRECISION_VARIABLE, "no")  # as it was after the test (transformers 4.x writes it)
    before = snapshot(output_dir)
    line = refused(args(output_dir, "--train_files", "not-read.txt", *extra), capsys, monkeypatch)
    assert message in line, line
    assert snapshot(output_dir) == before


@pytest.mark.parametrize("precision, dtype", [("auto", torch.float32), ("bf16", torch.bfloat16)])
def test_the_summary_records_the_precision_that_ran(tmp_path, tokenizer_dir, monkeypatch, precision, dtype):
    """On a CPU: fp32 for auto, bf16 autocast for bf16; the summary names the dtype the training forwards computed
    their logits in, and the training arguments (which model cards read) agree. TrainingArguments that ask for fp16
    there (the Python API) are refused before training: the run would be fp32 and say fp16."""
    monkeypatch.setenv(LAUNCHER_PRECISION_VARIABLE, "no")  # as it was after the test (the run sets it to bf16)
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    logits = []
    forward = SymBertForMaskedLM.forward

    @functools.wraps(forward)  # the Trainer reads the forward's arguments
    def recording_forward(self, *inputs, **kwargs):
        outputs = forward(self, *inputs, **kwargs)
        if self.training:
            logits.append(outputs.logits.dtype)
        return outputs

    monkeypatch.setattr(SymBertForMaskedLM, "forward", recording_forward)
    argv = args(tmp_path / "run", "--train_files", str(tmp_path / "a.txt"), "--precision", precision)
    arguments = parse_arguments([*argv, "--tokenizer", str(tokenizer_dir)])
    pretrain(*arguments)
    summary = json.loads((tmp_path / "run" / "training_summary.json").read_text())
    ran = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    assert set(logits) == {dtype} and len(logits) == 2 and summary["precision"] == ran
    assert (summary["training_arguments"]["bf16"], summary["training_arguments"]["fp16"]) == (ran == "bf16", False)
    if precision == "auto":
        *others, training_args = arguments
        training_args = replace(training_args, output_dir=str(tmp_path / "fp16"))
        with pytest.raises(UserError, match="arguments ask for fp16 but accelerate would train in fp32 on cpu"):
            pretrain(*others, replace(training_args, fp16=True))
        assert not (tmp_path / "fp16" / "training_summary.json").exists() and len(logits) == 2


class SizedTokenizer:
    pad_token_id = 0

    def __len__(self):
        return 150


def test_vocabulary_padded_to_a_multiple(tmp_path):
    def config(*extra):
        return model_config(parse_arguments(args(tmp_path, *extra))[1], SizedTokenizer())

    # vocab_size stays the tokenizer's: the padded rows are the model's, recorded and never predicted
    assert (config().vocab_size, config().padded_vocab_size) == (150, 150)
    padded = config("--pad_vocab_to_multiple_of", "64")
    assert (padded.vocab_size, padded.pad_vocab_size_multiple, padded.padded_vocab_size) == (150, 64, 192)
    assert config("--pad_vocab_to_multiple_of", "50").padded_vocab_size == 150  # already a multiple
    for extra in ((), ("--pad_vocab_to_multiple_of", "64")):
        with pytest.raises(UserError, match=r"has 150 tokens but the model's vocab_size is 192; they must be equal"):
            config(*extra, "--config_overrides", '{"vocab_size": 192}')


@pytest.mark.heavy
def test_padded_vocabulary_run_never_inputs_the_extra_ids(tmp_path, tokenizer_dir):
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    output_dir = tmp_path / "run"
    argv = args(output_dir, "--train_files", str(tmp_path / "a.txt"), "--pad_vocab_to_multiple_of", "64")
    main([*argv, "--tokenizer", str(tokenizer_dir)])
    tokenizer = data.load_tokenizer(parse_arguments(args(tmp_path, tokenizer=tokenizer_dir))[2])
    config = json.loads((output_dir / "config.json").read_text())
    assert (config["vocab_size"], config["pad_vocab_size_multiple"]) == (len(tokenizer), 64)  # recorded
    model = SymBertForMaskedLM.from_pretrained(output_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    assert rows % 64 == 0 and len(tokenizer) < rows < len(tokenizer) + 64
    logits = model(input_ids=torch.tensor([[2, 5, 6, 3]])).logits
    assert logits.shape[-1] == len(tokenizer)  # the padding rows are never predicted
    summary = json.loads((output_dir / "training_summary.json").read_text())
    assert summary["model_arguments"]["pad_vocab_to_multiple_of"] == 64
    # the collator's random replacements come from the tokenizer's ids, never the padding's
    collator = ResumableMLMCollator(tokenizer, mlm_probability=0.9)
    batch = collator([{"input_ids": [5] * 64}] * 64)
    assert batch["input_ids"].max() < len(tokenizer) and (batch["input_ids"] > 5).sum() > 200


# --- corpus files ----------------------------------------------------------------------------------------------------


def write_gzip_truncated(path):
    whole = gzip.compress("\n".join(sentences(2000)).encode())
    path.write_bytes(whole[: len(whole) // 2])


CORPUS_FILES = {
    "empty.txt": (lambda p: p.write_bytes(b""), r"empty.txt is empty \(0 bytes\)"),
    "blank.txt": (lambda p: p.write_text("\n   \n\t\n"), "blank.txt holds only blank lines"),
    "binary.txt": (lambda p: p.write_bytes(bytes(range(256)) * 4), "binary.txt is not text: line 1 holds a NUL byte"),
    "latin1.txt": (
        lambda p: p.write_bytes("first line\ncafé au lait\n".encode("latin-1")),
        "latin1.txt is not UTF-8 text: line 2, byte 4 is 0xe9; it may be Latin-1 .* convert it to UTF-8",
    ),
    "truncated.txt.gz": (write_gzip_truncated, "truncated.txt.gz is a truncated or corrupt gzip archive"),
    "notgzip.txt.gz": (
        lambda p: p.write_text("plain text, not gzip\n"),
        "notgzip.txt.gz is a truncated or corrupt gzip archive",
    ),
    "malformed.jsonl": (
        lambda p: p.write_text('{"text": "a b"}\n\n{"text": "c d"\n'),
        "malformed.jsonl is not valid JSON lines: line 3: Expecting ',' delimiter",
    ),
    "malformed.json": (
        lambda p: p.write_text('{"text": "a b"}\n{"text": "c d"}\n{"text": "e f",\n'),
        "malformed.json is not valid JSON lines: line 3: Expecting property name",
    ),
    "array.jsonl": (
        lambda p: p.write_text('["a b"]\n'),
        "array.jsonl is not JSON lines of objects: line 1 is a JSON array",
    ),
    "numbers.jsonl": (
        lambda p: p.write_text('{"text": "a b"}\n{"text": 17}\n'),
        "numbers.jsonl has a number in column 'text' on line 2 \\(17\\); text_column must hold strings",
    ),
    "numbers.parquet": (
        lambda p: Dataset.from_dict({"text": [1, 2]}).to_parquet(str(p)),
        "numbers.parquet has int64 values in column 'text'; text_column must hold strings",
    ),
    "broken.parquet": (lambda p: p.write_bytes(b"PAR1 not really"), "broken.parquet is not a readable Parquet file"),
    "empty.parquet": (lambda p: Dataset.from_dict({"text": []}).to_parquet(str(p)), "empty.parquet holds no rows"),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["loaded", "streamed"])
@pytest.mark.parametrize("name", CORPUS_FILES)
def test_bad_corpus_file_is_named_before_training(
    tmp_path, output_dir, tokenizer_dir, capsys, monkeypatch, name, streaming
):
    write, message = CORPUS_FILES[name]
    good, bad = tmp_path / f"good{Path(name).suffixes[0]}", tmp_path / name
    if name.endswith(".parquet"):
        Dataset.from_dict({"text": sentences(50)}).to_parquet(str(good))
    elif name.endswith((".jsonl", ".json")):
        good.write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences(50)))
    else:
        good.write_text("\n".join(sentences(50)))
    write(bad)
    before = snapshot(output_dir)
    streaming = ["--streaming", str(streaming).lower()]
    line = refused(
        args(output_dir, "--train_files", str(good), str(bad), *streaming, tokenizer=tokenizer_dir), capsys, monkeypatch
    )
    assert re.search(f"error: {tmp_path}/{message}", line), line
    assert snapshot(output_dir) == before


@pytest.mark.parametrize("how", ["twice", "another spelling", "a link", "a copy"])
def test_the_same_corpus_file_twice_is_refused(tmp_path, output_dir, tokenizer_dir, capsys, monkeypatch, how):
    """One file named twice would put its texts both in the training blocks and in the held-out ones."""
    first = tmp_path / "a.txt"
    first.write_text("\n".join(sentences(300)))
    second = {
        "twice": first,
        "another spelling": tmp_path / ".." / tmp_path.name / "a.txt",
        "a link": tmp_path / "link.txt",
        "a copy": tmp_path / "copy.txt",
    }[how]
    if how == "a link":
        second.symlink_to(first)
    elif how == "a copy":
        shutil.copyfile(first, second)
    (tmp_path / "other.txt").write_text("\n".join(sentences(300, seed=1)))
    before = snapshot(output_dir)
    argv = ["--train_files", str(first), str(tmp_path / "other.txt"), str(second)]
    line = refused(args(output_dir, *argv, tokenizer=tokenizer_dir), capsys, monkeypatch)
    reason = f"the same {first.stat().st_size} bytes" if how == "a copy" else f"both resolve to {first}"
    assert f"train_files: {first} and {second} are the same file ({reason}); name each corpus file once" in line
    assert snapshot(output_dir) == before


LATE_PROBLEMS = {
    "late.txt": (
        lambda lines: "\n".join(lines).encode() + "\nna\xefve\n".encode("latin-1"),
        r"late.txt is not UTF-8 text: line 401, byte 3 is 0xef",
    ),
    "late.jsonl": (
        lambda lines: "".join(json.dumps({"text": s}) + "\n" for s in lines).encode() + b'{"text": 5}\n',
        r"late.jsonl has a number in column 'text' on line 401",
    ),
    "late_bad.jsonl": (
        lambda lines: "".join(json.dumps({"text": s}) + "\n" for s in lines).encode() + b'{"text": "x",\n',
        r"late_bad.jsonl is not valid JSON lines: line 401",
    ),
    "late.txt.gz": (
        lambda lines: gzip.compress("\n".join(lines).encode())[:-100],
        r"late.txt.gz is a truncated or corrupt gzip archive \(EOFError",
    ),
}


@pytest.mark.parametrize("name", LATE_PROBLEMS)
@pytest.mark.parametrize("streaming", [False, True], ids=["loaded", "streamed"])
def test_problem_past_the_checked_start_is_named_when_read(tmp_path, tokenizer_dir, monkeypatch, name, streaming):
    """Only the first CHECKED_BYTES of a file are checked up front (big corpora are not read twice); a problem further
    on is found when datasets reads the file, and reported with the file and line all the same."""
    monkeypatch.setattr(corpus_files, "CHECKED_BYTES", 256)
    build, message = LATE_PROBLEMS[name]
    path = tmp_path / name
    path.write_bytes(build(sentences(400)))
    assert corpus_files.file_problem(path, "text", limit=256) is None  # not visible in the checked start
    streaming = ["--streaming", str(streaming).lower()]
    data_args = parse_arguments(args(tmp_path / "run", "--train_files", str(path), *streaming))[2]
    tokenizer = data.load_tokenizer(parse_arguments(args(tmp_path, tokenizer=tokenizer_dir))[2])
    with pytest.raises(UserError, match=f"{tmp_path}/{message}"):
        train, held_out = data.load_blocks(data_args, tokenizer)
        list(train)  # a stream is read while training


def test_non_string_texts_in_a_stream_are_named(tmp_path, tokenizer_dir, monkeypatch):
    """Hub streams may hold other types further on than their first rows."""
    from datasets import IterableDataset

    def rows():
        yield from ({"text": s} for s in sentences(30))
        yield {"text": [1, 2]}

    monkeypatch.setattr(block_cutting, "load_texts", lambda data_args: IterableDataset.from_generator(rows))
    data_args = parse_arguments(args(tmp_path, "--streaming", "true", tokenizer=tokenizer_dir))[2]
    tokenizer = data.load_tokenizer(data_args)
    with pytest.raises(UserError, match=r"text_column 'text' of .* holds values of type list, not strings"):
        train, _ = data.load_blocks(data_args, tokenizer)
        list(train)


def test_a_bad_record_past_what_a_stream_trained_on_leaves_a_finished_run(tmp_path, tokenizer_dir, capsys, monkeypatch):
    """A streamed corpus with a non-string text past the part training reads: the run finishes, records itself
    finished and reports (no exit 2 after the summary); the report's unigram baseline counts the tokens of exactly the
    blocks that training read, nothing further."""
    monkeypatch.setattr(corpus_files, "CHECKED_BYTES", 256)
    texts = sentences(1500)
    texts[1200] = [1, 2]  # past the first 1,000 texts: the stream's first batch, all that the 8 blocks trained need
    corpus = tmp_path / "late_list.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    trained, counted = [], []
    step, baseline = SymBertPretrainingTrainer.training_step, evaluation.unigram_baseline

    def recording_step(self, model, inputs, num_items_in_batch=None):
        trained.append(torch.where(inputs["labels"] != -100, inputs["labels"], inputs["input_ids"]))
        return step(self, model, inputs, num_items_in_batch)

    monkeypatch.setattr(SymBertPretrainingTrainer, "training_step", recording_step)
    monkeypatch.setattr(
        evaluation, "unigram_baseline", lambda counts, labels: counted.append(counts) or baseline(counts, labels)
    )
    monkeypatch.setattr(evaluation, "fill_mask_example", lambda folder: {"class": "-", "examples": []})  # no process
    output_dir = tmp_path / "run"
    main(args(output_dir, "--train_files", str(corpus), "--streaming", "true", tokenizer=tokenizer_dir))
    assert (output_dir / "training_summary.json").is_file()
    assert "unigram baseline" in capsys.readouterr().out
    tokenizer = data.load_tokenizer(parse_arguments(args(tmp_path, tokenizer=tokenizer_dir))[2])
    expected = torch.bincount(torch.cat(trained).flatten(), minlength=len(tokenizer))
    expected[tokenizer.all_special_ids] = 0
    assert len(trained) == 2 and torch.equal(counted[0], expected)
    with pytest.raises(UserError, match=r"late_list.jsonl has a array in column 'text' on line 1201"):
        list(
            data.load_blocks(
                parse_arguments(args(output_dir, "--train_files", str(corpus), "--streaming", "true"))[2], tokenizer
            )[0]
        )


def test_missing_corpus_file_is_a_user_error_and_a_file_not_found(tmp_path, tokenizer_dir):
    data_args = parse_arguments(args(tmp_path, "--train_files", str(tmp_path / "nope.txt"), tokenizer=tokenizer_dir))[2]
    with pytest.raises(UserError, match="train_files not found: .*nope.txt") as error:
        corpus_files.load_texts(data_args)
    assert isinstance(error.value, FileNotFoundError)


def test_unknown_tokenizer_path_is_a_user_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.txt").write_text("some words\n")
    line = refused(
        args(tmp_path / "run", "--train_files", str(tmp_path / "a.txt"), tokenizer=tmp_path / "no" / "tok"),
        capsys,
        monkeypatch,
    )
    assert f"'{tmp_path}/no/tok' does not exist" in line
    assert not (tmp_path / "run").exists()


# --- the cached tokenizer --------------------------------------------------------------------------------------------


@pytest.mark.heavy
def test_truncated_tokenizer_cache_is_rebuilt_and_the_run_works(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "cache"))
    run_args = args(
        tmp_path / "run",
        "--tokenizer_vocab_size",
        "300",
        "--max_seq_length",
        "64",
        "--eval_blocks",
        "4",
        "--config_overrides",
        '{"sparse_prediction": true}',
    )
    data_args = parse_arguments(run_args)[2]
    first = data.load_tokenizer(data_args)
    folder = next((tmp_path / "cache" / "tokenizers").glob("wordpiece-300-*[!.lock]"))
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name, f"{folder.name}.lock"]  # no temporary left
    saved = folder / "tokenizer.json"
    whole = saved.read_bytes()
    saved.write_bytes(whole[: len(whole) // 3])
    capsys.readouterr()

    monkeypatch.setattr(sys, "argv", ["symbert-pretrain"])
    main(run_args)
    out = capsys.readouterr().out
    # the error's class is the JSON parser's (5.x) or the tokenizers library's (4.x)
    assert re.search(
        rf"^The cached tokenizer {re.escape(str(folder))} is unreadable \(\w+\); training it again\.$", out, re.M
    )
    rebuilt = json.loads(saved.read_text())["model"]["vocab"]  # complete JSON again, of the same size (the trainer's
    assert len(rebuilt) == len(first) == 300  # tie order may differ between trainings: see README)
    assert json.loads((tmp_path / "run" / "training_summary.json").read_text())["steps"] == 2
    assert data.load_tokenizer(data_args).get_vocab() == rebuilt
    assert "unreadable" not in capsys.readouterr().out  # the rebuilt cache is used as is


def test_unwritable_tokenizer_cache_is_named(tmp_path, monkeypatch):
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "not-a-folder"))
    data_args = parse_arguments(args(tmp_path / "run", "--tokenizer_vocab_size", "300"))[2]
    cache = tmp_path / "not-a-folder" / "tokenizers"
    with pytest.raises(UserError, match=f"Cannot write the tokenizer cache {cache}/wordpiece-300-"):
        data.load_tokenizer(data_args)


@pytest.mark.heavy
def test_bare_command_defaults_fit_the_embedded_corpus(tmp_path, monkeypatch):
    """`symbert-pretrain` with no arguments: 512-token blocks of the embedded corpus, 200 of them held out."""
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "cache"))
    data_args = parse_arguments([])[2]
    assert corpus_files.uses_embedded_corpus(data_args) and (data_args.max_seq_length, data_args.eval_blocks) == (
        512,
        200,
    )
    train, held_out = data.load_blocks(data_args, data.load_tokenizer(data_args))
    assert len(held_out) == 200 and len(train) > 2000


# --- recipes ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"size": "tiny",\n "max_steps": 10,\n}', r"Recipe .*bad.json is not valid JSON: .*line 3 column 1"),
        ('[{"size": "tiny"}]', r"Recipe .*bad.json must hold a JSON object of argument names and values, not a list"),
        ('"tiny"', r"Recipe .*bad.json must hold a JSON object .*not a str"),
        (
            '{"_comment": "ok", "learning_rat": 0.001}',
            r"Recipe .*bad.json: unknown argument 'learning_rat' \(did you mean 'learning_rate'",
        ),
        (
            '{"mlm_probabilty": 0.2}',
            r"Recipe .*bad.json: unknown argument 'mlm_probabilty' \(did you mean 'mlm_probability'",
        ),
        ('{"zzz": 1}', r"Recipe .*bad.json: unknown argument 'zzz'\.$"),
    ],
)
def test_bad_recipe_is_named(tmp_path, output_dir, capsys, monkeypatch, text, message):
    recipe = tmp_path / "bad.json"
    recipe.write_text(text)
    before = snapshot(output_dir)
    for form in (["--recipe", str(recipe)], [f"--recipe={recipe}"]):
        line = refused(["--output_dir", str(output_dir), *form], capsys, monkeypatch)
        assert re.search(message, line), line
    assert snapshot(output_dir) == before


def test_recipe_with_equals_sign(tmp_path):
    spaced = parse_arguments(["--recipe", "cpu-demo", "--output_dir", str(tmp_path)])
    joined = parse_arguments(["--recipe=cpu-demo", "--output_dir", str(tmp_path)])
    assert joined[0].recipe == "cpu-demo" and joined[3].max_steps == 2800
    assert [vars(a) for a in joined[:3]] == [vars(a) for a in spaced[:3]]
    assert joined[3].to_dict() == spaced[3].to_dict()
    # the last --recipe wins, as for any argument
    assert (
        parse_arguments(["--recipe=paper-small", "--recipe", "cpu-demo", "--output_dir", str(tmp_path)])[1].size
        == "tiny"
    )


def test_unknown_recipe_name_is_a_user_error(tmp_path, capsys, monkeypatch):
    line = refused(["--recipe", "paper-huge", "--output_dir", str(tmp_path / "run")], capsys, monkeypatch)
    assert "Unknown recipe 'paper-huge': not a .json file and not one of cpu-demo, paper-base, paper-small" in line
    assert not (tmp_path / "run").exists()


# --- one attention type ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--attention_type", "original", "--config_overrides", '{"attention_type": "pairwise"}'],
            "config_overrides sets attention_type='pairwise' but the run trains attention_type='original' (--attention_type",
        ),
        (
            ["--attention_type", "symmetric", "--config_overrides", '{"attention_type": "pairwise"}'],
            "config_overrides sets attention_type='pairwise' but the run trains attention_type='symmetric' (--attention_type",
        ),
        (
            ["--compare", "pairwise,original", "--config_overrides", '{"attention_type": "pairwise"}'],
            "config_overrides sets attention_type='pairwise' but the run trains attention_type='original' (--attention_type",
        ),
    ],
)
def test_an_attention_type_in_the_overrides_that_disagrees_is_refused(output_dir, capsys, monkeypatch, extra, message):
    before = snapshot(output_dir)
    line = refused(args(output_dir, "--train_files", "not-read.txt", *extra), capsys, monkeypatch)
    assert message in line, line
    assert snapshot(output_dir) == before


@pytest.mark.parametrize("named", [[], ["--attention_type", "pairwise"]], ids=["overrides only", "both, equal"])
@pytest.mark.heavy
def test_the_summary_and_labels_name_the_type_trained(tmp_path, tokenizer_dir, capsys, named):
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    output_dir = tmp_path / "run"
    overrides = ["--config_overrides", '{"attention_type": "pairwise"}']
    main(args(output_dir, "--train_files", str(tmp_path / "a.txt"), *named, *overrides, tokenizer=tokenizer_dir))
    summary = json.loads((output_dir / "training_summary.json").read_text())
    assert summary["attention_type"] == summary["model_arguments"]["attention_type"] == "pairwise"
    assert json.loads((output_dir / "config.json").read_text())["attention_type"] == "pairwise"
    assert "pairwise: final eval loss" in capsys.readouterr().out


# --- tokenizers without a vocabulary ---------------------------------------------------------------------------------


def save_word_level_tokenizer(folder, texts, special_tokens, **roles):
    """A saved fast tokenizer with a WordLevel vocabulary of `texts`' words and `special_tokens`; `roles` name which
    special token is which (unk_token="[UNK]", ...)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if texts:
        backend.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=special_tokens))
    PreTrainedTokenizerFast(tokenizer_object=backend, **roles).save_pretrained(folder)


TOKENIZER_FOLDERS = {
    "empty folder": (
        lambda folder: None,
        r"Tokenizer folder '.*/tok' holds no vocabulary: none of tokenizer.json, .* "
        r"is in it \(it holds nothing\)",
    ),
    "only a config": (
        lambda folder: (folder / "tokenizer_config.json").write_text("{}"),
        r"holds no vocabulary: .*\(it holds tokenizer_config.json\)",
    ),
    "0 tokens": (
        lambda folder: save_word_level_tokenizer(folder, [], []),
        r"Tokenizer '.*/tok' has no vocabulary \(0 tokens\)",
    ),
    "no [CLS] [SEP] [MASK]": (
        lambda folder: save_word_level_tokenizer(
            folder, sentences(50), ["[UNK]", "[PAD]"], unk_token="[UNK]", pad_token="[PAD]"
        ),
        r"Tokenizer '.*/tok' \(\d+ tokens\) lacks cls_token, sep_token, mask_token: masked-language-model pre-training "
        r"needs all of cls_token, sep_token, mask_token and pad_token \(BERT's \[CLS\] \[SEP\] \[MASK\] \[PAD\]\)",
    ),
    "no [MASK]": (
        lambda folder: save_word_level_tokenizer(
            folder,
            sentences(50),
            ["[UNK]", "[PAD]", "[CLS]", "[SEP]"],
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
        ),
        r"lacks mask_token:",
    ),
}


@pytest.mark.parametrize("case", TOKENIZER_FOLDERS)
def test_a_tokenizer_without_a_vocabulary_is_refused_up_front(tmp_path, output_dir, capsys, monkeypatch, case):
    build, message = TOKENIZER_FOLDERS[case]
    folder = tmp_path / "tok"
    folder.mkdir()
    build(folder)
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    before = snapshot(output_dir)
    line = refused(args(output_dir, "--train_files", str(tmp_path / "a.txt"), tokenizer=folder), capsys, monkeypatch)
    assert re.search(message, line), line
    assert snapshot(output_dir) == before


# --- records without a text ------------------------------------------------------------------------------------------


def half_without_text(count=400):
    """Records of which every second one has no "text" field (a "title" instead), the first such one second."""
    return [{"text": s} if i % 2 == 0 else {"title": s} for i, s in enumerate(sentences(count))]


RECORDS_WITHOUT_TEXT = {
    "half.jsonl": (
        lambda p: p.write_text("".join(json.dumps(r) + "\n" for r in half_without_text())),
        r"half.jsonl has no field 'text' on line 2 \(its fields: 'title'\): a record without a text; pass "
        r"--text_column .* or --skip_records_without_text true",
    ),
    "late.jsonl": (  # past the checked start: found when the file is read
        lambda p: p.write_text(
            "".join(json.dumps({"text": s}) + "\n" for s in sentences(400)) + '{"text": null, "id": 7}\n'
        ),
        r"late.jsonl has null in field 'text' on line 401 \(its fields: 'text', 'id'\)",
    ),
    "array.json": (
        lambda p: p.write_text(json.dumps([{"text": s} for s in sentences(400)] + [{"body": "x"}])),
        r"array.json has no field 'text' on record 401 \(its fields: 'body'\)",
    ),
    "nulls.parquet": (
        lambda p: Dataset.from_dict({"text": [*sentences(300), None, *sentences(99)]}).to_parquet(str(p)),
        r"nulls.parquet has null in field 'text' on record 301",
    ),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["loaded", "streamed"])
@pytest.mark.parametrize("name", RECORDS_WITHOUT_TEXT)
def test_records_without_text_are_an_error_naming_file_line_and_field(
    tmp_path, tokenizer_dir, monkeypatch, name, streaming
):
    monkeypatch.setattr(corpus_files, "CHECKED_BYTES", 256)
    write, message = RECORDS_WITHOUT_TEXT[name]
    path = tmp_path / name
    write(path)
    streaming = ["--streaming", str(streaming).lower()]
    data_args = parse_arguments(args(tmp_path / "run", "--train_files", str(path), *streaming))[2]
    tokenizer = data.load_tokenizer(parse_arguments(args(tmp_path, tokenizer=tokenizer_dir))[2])
    with pytest.raises(UserError, match=f"{tmp_path}/{message}"):
        train, held_out = data.load_blocks(data_args, tokenizer)
        list(train)  # a stream is read while training

    data_args = replace(data_args, skip_records_without_text=True)
    train, held_out = data.load_blocks(data_args, tokenizer)
    assert len(list(train)) > 0


def test_records_without_text_in_a_stream_are_named_or_counted(tmp_path, tokenizer_dir, monkeypatch):
    """A Hub stream (or any dataset) names the record by its number."""
    from datasets import IterableDataset

    def rows():
        for index, text in enumerate(sentences(300)):
            yield {"text": None if index % 3 == 2 else text}

    monkeypatch.setattr(block_cutting, "load_texts", lambda data_args: IterableDataset.from_generator(rows))
    data_args = parse_arguments(args(tmp_path, "--streaming", "true", tokenizer=tokenizer_dir))[2]
    tokenizer = data.load_tokenizer(data_args)
    with pytest.raises(UserError, match=r"the embedded corpus has record 3 without a text in field 'text'"):
        train, _ = data.load_blocks(data_args, tokenizer)
        list(train)
    data_args = replace(data_args, skip_records_without_text=True)
    run_data = data.load_run_data(data_args, tokenizer, seed=0)
    list(run_data.train_blocks), list(run_data.train_blocks), list(run_data.eval_blocks)  # each record counted once
    assert run_data.skipped.message() == (
        "Skipped 100 records of the embedded corpus without a text in field 'text' (--skip_records_without_text "
        "true), of the records the stream was read to."
    )


@pytest.mark.heavy
def test_a_corpus_with_records_without_text_is_refused_or_skipped_with_their_count(
    tmp_path, tokenizer_dir, capsys, monkeypatch
):
    corpus = tmp_path / "half.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in half_without_text(600)))
    output_dir = tmp_path / "run"
    argv = args(output_dir, "--train_files", str(corpus), tokenizer=tokenizer_dir)
    line = refused(argv, capsys, monkeypatch)
    assert f"{corpus} has no field 'text' on line 2" in line and not output_dir.exists()

    main([*argv, "--skip_records_without_text", "true"])
    out = capsys.readouterr().out
    assert f"Skipped 300 of 600 records of train_files {corpus} without a text in field 'text'" in out
    assert json.loads((output_dir / "training_summary.json").read_text())["steps"] == 2


# --- paths of the wrong kind -----------------------------------------------------------------------------------------


def test_a_corpus_folder_is_named_as_a_folder(tmp_path, output_dir, tokenizer_dir, capsys, monkeypatch):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("\n".join(sentences(50)))
    before = snapshot(output_dir)
    argv = args(output_dir, "--train_files", str(tmp_path / "corpus"), tokenizer=tokenizer_dir)
    line = refused(argv, capsys, monkeypatch)
    assert f"train_files: {tmp_path / 'corpus'} is a folder, not a file; pass the corpus files in it" in line
    assert f"e.g. --train_files {tmp_path / 'corpus'}/*.txt" in line and snapshot(output_dir) == before


@pytest.mark.parametrize(
    "kind", ["dangling link", "link inside a dangling link", "file", "empty", "a compared type's folder is a file"]
)
def test_an_output_folder_that_cannot_be_one_is_named(tmp_path, capsys, monkeypatch, kind):
    target = tmp_path / "unmounted" / "runs"
    compare = []
    if kind == "empty":
        output_dir, message = "", "the path is empty; give the folder to write into, e.g. --output_dir runs/demo"
    elif kind == "a compared type's folder is a file":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "symmetric").write_text("a file\n")
        output_dir, compare = tmp_path / "out" / "symmetric", ["--compare", "original,symmetric"]
        message = f"{output_dir} is a file, not a folder"
    elif kind == "file":
        (tmp_path / "out").write_text("a file\n")
        output_dir, message = tmp_path / "out", f"{tmp_path / 'out'} is a file, not a folder"
    else:
        (tmp_path / "out").symlink_to(target)
        output_dir = tmp_path / "out" / ("run" if kind.startswith("link inside") else "")
        message = f"{tmp_path / 'out'} is a symbolic link to {target}, which does not exist"
    if compare:  # the command names the comparison's folder; OUTPUT_DIR/<type> is refused
        line = refused(args(tmp_path / "out", "--train_files", "not-read.txt", *compare), capsys, monkeypatch)
    else:
        line = refused(args(output_dir, "--train_files", "not-read.txt"), capsys, monkeypatch)
    assert f"output_dir='{output_dir}': {message}" in line, line
    assert not (tmp_path / "unmounted").exists() and sorted(path.name for path in tmp_path.iterdir()) in (
        [],
        ["out"],
    )


def test_a_lock_file_that_is_a_folder_is_named(tmp_path, output_dir, tokenizer_dir, capsys, monkeypatch):
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    (output_dir / ".pretrain.lock").mkdir()
    before = snapshot(output_dir)
    line = refused(
        args(output_dir, "--train_files", str(tmp_path / "a.txt"), tokenizer=tokenizer_dir), capsys, monkeypatch
    )
    assert f"{output_dir / '.pretrain.lock'} is a folder, where the run keeps its lock file" in line
    assert snapshot(output_dir) == before and (output_dir / ".pretrain.lock").is_dir()


@pytest.mark.parametrize("target", ["nothing", "a file"])
def test_a_lock_file_that_is_a_link_is_named(tmp_path, output_dir, tokenizer_dir, capsys, monkeypatch, target):
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    if target == "a file":
        (tmp_path / "elsewhere").write_text("someone's file\n")
    (output_dir / ".pretrain.lock").symlink_to(tmp_path / "elsewhere")
    before = snapshot(output_dir)
    line = refused(
        args(output_dir, "--train_files", str(tmp_path / "a.txt"), tokenizer=tokenizer_dir), capsys, monkeypatch
    )
    assert f"{output_dir / '.pretrain.lock'} is a symbolic link (to {tmp_path / 'elsewhere'}), where the run" in line
    assert snapshot(output_dir) == before and (output_dir / ".pretrain.lock").is_symlink()
    assert target == "nothing" or (tmp_path / "elsewhere").read_text() == "someone's file\n"


@pytest.fixture(scope="module")
def finished_comparison(tmp_path_factory, tokenizer_dir):
    """A finished comparison of one type (original), for the tests of what a rerun reuses."""
    root = tmp_path_factory.mktemp("comparison")
    (root / "a.txt").write_text("\n".join(sentences(300)))
    main(args(root / "run", "--train_files", str(root / "a.txt"), "--compare", "original", tokenizer=tokenizer_dir))
    return root


def comparison_copy(finished_comparison, tmp_path):
    """A copy of the finished comparison in tmp_path (its summary naming the copy's blocks), and its arguments."""
    shutil.copytree(finished_comparison / "run", tmp_path / "run")
    summary_path = tmp_path / "run" / "original" / "training_summary.json"
    summary_path.write_text(summary_path.read_text().replace(str(finished_comparison / "run"), str(tmp_path / "run")))
    return args(tmp_path / "run", "--train_files", str(finished_comparison / "a.txt"), "--compare", "original")


# A finished type of a comparison that cannot be reused: (what is done to its folder, the reason named)
UNREUSABLE_RUNS = {
    "weights deleted": (lambda folder: (folder / "model.safetensors").unlink(), "its weights (model.safetensors) are"),
    "weights truncated": (
        lambda folder: (folder / "model.safetensors").write_bytes(b"\x10"),
        "its model.safetensors is unreadable",
    ),
    "garbage trainer state": (
        lambda folder: (folder / "trainer_state.json").write_text("garbage"),
        "its trainer_state.json is missing or unreadable (JSONDecodeError",
    ),
    "garbage summary": (
        lambda folder: (folder / "training_summary.json").write_bytes(b"\xff\xfe"),
        "training_summary.json is not a training summary (UnicodeDecodeError",
    ),
}


@pytest.mark.parametrize("case", UNREUSABLE_RUNS)
def test_a_finished_type_that_cannot_be_reused_is_refused(
    finished_comparison, tmp_path, tokenizer_dir, capsys, monkeypatch, case
):
    argv = comparison_copy(finished_comparison, tmp_path)
    damage, reason = UNREUSABLE_RUNS[case]
    damage(tmp_path / "run" / "original")
    before = snapshot(tmp_path / "run" / "original")
    line = refused([*argv, "--tokenizer", str(tokenizer_dir)], capsys, monkeypatch)
    assert f"{tmp_path / 'run' / 'original'}" in line and reason in line, line
    assert "--overwrite_output_dir true" in line and snapshot(tmp_path / "run" / "original") == before


@pytest.mark.parametrize("saved, reused", [("absent", True), (0.0, True), (0.1, False)])
def test_a_summary_with_or_without_warmup_ratio_is_compared(
    finished_comparison, tmp_path, tokenizer_dir, capsys, monkeypatch, saved, reused
):
    """warmup_ratio, gone from transformers 5, counts as 0 where a summary or this version lacks it: a run saved
    with a ratio (transformers 4.x) is refused, naming it; one without is reused."""
    argv = [*comparison_copy(finished_comparison, tmp_path), "--tokenizer", str(tokenizer_dir)]
    summary_path = tmp_path / "run" / "original" / "training_summary.json"
    summary = json.loads(summary_path.read_text())
    summary["training_arguments"].pop("warmup_ratio", None)
    if saved != "absent":
        summary["training_arguments"]["warmup_ratio"] = saved
    summary_path.write_text(json.dumps(summary))
    if reused:
        main(argv)
        assert "original: already trained in" in capsys.readouterr().out
        assert (tmp_path / "run" / "comparison.md").is_file()
    else:
        line = refused(argv, capsys, monkeypatch)
        assert "holds a finished run of other settings than this comparison: warmup_ratio is 0.1 there" in line


@pytest.mark.heavy
def test_staging_folders_left_as_files_are_removed(tmp_path, output_dir, tokenizer_dir):
    (tmp_path / "a.txt").write_text("\n".join(sentences(300)))
    for name in (".checkpoint-in-progress", ".final-model-in-progress"):
        (output_dir / name).write_text("not a folder\n")
    main(
        args(
            output_dir,
            "--train_files",
            str(tmp_path / "a.txt"),
            "--save_strategy",
            "steps",
            "--save_steps",
            "1",
            tokenizer=tokenizer_dir,
        )
    )
    assert json.loads((output_dir / "training_summary.json").read_text())["steps"] == 2
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (
        not (output_dir / ".checkpoint-in-progress").exists() and not (output_dir / ".final-model-in-progress").exists()
    )
    assert (output_dir / "notes.txt").read_text() == "kept\n"
