"""Tokenise once (training/data/prepared.py): symbert-prepare-data writes memory-mapped blocks and a manifest, whole or not
at all; symbert-pretrain --blocks_dir trains from them exactly as from the texts, and refuses a folder that does not
match the run."""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers.corpora import run_args, tiny_sentences, train_tokenizer
from helpers.runs import assert_same_training, resume_args, resume_from
from symbert.cli import UserError
from symbert.training.arguments import parse_arguments
from symbert.training.data import loading as data
from symbert.training.data import prepared
from symbert.training.data.blocks import ERROR_KEY, Readers, TrainingBlocks
from symbert.training.data.manifest import sealed
from symbert.training.data.tokenizer import train_wordpiece
from symbert.training.pretrain import pretrain


def prepare(args):
    _, _, data_args, training_args = parse_arguments(args)
    return prepared.prepare(data_args, training_args.output_dir, seed=training_args.seed)


@pytest.mark.heavy
def test_training_from_prepared_blocks_equals_training_from_the_texts(corpus, tmp_path):
    manifest = prepare(run_args(corpus, tmp_path / "blocks", "--num_proc", "2"))
    assert manifest["block_length"] == 32 and manifest["held_out"]["blocks"] == 8
    assert sorted(path.name for path in (tmp_path / "blocks").iterdir()) == [
        "held_out.bin",
        "manifest.json",
        "tokenizer",
        "train-00000.bin",
    ]
    # the same arguments, --num_proc included
    data_args = parse_arguments(run_args(corpus, tmp_path, "--num_proc", "2"))[2]
    train, held_out = data.load_blocks(data_args, data.load_tokenizer(data_args), seed=42)
    blocks = prepared.PreparedBlocks(tmp_path / "blocks", manifest["train"]["shards"], 32, np.dtype("uint16"))
    assert blocks.rows(list(range(len(train)))) == train["input_ids"]  # the same blocks in the same order

    from_texts, from_blocks = tmp_path / "from-texts", tmp_path / "from-blocks"
    pretrain(*parse_arguments(run_args(corpus, from_texts, "--save_steps", "100", "--num_proc", "2")))
    blocks_run = run_args(corpus, from_blocks, "--save_steps", "100", "--blocks_dir", str(tmp_path / "blocks"))
    blocks_run = [arg for arg in blocks_run if arg not in ("--train_files", str(corpus / "train.txt"))]
    blocks_run.remove("--tokenizer"), blocks_run.remove(str(corpus / "tokenizer"))  # the folder's own
    pretrain(*parse_arguments(blocks_run))
    assert_same_training(from_blocks, from_texts)


def test_the_blocks_are_the_same_whatever_the_number_of_processes(corpus, tmp_path):
    """Filtering and tokenising run in --num_proc processes, blocking in one: the same blocks, held-out split and
    prepared files for 1, 2 and 4 processes (the corpus is 300 texts: one batch of 1,000, split at 150 or 75 by
    the processes, which would cut other blocks)."""
    found = {}
    for processes in ("1", "2", "4"):
        data_args = parse_arguments(run_args(corpus, tmp_path, "--num_proc", processes))[2]
        train, held_out = data.load_blocks(data_args, data.load_tokenizer(data_args), seed=42)
        prepare(run_args(corpus, tmp_path / f"blocks-{processes}", "--num_proc", processes))
        files = {
            name: (tmp_path / f"blocks-{processes}" / name).read_bytes() for name in ("train-00000.bin", "held_out.bin")
        }
        found[processes] = (train["input_ids"], held_out["input_ids"], files)
    assert found["1"] == found["2"] == found["4"]


def test_a_stream_is_prepared_in_one_shard_per_process(two_file_corpus, tmp_path):  # noqa: F811
    manifest = prepare(resume_args(two_file_corpus, tmp_path / "blocks", "--streaming", "true", "--num_proc", "2"))
    shards = manifest["train"]["shards"]
    assert [shard["file"] for shard in shards] == ["train-00000.bin", "train-00001.bin"]
    assert all(shard["blocks"] > 0 for shard in shards)
    folder = tmp_path / "blocks"
    blocks = prepared.PreparedBlocks(folder, shards, 32, np.dtype("uint16"))
    training = {tuple(row) for row in blocks.rows(list(range(len(blocks))))}
    held_out = prepared.block_map(folder / "held_out.bin", 8, 32, np.dtype("uint16"))
    assert len(training) == len(blocks) and not training & {tuple(row) for row in held_out.tolist()}
    # each process read one of the two files (a shard each): its blocks hold only its file's texts
    tokenizer = data.load_tokenizer(parse_arguments(resume_args(two_file_corpus, tmp_path))[2])
    first_words = [
        {tokenizer(line)["input_ids"][1] for line in (two_file_corpus / f"part{i}.txt").read_text().splitlines()}
        for i in range(2)
    ]
    for index, shard in enumerate(shards):
        rows = prepared.block_map(folder / shard["file"], shard["blocks"], 32, np.dtype("uint16"))
        starts = {row[position + 1] for row in rows.tolist() for position, token in enumerate(row[:-1]) if token == 2}
        assert starts <= first_words[index] | {3}  # [CLS] (id 2) is followed by a first word of that file's texts


@pytest.fixture(scope="module")
def prepared_folder(tmp_path_factory, corpus):
    folder = tmp_path_factory.mktemp("prepared") / "blocks"
    prepare(run_args(corpus, folder))
    return folder


def blocks_run_args(corpus, folder, output_dir, *extra):
    args = run_args(corpus, output_dir, "--blocks_dir", str(folder), *extra)
    return [arg for arg in args if arg not in ("--train_files", str(corpus / "train.txt"))]


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--max_seq_length", "16"), r"holds blocks of 32 tokens but this run's max_seq_length is 16"),
        (("--config_overrides", '{"vocab_size": 100}'), r"vocab_size"),
    ],
    ids=["block length", "vocabulary"],
)
def test_a_folder_that_does_not_match_the_run_is_refused(corpus, prepared_folder, tmp_path, extra, message):
    with pytest.raises(UserError, match=message):
        pretrain(*parse_arguments(blocks_run_args(corpus, prepared_folder, tmp_path / "run", *extra)))
    assert not (tmp_path / "run").exists()


def test_another_tokenizer_is_refused_naming_both(corpus, prepared_folder, tmp_path):
    other = tmp_path / "other-tokenizer"
    train_wordpiece(["completely different words here"] * 50, vocab_size=120).save_pretrained(other)
    args = blocks_run_args(corpus, prepared_folder, tmp_path / "run")
    args[args.index("--tokenizer") + 1] = str(other)
    fingerprint = json.loads((prepared_folder / "manifest.json").read_text())["tokenizer"]["fingerprint"]
    with pytest.raises(UserError, match=rf"fingerprint {fingerprint}\) but this run's tokenizer .* has fingerprint"):
        pretrain(*parse_arguments(args))


def edit_manifest(folder, field, value):
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["train"]["shards"][0][field] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))


def set_manifest(folder, file, field, value):
    """Set `field` of the shard named `file` (a training shard or the held-out one) in the folder's manifest, sealed
    again with its own digest as a preparation would write it."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for shard in [*manifest["train"]["shards"], manifest["held_out"]]:
        if shard["file"] == file:
            shard[field] = value
    (folder / "manifest.json").write_text(json.dumps(sealed(manifest)))


def edit_top(folder, edit):
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def swap_shard(folder):
    """Same size, other blocks: the held-out blocks' bytes in place of the training shard's first ones."""
    train, held_out = (folder / "train-00000.bin").read_bytes(), (folder / "held_out.bin").read_bytes()
    (folder / "train-00000.bin").write_bytes(held_out + train[len(held_out) :])


def copy_shard(folder):
    """The training shard copied under another name and listed with its true digest (the manifest sealed again)."""
    shutil.copyfile(folder / "train-00000.bin", folder / "train-00001.bin")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["train"]["shards"].append({**manifest["train"]["shards"][0], "file": "train-00001.bin"})
    (folder / "manifest.json").write_text(json.dumps(sealed(manifest)))


def link_shard(folder):
    outside = folder.parent / "outside.bin"
    (folder / "train-00000.bin").rename(outside)
    (folder / "train-00000.bin").symlink_to(outside)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda folder: (folder / "manifest.json").unlink(), "has no manifest.json"),
        (
            lambda folder: (folder / "manifest.json").write_text("{not json"),
            "is not a manifest of symbert-prepare-data",
        ),
        (lambda folder: (folder / "train-00000.bin").write_bytes(b"\0" * 10), "holds 10 bytes but the manifest names"),
        (lambda folder: (folder / "held_out.bin").unlink(), r"holds nothing \(missing\)"),
        (
            lambda folder: edit_manifest(folder, "file", "../../etc/passwd"),
            r"shard '\.\./\.\./etc/passwd' is not a file",
        ),
        (lambda folder: edit_manifest(folder, "blocks", "10"), r"has '10' blocks, not a count"),
        (swap_shard, r"train-00000.bin is not the shard that was prepared \(its sha256 differs"),
        (link_shard, r"train-00000.bin is a link; a prepared folder holds its shards itself"),
        (
            lambda folder: edit_top(folder, lambda m: m["train"]["shards"].append(dict(m["train"]["shards"][0]))),
            r"train-00000.bin is listed more than once",
        ),
        (lambda folder: edit_manifest(folder, "file", "held_out.bin"), r"held_out.bin is listed more than once"),
        (copy_shard, r"train-00000.bin and train-00001.bin hold the same blocks \(sha256 [0-9a-f]{16}\.\.\.\), which"),
        (
            lambda folder: edit_top(folder, lambda m: m["data_arguments"].update(train_files=["other.txt"])),
            r"its sha256 '[0-9a-f]{64}' is not that of its fields: it was edited after preparation",
        ),
        (lambda folder: edit_top(folder, lambda m: m.pop("sha256")), r"its sha256 None is not that of its fields"),
        (lambda folder: edit_top(folder, lambda m: m.update(dtype="int16")), r"dtype 'int16' is not one of uint16"),
        (lambda folder: edit_top(folder, lambda m: m.update(block_length=32.0)), r"block_length 32.0 is not a"),
        (lambda folder: edit_top(folder, lambda m: m.pop("tokenizer")), r"it names no tokenizer fingerprint"),
        (lambda folder: edit_top(folder, lambda m: m.update(train={})), r"it lists no training shard"),
        (lambda folder: edit_top(folder, lambda m: m.pop("held_out")), r"it names no held-out file"),
        (lambda folder: edit_top(folder, lambda m: m["held_out"].pop("sha256")), r"'held_out.bin' has no sha256"),
        (lambda folder: (folder / "manifest.json").write_text("[" * 100_000), r"RecursionError"),
        (lambda folder: (folder / "manifest.json").write_text("[1, 2]"), r"holds a list, not an object"),
        (
            lambda folder: (folder / "tokenizer" / "tokenizer.json").write_text('{"model": 3}'),
            r"tokenizer is not a tokenizer that loads \(.*\); the prepared folder is damaged",
        ),
    ],
    ids=[
        "no manifest",
        "garbage manifest",
        "truncated shard",
        "missing held-out",
        "path out of the folder",
        "typed count",
        "swapped shard",
        "linked shard",
        "shard listed twice",
        "held-out file as a shard",
        "shard copied under another name",
        "edited data arguments",
        "no manifest digest",
        "signed ids",
        "float length",
        "no tokenizer",
        "no shards",
        "no held-out",
        "no digest",
        "deeply nested",
        "not an object",
        "corrupt tokenizer",
    ],
)
def test_a_damaged_folder_is_one_line(corpus, prepared_folder, tmp_path, damage, message):
    folder = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(prepared_folder), str(folder)], check=True)
    damage(folder)
    args = [arg for arg in blocks_run_args(corpus, folder, tmp_path / "run") if arg != "--tokenizer"]
    args.remove(str(corpus / "tokenizer"))  # the folder's own tokenizer, as a user would leave it
    with pytest.raises(UserError, match=message) as error:
        data_args = parse_arguments(args)[2]
        data.load_blocks(data_args, data.load_tokenizer(data_args))
    assert "\n" not in str(error.value)


def test_the_held_out_file_is_the_one_the_manifest_names(corpus, prepared_folder, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(prepared_folder, folder)
    (folder / "held_out.bin").rename(folder / "other.bin")
    set_manifest(folder, "held_out.bin", "file", "other.bin")
    data_args = parse_arguments(blocks_run_args(corpus, folder, tmp_path / "run"))[2]
    _, held_out = data.load_blocks(data_args, data.load_tokenizer(data_args))
    expected = np.fromfile(folder / "other.bin", dtype=np.uint16).reshape(-1, 32)
    assert held_out["input_ids"] == expected.tolist()


@pytest.mark.parametrize(
    "version, notice",
    [
        (1, "its shards are checked by size only"),
        (2, "its manifest is covered by no digest (an edit of it is not noticed)"),
    ],
)
def test_a_folder_of_an_earlier_version_is_read_with_a_notice(
    corpus, prepared_folder, tmp_path, capsys, version, notice
):
    """Version 1 has no shard digests (its shards are checked by size), version 2 no digest of the manifest itself
    (an edit of it, here of its data arguments, is read)."""
    folder = tmp_path / "copy"
    shutil.copytree(prepared_folder, folder)

    def earlier(manifest):
        manifest["version"] = version
        del manifest["sha256"]
        manifest["data_arguments"]["num_proc"] = 3
        for shard in [*manifest["train"]["shards"], manifest["held_out"]] if version == 1 else ():
            del shard["sha256"]

    edit_top(folder, earlier)
    data_args = parse_arguments(blocks_run_args(corpus, folder, tmp_path / "run"))[2]
    train, _ = data.load_blocks(data_args, data.load_tokenizer(data_args))
    assert len(train) == json.loads((prepared_folder / "manifest.json").read_text())["train"]["blocks"]
    assert f"prepared by an older symbert-prepare-data: {notice}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "option, value",
    [("train_files", "other.txt"), ("eval_blocks", "9"), ("streaming", "true"), ("dataset_name", "wikitext")],
)
def test_a_data_option_beside_blocks_dir_that_contradicts_it_is_refused(
    corpus, prepared_folder, tmp_path, option, value
):
    args = [*blocks_run_args(corpus, prepared_folder, tmp_path / "run"), f"--{option}", value]
    prepared_value = json.loads((prepared_folder / "manifest.json").read_text())["data_arguments"][option]
    with pytest.raises(
        UserError,
        match=rf"^--{option} .* was given with --blocks_dir .*prepared with {option}="
        rf"{re.escape(repr(prepared_value))} .*leave out --{option}",
    ):
        parse_arguments(args)
    assert not (tmp_path / "run").exists()


def test_a_blocks_dir_run_records_the_data_it_was_prepared_from(corpus, prepared_folder, tmp_path):
    """The same value as the preparation is no conflict; a value the command line left out is the folder's."""
    args = [*blocks_run_args(corpus, prepared_folder, tmp_path / "run"), "--eval_blocks", "8"]
    data_args = parse_arguments(args)[2]
    assert data_args.train_files == [str(corpus / "train.txt")] and data_args.eval_blocks == 8
    assert data_args.blocks_dir == str(prepared_folder)


@pytest.mark.parametrize("name", ["train-00000.bin", "held_out.bin"])
def test_an_id_past_the_tokenizer_is_refused(corpus, prepared_folder, tmp_path, name):
    """A damaged shard's id in the range --pad_vocab_to_multiple_of adds (a padding row no token uses), named with
    the file and block: the held-out blocks when loaded, a training block when read."""
    folder = tmp_path / "copy"
    shutil.copytree(prepared_folder, folder)
    vocab_size = json.loads((folder / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    ids = np.fromfile(folder / name, dtype=np.uint16)
    ids[32 + 5] = vocab_size + 3  # block 1
    ids.tofile(folder / name)
    set_manifest(folder, name, "sha256", prepared.file_sha256(folder / name))  # as a faulty preparation would write it
    data_args = parse_arguments(blocks_run_args(corpus, folder, tmp_path / "run", "--pad_vocab_to_multiple_of", "64"))[
        2
    ]
    where = folder / name if name == "held_out.bin" else f"{folder / name}, block 1"
    message = f"{where} holds token id {vocab_size + 3}, but the tokenizer has {vocab_size} tokens (ids 0 to "
    with pytest.raises(UserError, match=re.escape(message)):
        train, _ = data.load_blocks(data_args, data.load_tokenizer(data_args))
        assert train.rows([0, 2])  # blocks without it read
        train.rows([1])


def test_an_existing_folder_is_never_prepared_into(corpus, prepared_folder):
    before = sorted(path.name for path in prepared_folder.iterdir())
    with pytest.raises(UserError, match="already exists and is not empty"):
        prepare(run_args(corpus, prepared_folder))
    assert sorted(path.name for path in prepared_folder.iterdir()) == before


def test_a_corpus_that_gives_two_equal_shards_is_refused_and_leaves_nothing(tmp_path):
    """Two files of the same texts (not the same bytes: one more blank line), streamed by two processes: the shards
    would be equal, and a pass would read their blocks twice."""
    lines = tiny_sentences(240, seed=1)
    for index in range(2):
        (tmp_path / f"part{index}.txt").write_text("\n".join(lines) + "\n" * (index + 1))
    train_tokenizer(tmp_path / "tokenizer", lines)
    files = (str(tmp_path / "part0.txt"), str(tmp_path / "part1.txt"))
    args = run_args(tmp_path, tmp_path / "blocks", "--train_files", *files, "--streaming", "true", "--num_proc", "2")
    with pytest.raises(
        UserError, match=r"train-00000.bin and train-00001.bin hold the same blocks .* the corpus holds"
    ):
        prepare(args)
    assert not (tmp_path / "blocks").exists() and not list(tmp_path.glob(".blocks*"))


@pytest.mark.parametrize("processes", [1, 2], ids=["one process", "two processes streaming"])
def test_a_full_disk_is_one_line_and_leaves_nothing(corpus, tmp_path, monkeypatch, processes):
    def full_disk(path, blocks, dtype):  # in the forked processes too, which write the shards
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(prepared, "write_blocks", full_disk)
    extra = ("--streaming", "true", "--num_proc", "2") if processes == 2 else ()
    with pytest.raises(
        UserError, match=r"Cannot write the prepared blocks next to '.*blocks': No space left on device \(.* GiB free"
    ):
        prepare(run_args(corpus, tmp_path / "blocks", *extra))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.heavy
def test_a_killed_preparation_leaves_no_folder_and_a_rerun_finishes(corpus, tmp_path):
    driver = (
        "import os, signal, sys\n"
        "from symbert.training import prepare_data\n"
        "from symbert.training.data import prepared\n"
        "original = prepared.write_blocks\n"
        "def write_then_die(path, *args):\n"
        "    original(path, *args)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "prepared.write_blocks = write_then_die\n"
        "prepare_data.main(sys.argv[1:])\n"
    )
    folder = tmp_path / "blocks"
    killed = subprocess.Popen([sys.executable, "-c", driver, *run_args(corpus, folder)], stdout=subprocess.DEVNULL)
    assert killed.wait() == -signal.SIGKILL
    assert not folder.exists()  # the half-written folder is under a temporary name
    left = sorted(path.name for path in tmp_path.iterdir() if path.name != ".blocks.prepare.lock")
    assert len(left) == 1 and re.fullmatch(rf"\.blocks\.{killed.pid}-\w+\.prepare", left[0]), left
    with pytest.raises(UserError, match="has no manifest.json|is not a folder"):
        data.load_blocks(parse_arguments(blocks_run_args(corpus, folder, tmp_path / "run"))[2], None)
    manifest = prepare(run_args(corpus, folder))
    assert sorted(os.listdir(tmp_path)) == ["blocks"] and manifest["held_out"]["blocks"] == 8


def test_a_hub_dataset_streamed_is_prepared_by_row_group(corpus, tmp_path):
    """A dataset given by name (here a local folder in the Hub's layout: what load_dataset reads from the Hub after
    the download) of Parquet files, streamed: resharded by row group, split between two processes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = (corpus / "train.txt").read_text().splitlines()
    dataset = tmp_path / "hub-dataset" / "data"
    dataset.mkdir(parents=True)
    pq.write_table(pa.table({"text": lines}), dataset / "train-00000-of-00001.parquet", row_group_size=100)
    args = run_args(corpus, tmp_path / "blocks", "--dataset_name", str(dataset.parent), "--streaming", "true")
    args = [arg for arg in args if arg not in ("--train_files", str(corpus / "train.txt"))] + ["--num_proc", "2"]
    manifest = prepare(args)
    assert manifest["source"].startswith(f"dataset {str(dataset.parent)!r}")
    # one Parquet file of 6 row groups: two processes, each with whole row groups of its own
    assert [shard["file"] for shard in manifest["train"]["shards"]] == ["train-00000.bin", "train-00001.bin"]
    counts = [shard["blocks"] for shard in manifest["train"]["shards"]]
    assert min(counts) > 0 and abs(counts[0] - counts[1]) <= max(counts) // 2


def test_a_stream_prepared_by_one_process_reads_back(two_file_corpus, tmp_path):  # noqa: F811
    manifest = prepare(resume_args(two_file_corpus, tmp_path / "blocks", "--streaming", "true"))
    assert prepared.read_manifest(tmp_path / "blocks") == manifest  # shard sizes agree with the manifest
    (shard,) = manifest["train"]["shards"]
    assert shard["blocks"] * 32 * 2 == (tmp_path / "blocks" / shard["file"]).stat().st_size


def test_a_second_preparation_into_the_same_folder_at_once_is_refused(corpus, tmp_path):
    from filelock import FileLock

    with FileLock(tmp_path / ".blocks.prepare.lock"):  # as a preparation running in another process holds it
        with pytest.raises(UserError, match="is being prepared by another symbert-prepare-data"):
            prepare(run_args(corpus, tmp_path / "blocks"))
    assert not (tmp_path / "blocks").exists()


@pytest.mark.heavy
def test_the_training_is_the_same_whatever_the_number_of_dataloader_workers_and_processes(corpus, tmp_path):
    runs = {}
    for workers, processes in (("0", "1"), ("2", "2")):
        output = tmp_path / f"workers-{workers}"
        extra = ("--dataloader_num_workers", workers, "--num_proc", processes, "--save_steps", "100")
        pretrain(*parse_arguments(run_args(corpus, output, *extra)))
        runs[workers] = output
    assert_same_training(runs["2"], runs["0"])


@pytest.fixture(scope="module")
def two_shard_run(two_file_corpus, tmp_path_factory):  # noqa: F811
    """A folder prepared from a stream in two shards, and a run of 4 steps from it with a checkpoint at step 2."""
    root = tmp_path_factory.mktemp("two-shards")
    prepare(resume_args(two_file_corpus, root / "blocks", "--streaming", "true", "--num_proc", "2"))
    pretrain(*parse_arguments(two_shard_args(two_file_corpus, root / "blocks", root / "straight")))
    return root / "blocks", root / "straight"


def two_shard_args(corpus, folder, output_dir):
    extra = ("--streaming", "true", "--max_steps", "4", "--save_steps", "2", "--eval_steps", "2")
    return resume_args(corpus, output_dir, "--blocks_dir", str(folder), *extra)


@pytest.mark.heavy
@pytest.mark.parametrize(
    "seal, message",
    [
        (
            True,
            r"Cannot resume from .*checkpoint-2: the training data are not those it was trained on \(contents \(the "
            r"data in the order read\) hold at 0 train-00000.bin \(sha256 [0-9a-f]{16}\) there but train-00001.bin",
        ),
        (False, r"manifest.json is not a manifest of symbert-prepare-data: its sha256 .* was edited after preparation"),
    ],
    ids=["sealed again", "as edited"],
)
def test_a_resume_on_swapped_shard_entries_is_refused(two_file_corpus, two_shard_run, tmp_path, seal, message):  # noqa: F811
    """The two shards' entries swapped in the manifest, digests and counts included: every shard is still the one
    its entry names, but a pass reads them in another order. A manifest sealed again is refused by the order the
    checkpoint recorded; as edited, by the manifest's own digest."""
    prepared_folder, straight = two_shard_run
    folder = tmp_path / "blocks"
    shutil.copytree(prepared_folder, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["train"]["shards"].reverse()
    (folder / "manifest.json").write_text(json.dumps(sealed(manifest) if seal else manifest))
    resumed = tmp_path / "resumed"
    with pytest.raises(UserError, match=message):
        resume_from(straight, 2, resumed, two_shard_args(two_file_corpus, folder, resumed))


def rewrite_in_place(path):
    data = path.read_bytes()
    with open(path, "r+b") as file:  # the same file and size, other blocks
        file.write(data[64:] + data[:64])


def replace_file(path):
    path.with_name("new.bin").write_bytes(path.read_bytes())  # the same blocks in another file renamed over it
    os.replace(path.with_name("new.bin"), path)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "change, reads_before",
    [(rewrite_in_place, 3), (lambda path: os.truncate(path, 64 * 50), 3), (replace_file, 0)],
    ids=["rewritten in place", "cut short", "replaced before it is opened"],
)
def test_a_shard_changed_during_a_run_is_refused_where_it_is_read(
    corpus, prepared_folder, tmp_path, change, reads_before, workers
):
    """A shard changed after the run checked its digest is refused when a micro-batch reads it (one fstat of each
    shard a micro-batch reads), in one line from a dataloader worker too; a file renamed over it when it is opened."""
    folder = tmp_path / "copy"
    shutil.copytree(prepared_folder, folder)
    data_args = parse_arguments(blocks_run_args(corpus, folder, tmp_path / "run"))[2]
    train, _ = data.load_blocks(data_args, data.load_tokenizer(data_args))
    blocks = TrainingBlocks(train, batch_size=4, seed=0, readers=Readers(workers=workers))
    batches = iter(torch.utils.data.DataLoader(blocks, batch_size=None, num_workers=workers, collate_fn=lambda x: x))
    assert all("blocks" in next(batches) for _ in range(reads_before))
    change(folder / "train-00000.bin")
    message = f"{folder / 'train-00000.bin'} changed during the run (its size, modification time or file is not"
    with pytest.raises(UserError, match=re.escape(message)) as error:
        for _, batch in zip(range(20), batches, strict=False):  # the batches read before the change, then one after
            if ERROR_KEY in batch:
                raise UserError(batch[ERROR_KEY])
    assert "\n" not in str(error.value)
