"""What `symbert-to-bert`, `symbert-onnx` and `symbert-symmetry` do with a bad model folder or output path (and
`symbert-convert` with a bad output path or a write that fails): one line on
stderr naming the value and what is allowed, exit status 2, before anything is built or written; an earlier output
left as it was. The checks they share are in `symbert.tools` (the output path, config.json against the weights'
headers, the loading)."""

import json
import os
import shutil
import sys
import time

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, PreTrainedModel

import symbert
from helpers.corpora import tiny_corpus, tiny_sentences
from helpers.tiny import MAX_POSITIONS, VOCAB_SIZE, bert_teacher, tiny_config
from symbert.tools import bert_export, convert, onnx_export, symmetry

COMMANDS = {"symbert-to-bert": bert_export, "symbert-onnx": onnx_export, "symbert-symmetry": symmetry}
# the commands that write a folder or file, with symbert-convert, which reads a BERT folder (`bert`), not `saved`
WRITERS = {**COMMANDS, "symbert-convert": convert}
WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A pairwise MLM folder (2 layers, hidden 128): every tool reads it."""
    folder = tmp_path_factory.mktemp("pairwise")
    torch.manual_seed(0)
    symbert.SymBertForMaskedLM(tiny_config("pairwise")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT with its tokenizer: what symbert-convert reads."""
    root = tmp_path_factory.mktemp("bert")
    corpus = tiny_corpus(root / "corpus", tiny_sentences(120, seed=4), vocab_size=120)
    return bert_teacher(root / "bert", AutoTokenizer.from_pretrained(corpus / "tokenizer"), seed=6)


def argv_for(name, model, output):
    if name == "symbert-convert":
        return [str(model), str(output), "--attention_type", "symmetric", "--held_out", "8"]
    return [str(model), "--output_dir", str(output)] if name == "symbert-symmetry" else [str(model), str(output)]


def refused(monkeypatch, capsys, name, argv):
    """The one line `name argv` prints for a user error, checked to be one line with exit status 2."""
    monkeypatch.setattr(sys, "argv", [name])
    monkeypatch.delenv("SYMBERT_DEBUG", raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        WRITERS[name].main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith(f"{name}: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def copy_with(saved, tmp_path, config=None, tensors=None):
    """A copy of `saved` with config.json's fields updated by `config` and the weights changed by `tensors`."""
    folder = shutil.copytree(saved, tmp_path / "model")
    if config:
        path = folder / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if tensors:
        weights = load_file(folder / WEIGHTS)
        save_file(tensors(weights), folder / WEIGHTS, metadata={"format": "pt"})
    return folder


def output_for(name, tmp_path):
    return tmp_path / ("out.onnx" if name == "symbert-onnx" else "out")


# ---------------------------------------------------------------- config.json against the weights

ABSURD = {  # field: (value, what the weights hold, the tensor that shows it)
    "num_hidden_layers": (100_000, None, None),
    "hidden_size": (10**7, 128, f"bert.embeddings.word_embeddings.weight has shape [{VOCAB_SIZE}, 128]"),
    "vocab_size": (10**9, VOCAB_SIZE, f"bert.embeddings.word_embeddings.weight has shape [{VOCAB_SIZE}, 128]"),
    "max_position_embeddings": (
        10**8,
        MAX_POSITIONS,
        f"bert.embeddings.position_embeddings.weight has shape [{MAX_POSITIONS}, 128]",
    ),
    "intermediate_size": (10**9, 512, "bert.encoder.layer.0.intermediate.dense.weight has shape [512, 128]"),
}


@pytest.mark.parametrize("field", ABSURD)
@pytest.mark.parametrize("name", COMMANDS)
def test_a_config_that_disagrees_with_its_weights_is_refused_before_building(
    saved, tmp_path, monkeypatch, capsys, name, field
):
    """Built, such a config runs for minutes and may exhaust memory; the weights' headers show it is not theirs."""
    value, held, shown = ABSURD[field]
    folder = copy_with(saved, tmp_path, config={field: value})
    start = time.monotonic()
    err = refused(monkeypatch, capsys, name, argv_for(name, folder, output_for(name, tmp_path)))
    assert time.monotonic() - start < 30  # building 100,000 layers alone takes minutes
    where = f"{folder / 'config.json'}: {field}={value} disagrees with the weights in {folder / WEIGHTS}"
    if field == "num_hidden_layers":
        assert err.endswith(f"{where}, which hold 2 layers (encoder.layer.N for N = 0, 1); allowed: 2, layers 0 to 1")
    else:
        assert err.endswith(f"{where}, whose {shown}; allowed: {held}")
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_weights_missing_a_layer_are_refused(saved, tmp_path, monkeypatch, capsys):
    """Weights holding layers 0 and 2 for a config of 2 layers: the count agrees, the layers do not."""

    def renumber(weights):
        return {k.replace("encoder.layer.1.", "encoder.layer.2."): v for k, v in weights.items()}

    folder = copy_with(saved, tmp_path, config={"num_hidden_layers": 2}, tensors=renumber)
    err = refused(monkeypatch, capsys, "symbert-symmetry", [str(folder), "--output_dir", str(tmp_path / "out")])
    assert err.endswith("which hold 2 layers (encoder.layer.N for N = 0, 2); allowed: 2, layers 0 to 1")
    assert sorted(os.listdir(tmp_path)) == ["model"]


# ---------------------------------------------------------------- output paths


def blocked_outputs(tmp_path, name):
    """(output path, what the refusal says) for outputs that cannot be written; made in `tmp_path`."""
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    (tmp_path / "broken.onnx").symlink_to(tmp_path / "nowhere")
    (tmp_path / "link-to-file.onnx").symlink_to(tmp_path / "a-file")
    (tmp_path / "a-folder.onnx").mkdir()
    inside = "out.onnx" if name == "symbert-onnx" else "out"
    cases = [
        (
            tmp_path / "a-file" / inside,
            f"lies inside {str(tmp_path / 'a-file')!r}, which is a file; choose a new path.",
        ),
        (tmp_path / "broken" / inside, f"lies inside {str(tmp_path / 'broken')!r}, which is a broken symbolic link"),
        (tmp_path / "a-file" / "deeper" / inside, f"lies inside {str(tmp_path / 'a-file')!r}, which is a file"),
    ]
    if name == "symbert-onnx":
        allowed = "allowed: the path of a file (an existing file is replaced), not a link."
        cases += [
            (tmp_path / "broken.onnx", f"output={str(tmp_path / 'broken.onnx')!r} is a symbolic link; {allowed}"),
            (tmp_path / "link-to-file.onnx", f"={str(tmp_path / 'link-to-file.onnx')!r} is a symbolic link; {allowed}"),
            (tmp_path / "a-folder.onnx", "is a folder (or another non-file); give the path of a file."),
        ]
    elif name == "symbert-convert":
        cases += [
            (tmp_path / "a-file", f"output={str(tmp_path / 'a-file')!r} exists and is not an empty folder"),
            (tmp_path / "broken", "is a symbolic link; allowed: a new or empty folder, not a link."),
        ]
    else:
        cases += [
            (
                tmp_path / "a-file",
                f"--output_dir={str(tmp_path / 'a-file')!r} is a file, not a folder; choose a folder.",
            ),
            (tmp_path / "broken", "is a symbolic link; allowed: a folder (made if missing), not a link."),
        ]
    return cases


@pytest.mark.parametrize("name", ["symbert-onnx", "symbert-symmetry", "symbert-convert"])
def test_an_output_that_cannot_be_written_is_one_line_and_nothing_is_written(
    saved, bert, tmp_path, monkeypatch, capsys, name
):
    """A path inside a file or a broken link, a link, a file for a folder or a folder for a file: refused before the
    model is read (to-bert: `test_bert_export::test_bad_models_and_outputs_are_refused_by_name_and_nothing_is_written`)."""
    work = tmp_path / "work"
    work.mkdir()
    cases = blocked_outputs(work, name)
    before = {p.name: (p.is_symlink(), p.is_file() and p.read_text()) for p in work.iterdir()}
    model = bert if name == "symbert-convert" else saved
    for output, named in cases:
        err = refused(monkeypatch, capsys, name, argv_for(name, model, output))
        assert named in err, (output, err)
    assert {p.name: (p.is_symlink(), p.is_file() and p.read_text()) for p in work.iterdir()} == before
    assert not (work / "nowhere").exists() and os.listdir(work / "a-folder.onnx") == []


@pytest.mark.parametrize("name, what", [("symbert-to-bert", "the export"), ("symbert-convert", "the converted model")])
def test_a_full_disk_while_a_folder_is_written_is_one_line_and_leaves_nothing(
    saved, bert, tmp_path, monkeypatch, capsys, name, what
):
    """The model's writer failing as safetensors reports a full disk: one line naming the output and the free space;
    neither the output, its parents nor a staging folder is left."""
    from safetensors import SafetensorError

    def full_disk(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    output = tmp_path / "new" / "out"
    err = refused(monkeypatch, capsys, name, argv_for(name, bert if name == "symbert-convert" else saved, output))
    assert f"Cannot write {what} next to {str(output)!r}: No space left on device (" in err, err
    assert err.endswith(" GiB free on its disk); nothing was written."), err
    assert os.listdir(tmp_path) == []


def test_symmetry_output_files_that_are_folders_are_refused(saved, tmp_path, monkeypatch, capsys):
    """symmetry.csv or .png as a folder in --output_dir: os.replace would fail after the analysis."""
    (tmp_path / "out" / "symmetry.png").mkdir(parents=True)
    err = refused(monkeypatch, capsys, "symbert-symmetry", [str(saved), "--output_dir", str(tmp_path / "out")])
    assert err.endswith(
        f"output={str(tmp_path / 'out' / 'symmetry.png')!r} is a folder (or another non-file); give the path of a file."
    )
    assert os.listdir(tmp_path / "out") == ["symmetry.png"]


def test_symmetry_makes_a_missing_output_folder(saved, tmp_path, capsys):
    """A missing --output_dir (and its parents) is made, as symbert-to-bert makes its output's parents."""
    symmetry.main([str(saved), "--output_dir", str(tmp_path / "new" / "deeper")])
    assert sorted(os.listdir(tmp_path / "new" / "deeper")) == ["symmetry.csv", "symmetry.png"]


def test_a_refused_to_bert_export_removes_the_parents_it_made(saved, tmp_path, monkeypatch):
    """The output's missing parents are made for the export, and removed again when it is refused."""
    monkeypatch.setattr(bert_export, "BOUND", 0.0)
    monkeypatch.setattr(bert_export, "relative_difference", lambda *_: 3e-7)
    with pytest.raises(symbert.cli.UserError, match="nothing was written"):
        bert_export.export_to_bert(str(saved), tmp_path / "new" / "deeper" / "bert")
    assert os.listdir(tmp_path) == []


@pytest.mark.heavy
def test_onnx_makes_a_missing_output_folder_and_removes_it_when_refused(saved, tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    onnx_export.main([str(saved), str(tmp_path / "new" / "deeper" / "model.onnx")])
    assert os.listdir(tmp_path / "new" / "deeper") == ["model.onnx"]
    monkeypatch.setattr(onnx_export, "max_difference", lambda model, path: 1.0)  # an export that does not match
    err = refused(monkeypatch, capsys, "symbert-onnx", [str(saved), str(tmp_path / "other" / "model.onnx")])
    assert "differs from PyTorch by 1.00e+00" in err
    assert os.listdir(tmp_path) == ["new"]


# ---------------------------------------------------------------- damaged weights


def truncated(saved, tmp_path):
    folder = copy_with(saved, tmp_path)
    weights = folder / WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


def with_integers(names=None, dtype=torch.int64):
    """The weights with the named tensors (all when None) as integers of `dtype`."""

    def change(weights):
        return {k: v.to(dtype) if names is None or k in names else v for k, v in weights.items()}

    return change


def earlier_output(name, tmp_path):
    """An output an earlier run wrote, which a refused run must leave as it was: ONNX replaces its file, symmetry the
    files in its folder (to-bert never writes into an existing one)."""
    output = output_for(name, tmp_path)
    if name == "symbert-onnx":
        output.write_bytes(b"an earlier export")
    elif name == "symbert-symmetry":
        output.mkdir()
        (output / "symmetry.csv").write_text("layer,head,symmetric_share\n")
    return output, files_outside_the_model(tmp_path)


def files_outside_the_model(tmp_path):
    """{path: bytes} of every file under `tmp_path` but the model folder's: what a refused command must leave as is."""
    return {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "model" not in p.parts}


@pytest.mark.parametrize("name", COMMANDS)
def test_truncated_weights_are_named_in_one_line(saved, tmp_path, monkeypatch, capsys, name):
    folder = truncated(saved, tmp_path)
    output, files = earlier_output(name, tmp_path)
    err = refused(monkeypatch, capsys, name, argv_for(name, folder, output))
    assert err.endswith(
        f"error: {folder / WEIGHTS}: its weights cannot be read (Error while deserializing header: incomplete "
        "metadata, file not fully covered); the file is truncated or corrupt: save or download the model again."
    )
    assert files_outside_the_model(tmp_path) == files
    assert (output.exists() or name == "symbert-to-bert") and not any(".tmp" in p.name for p in tmp_path.iterdir())


INTEGER_CASES = {  # what is cast to integers -> the tensor named (the first: embeddings, then layer by layer)
    "all int64": (with_integers(), "bert.embeddings.LayerNorm.bias", "int64"),
    "one attention tensor int8": (
        with_integers({"bert.encoder.layer.1.attention.self.pairwise"}, torch.int8),
        "bert.encoder.layer.1.attention.self.pairwise",
        "int8",
    ),
}


@pytest.mark.parametrize("case", INTEGER_CASES)
@pytest.mark.parametrize("name", COMMANDS)
def test_integer_weights_are_refused_naming_the_first(saved, tmp_path, monkeypatch, capsys, name, case):
    """Cast to floats, integer weights would be scored (symmetry) or exported as if trained; transformers 5 casts
    them silently."""
    change, tensor, dtype = INTEGER_CASES[case]
    folder = copy_with(saved, tmp_path, tensors=change)
    output, files = earlier_output(name, tmp_path)
    err = refused(monkeypatch, capsys, name, argv_for(name, folder, output))
    assert err.endswith(
        f"error: {folder / WEIGHTS}: the tensor {tensor} holds integers ({dtype}); the model's weights are floating "
        "point (float32, float16 or bfloat16): save the checkpoint in one of those dtypes."
    )
    assert files_outside_the_model(tmp_path) == files


def test_an_integer_buffer_is_no_weight(saved, tmp_path, capsys):
    """Old BERT checkpoints save position_ids (int64): not a weight, so the analysis runs."""

    def add_position_ids(weights):
        return {**weights, "bert.embeddings.position_ids": torch.arange(MAX_POSITIONS)[None]}

    folder = copy_with(saved, tmp_path, tensors=add_position_ids)
    symmetry.main([str(folder), "--output_dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "symmetry.csv").is_file()


def test_onnx_turns_the_loaders_refusal_into_one_line_and_a_bug_still_raises(saved, tmp_path, monkeypatch, capsys):
    """A tensor of another shape passes the header check (the sizes agree) and is refused by the model loader: one
    line. An error the loader does not raise for bad input (here an AttributeError) is a bug: its traceback stays."""

    def reshape(weights):
        return {**weights, "bert.encoder.layer.1.output.dense.bias": torch.zeros(5)}

    folder = copy_with(saved, tmp_path, tensors=reshape)
    err = refused(monkeypatch, capsys, "symbert-onnx", [str(folder), str(tmp_path / "out.onnx")])
    assert f"error: Cannot load {str(folder)!r}: " in err
    assert "has tensors of another shape than the model: encoder.layer.1.output.dense.bias: [5] in" in err

    def bug(*args, **kwargs):
        raise AttributeError("a bug")

    monkeypatch.setattr(onnx_export.HEADS["model"], "from_pretrained", bug)
    with pytest.raises(AttributeError, match="a bug"):
        onnx_export.main([str(saved), str(tmp_path / "out.onnx")])
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_a_replaced_folder_is_whole_at_every_moment_and_kept_when_the_new_one_cannot_go_in(tmp_path, monkeypatch):
    from symbert import tools

    output = tmp_path / "cache"
    output.mkdir()
    (output / "old.txt").write_text("old")
    with tools.written_folder(output, ".tmp", "the cache", "writing", existing="replace") as staging:
        (staging / "new.txt").write_text("new")
        assert sorted(os.listdir(output)) == ["old.txt"]  # untouched until the new one is complete
    assert sorted(os.listdir(output)) == ["new.txt"] and sorted(os.listdir(tmp_path)) == ["cache"]

    def appeared(staging, output, doing):
        raise symbert.cli.UserError(f"output={str(output)!r} appeared while {doing}; nothing was written.")

    monkeypatch.setattr(tools, "move_into_place", appeared)
    with pytest.raises(symbert.cli.UserError, match="appeared while writing"):
        with tools.written_folder(output, ".tmp", "the cache", "writing", existing="replace") as staging:
            (staging / "newer.txt").write_text("newer")
    assert sorted(os.listdir(output)) == ["new.txt"] and sorted(os.listdir(tmp_path)) == ["cache"]
    monkeypatch.undo()

    # a process killed between its two renames left the old folder aside: the next writer clears it
    (tmp_path / ".cache.999999999-replaced.tmp").mkdir()
    with tools.written_folder(output, ".tmp", "the cache", "writing", existing="replace") as staging:
        (staging / "newest.txt").write_text("newest")
    assert sorted(os.listdir(output)) == ["newest.txt"] and sorted(os.listdir(tmp_path)) == ["cache"]
