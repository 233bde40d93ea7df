"""symbert-glue's refusals of bad GLUE data (file, line, column named; nothing trained or written) and how finished
(task, seed) pairs are matched: by the data's contents, the model's weights and the protocol, never by a path."""

import csv
import hashlib
import json
import shutil

import pytest
import torch
import transformers
from datasets import Dataset, DatasetDict
from transformers import AutoTokenizer

from helpers.glue import refused, suite_args
from symbert import SymBertForMaskedLM
from symbert.cli import UserError
from symbert.hub_cards import card as cards
from symbert.training.glue import command as glue
from symbert.training.glue import data as glue_data
from symbert.training.glue import sweep as glue_sweep
from symbert.training.glue.data import load_task
from symbert.training.glue.results import GlueResults


@pytest.fixture
def data(assets, tmp_path):  # noqa: F811
    """A private copy of the TSV data, to break or edit."""
    return shutil.copytree(assets / "data", tmp_path / "glue_data")


def edit_lines(path, edit):
    """Rewrites a TSV file through `edit(lines) -> lines` (lines without their newline)."""
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")


def refused_run(assets, data, tmp_path, capsys, fake_fine_tune, task):  # noqa: F811
    """The message of a refused run on `data`; checks nothing was trained or written."""
    message = refused(suite_args(assets, tmp_path / "out", "--data_dir", str(data), "--tasks", task), capsys)
    assert fake_fine_tune[0] == [] and not (tmp_path / "out").exists()
    return message


# Malformed data: an error naming the file, the line (the header is line 1) and the column


def test_cola_file_without_its_sentence_column(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    edit_lines(data / "CoLA" / "train.tsv", lambda lines: [line.rsplit("\t", 1)[0] for line in lines])
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "cola")
    assert (
        f"{data / 'CoLA' / 'train.tsv'}, line 1: 3 field(s), expected 4; column 'sentence' (field 4) and after are missing; fix the line"
        in message
    )


def test_truncated_sst2_rows_are_refused_not_dropped(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    path = data / "SST-2" / "train.tsv"
    rows = [f"a sentence number {i}\t{i % 2}" for i in range(400)]
    truncated = set(range(37, 400, 40))  # 10 rows that lost their label
    path.write_text(
        "sentence\tlabel\n" + "\n".join(r.split("\t")[0] if i in truncated else r for i, r in enumerate(rows)) + "\n"
    )
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "sst2")
    # data row 37 (0-based) is line 39: the header is line 1
    assert (
        f"{path}, line 39: 1 field(s), expected 2; column 'label' (field 2) and after are missing; fix the line"
        in message
    )


def test_row_with_too_many_fields(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    path = data / "MRPC" / "dev.tsv"
    edit_lines(path, lambda lines: [*lines[:5], lines[5] + "\textra", *lines[6:]])
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "mrpc")
    assert (
        f"{path}, line 6: 6 field(s), expected 5; fields after the last column '#2 String' (a tab inside a field?); fix the line"
        in message
    )


def test_bad_label_after_unbalanced_quotes(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    """RTE's sentences open quotes they never close: read unquoted, each line is still one row."""
    path = data / "RTE" / "dev.tsv"
    assert all(line.split("\t")[1].startswith('"') for line in path.read_text().splitlines()[1:])
    edit_lines(path, lambda lines: [*lines[:7], lines[7].rsplit("\t", 1)[0] + "\tmaybe", *lines[8:]])
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "rte")
    assert (
        f"{path}, line 8, column 'label': label 'maybe' is not allowed; allowed: 0..1 or entailment, not_entailment."
    ) in message


def test_test_split_labels_are_refused(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    path = data / "WNLI" / "train.tsv"
    edit_lines(path, lambda lines: [*lines[:2], lines[2].rsplit("\t", 1)[0] + "\t-1", *lines[3:]])
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "wnli")
    assert (
        f"{path}, line 3, column 'label': label '-1' is not allowed (test splits have no labels); allowed: 0..1"
        in message
    )


@pytest.mark.parametrize("folder, content", [("SST-2", "sentence\tlabel\n"), ("CoLA", "")])
def test_empty_split_names_its_file(assets, data, tmp_path, capsys, fake_fine_tune, folder, content):  # noqa: F811
    path = data / folder / "dev.tsv"
    path.write_text(content)
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, {"SST-2": "sst2", "CoLA": "cola"}[folder])
    assert f"{path} has no data rows: the {folder.lower().replace('-', '')} split is empty." in message


def test_empty_file_without_its_header(data):
    (data / "QNLI" / "train.tsv").write_text("")
    with pytest.raises(UserError, match=f"{data / 'QNLI' / 'train.tsv'} is empty: expected a header line"):
        load_task("qnli", data)


@pytest.mark.parametrize("folder, task", [("SST-2", "sst2"), ("MRPC", "mrpc"), ("CoLA", "cola")])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_tsv_with_a_byte_order_mark_reads_as_without(data, folder, task, newline):
    """A UTF-8 byte-order mark (and Windows line ends) as editors and spreadsheets write them: read as transformers'
    GLUE processors read them (utf-8-sig), the same rows as the file without one; before, the header's first column
    was '\ufeffsentence' (SST-2) or CoLA's first field 'gj04' got the mark."""
    expected = {split: dataset.to_dict() for split, dataset in load_task(task, data).items()}
    for path in (data / folder).glob("*.tsv"):
        path.write_bytes(b"\xef\xbb\xbf" + path.read_text().replace("\n", newline).encode())
    assert (data / folder / "train.tsv").read_bytes().startswith(b"\xef\xbb\xbf")
    assert {split: dataset.to_dict() for split, dataset in load_task(task, data).items()} == expected


def test_a_byte_order_mark_keeps_line_numbers(data):
    path = data / "SST-2" / "dev.tsv"
    edit_lines(path, lambda lines: [*lines[:3], lines[3].split("\t")[0], *lines[4:]])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with pytest.raises(UserError, match=f"{path}, line 4: 1 field\\(s\\), expected 2; column 'label'"):
        load_task("sst2", data)


def test_tsv_that_is_not_utf8_names_its_file(assets, data, tmp_path, capsys, fake_fine_tune):  # noqa: F811
    path = data / "RTE" / "train.tsv"
    path.write_bytes(path.read_text().encode("utf-16"))  # what "Unicode" means to some editors: UTF-16, with its BOM
    message = refused_run(assets, data, tmp_path, capsys, fake_fine_tune, "rte")
    assert message == (
        f"symbert-glue: error: {path} is not UTF-8 text (b'\\xff': invalid start byte); GLUE TSV files are UTF-8, "
        "with or without a byte-order mark: convert the file to UTF-8.\n"
    )


def test_saved_dataset_with_a_bad_label_names_folder_row_and_column(data, tmp_path):
    rte = load_task("rte", data)
    DatasetDict(
        {
            "train": rte["train"],
            "validation": rte["validation"].map(lambda e, i: {"label": 7 if i == 3 else e["label"]}, with_indices=True),
        }
    ).save_to_disk(str(tmp_path / "saved" / "rte"))
    with pytest.raises(UserError) as error:
        load_task("rte", tmp_path / "saved")
    assert str(error.value) == (
        f"{tmp_path / 'saved' / 'rte'} validation, row 4 of 24, column 'label': label 7 is not "
        "allowed; allowed: 0..1 or entailment, not_entailment; 1 bad label(s) in all."
    )


# Sentence pairs: BERT's segments


def test_a_sentence_over_csv_s_field_limit_is_read_and_truncated(assets, data):  # noqa: F811
    """csv reads fields of at most 131,072 characters by default (a traceback beyond); a longer GLUE sentence is read
    whole, and tokenisation truncates it to max_length as any other; the limit is csv's default again after."""
    path = data / "SST-2" / "train.tsv"
    long_sentence = " ".join(["a long sentence"] * 10_000)  # 159,999 characters
    edit_lines(path, lambda lines: [*lines, f"{long_sentence}\t1"])
    limit = csv.field_size_limit()
    splits = load_task("sst2", data)
    assert splits["train"][-1]["sentence"] == long_sentence and csv.field_size_limit() == limit == 131_072
    tokenizer = AutoTokenizer.from_pretrained(assets / "model", trust_remote_code=True)
    ids = glue_sweep.tokenize(
        "sst2", DatasetDict(train=splits["train"].select([len(splits["train"]) - 1])), tokenizer, 64
    )
    assert len(ids["train"][0]["input_ids"]) == 64


def test_a_long_text_is_cut_before_tokenising_to_the_same_ids(assets, capsys):  # noqa: F811
    """A text far over max_length tokens is cut to max_length × CHARS_PER_TOKEN characters (at a space) before
    tokenising, and gives exactly the ids of the whole text truncated: alone (sst2) and in a pair (rte, one long and
    one short side, and both long), with the cut landing inside a word."""
    tokenizer = AutoTokenizer.from_pretrained(assets / "model", trust_remote_code=True)
    max_length, budget = 16, 16 * glue_data.CHARS_PER_TOKEN
    long = " ".join(["the old man walked slowly along the riverbank"] * 60)  # 2,819 characters
    assert len(long) > budget and not long[budget].isspace()  # the cut falls inside a word
    single = DatasetDict(
        train=Dataset.from_dict({"sentence": [long, "a short one"], "label": [1, 0], "idx": [0, 1]}),
        validation=Dataset.from_dict({"sentence": ["short"], "label": [0], "idx": [0]}),
    )
    pairs = DatasetDict(
        train=Dataset.from_dict(
            {"sentence1": [long, "short", long], "sentence2": ["short", long, long[7:]], "label": [0, 1, 0]}
        )
    )
    for task, data, count in (("sst2", single, 1), ("rte", pairs, 4)):
        cut = glue_data.cut_long_texts(task, data, max_length)
        assert capsys.readouterr().out == (
            f"notice: {task}: cut {count} text(s) longer than 1,024 characters ({count} in train) to 1,024 before "
            f"tokenising (64 per token of max_length 16): truncation keeps their first 16 tokens, which the cut keeps.\n"
        )
        texts = [text for column in glue_data.TASKS[task].text_columns for text in cut["train"][column]]
        assert max(map(len, texts)) <= budget and long[: long.rfind(" ", 0, budget)] in texts
        expected = glue_sweep.tokenize(task, data, tokenizer, max_length)
        got = glue_sweep.tokenize(task, cut, tokenizer, max_length)
        for split in data:
            assert got[split]["input_ids"] == expected[split]["input_ids"]
            assert got[split]["token_type_ids"] == expected[split]["token_type_ids"]
        assert len(got["train"][0]["input_ids"]) == max_length
    assert glue_data.cut_long_texts("sst2", single, 1_000) is single and capsys.readouterr().out == ""


def test_a_multi_megabyte_sentence_is_cut_when_loaded(assets, data, capsys):  # noqa: F811
    """One 5 MB line in a dev file: load_task with max_length cuts it to 64 characters per token (the tokenizers
    library would hold some 100 bytes of offsets per character of the whole line), and its ids are those of the
    line's first max_length tokens; the other rows are as read."""
    tokenizer = AutoTokenizer.from_pretrained(assets / "model", trust_remote_code=True)
    huge = " ".join(["a long sentence"] * 330_000)  # 5,279,999 characters
    edit_lines(data / "SST-2" / "dev.tsv", lambda lines: [*lines, f"{huge}\t1"])
    whole = load_task("sst2", data)
    splits = load_task("sst2", data, max_length=64)
    assert "notice: sst2: cut 1 text(s) longer than 4,096 characters (1 in validation)" in capsys.readouterr().out
    dev = splits["validation"]
    cut = dev[-1]["sentence"]
    assert len(cut) <= 4_096 and huge.startswith(cut) and cut.endswith("sentence")
    assert splits["validation"]["sentence"][:-1] == whole["validation"]["sentence"][:-1]
    assert splits["train"]["sentence"] == whole["train"]["sentence"]
    ids = glue_sweep.tokenize(
        "sst2", DatasetDict(validation=splits["validation"].select([len(dev) - 1])), tokenizer, 64
    )
    expected = tokenizer(huge[:20_000], truncation=True, max_length=64)["input_ids"]  # the first 64 of the line's
    assert ids["validation"][0]["input_ids"] == expected and len(expected) == 64


@pytest.mark.parametrize("task", ["rte", "mrpc", "stsb"])
def test_pair_tasks_get_bert_token_type_ids(assets, task):  # noqa: F811
    """symbert-glue's tokenisation of a pair task gives token_type_ids 0 for [CLS] A [SEP] and 1 for B [SEP] with the
    model folder's tokenizer however it is loaded: by AutoTokenizer, and as the generic class transformers 5.0 to 5.2
    load a tokenizer next to a SymBERT config.json as (TokenizersBackend, whose own model_input_names lack
    token_type_ids; 4.x's generic class returns them), where the pairs would otherwise get all-zero segments."""
    generic = getattr(transformers, "TokenizersBackend", transformers.PreTrainedTokenizerFast)
    splits = load_task(task, assets / "data")
    loaded = [AutoTokenizer.from_pretrained(assets / "model", trust_remote_code=True)]
    loaded.append(generic.from_pretrained(assets / "model"))
    for tokenizer in loaded:
        tokenized = glue_sweep.tokenize(task, splits, tokenizer, 64)
        for split, dataset in tokenized.items():
            assert "token_type_ids" in dataset.column_names, (type(tokenizer).__name__, split)
            for ids, types in zip(dataset["input_ids"][:5], dataset["token_type_ids"][:5]):
                first_sep = ids.index(tokenizer.sep_token_id)
                assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1), type(tokenizer).__name__


# Finished pairs: matched on contents, not paths


def test_the_same_data_by_any_path_counts_as_finished(assets, data, tmp_path, fake_fine_tune, monkeypatch):  # noqa: F811
    calls, _ = fake_fine_tune
    monkeypatch.chdir(tmp_path)
    output_dir = tmp_path / "out"
    glue.main(suite_args(assets, output_dir, "--data_dir", "glue_data", "--tasks", "rte,mrpc", "--seeds", "1"))
    assert len(calls) == 2
    shutil.copytree(data, tmp_path / "elsewhere" / "copy")
    for spelling in ("glue_data/", str(data), "./glue_data", str(tmp_path / "elsewhere" / "copy")):
        glue.main(suite_args(assets, output_dir, "--data_dir", spelling, "--tasks", "rte,mrpc", "--seeds", "1"))
    assert len(calls) == 2  # all done
    record = json.loads((output_dir / "runs" / "rte" / "seed-1.json").read_text())
    assert record["data_sha256"] == glue_data.data_sha256("rte", data) == glue_data.data_sha256("rte", "glue_data/")
    assert record["protocol"]["data"] == str(data)  # absolute, for the reader: never mistaken for a Hub id


def test_a_tsv_edited_in_place_recomputes_its_pairs(assets, data, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    calls, _ = fake_fine_tune
    output_dir = tmp_path / "out"
    args = suite_args(assets, output_dir, "--data_dir", str(data), "--tasks", "rte,mrpc")
    glue.main(args + ["--seeds", "1,2"])
    before = json.loads((output_dir / "runs" / "rte" / "seed-1.json").read_text())["data_sha256"]
    edit_lines(
        data / "RTE" / "dev.tsv", lambda lines: [*lines[:3], lines[3].replace("\t", "\tan edited ", 1), *lines[4:]]
    )
    capsys.readouterr()
    glue.main(args + ["--seeds", "1"])
    assert [(task, seed) for _, task, seed in calls[4:]] == [("rte", 1)]  # mrpc's data did not change
    out = capsys.readouterr().out
    assert (
        f"rte: seed(s) 1, 2 were scored on other data than {data} holds now; recomputing 1; 2 not requested: "
        "left out of the results\n"
    ) in out
    after = json.loads((output_dir / "runs" / "rte" / "seed-1.json").read_text())["data_sha256"]
    assert after == glue_data.data_sha256("rte", data) != before
    results = json.loads((output_dir / "glue_results.json").read_text())
    assert list(results["scores"]["rte"]) == ["1"] and list(results["scores"]["mrpc"]) == ["1", "2"]
    assert results["data_sha256"]["rte"] == after
    glue.main(args + ["--seeds", "1,2"])
    assert [(task, seed) for _, task, seed in calls[5:]] == [("rte", 2)]


def test_run_files_without_a_data_hash_are_recomputed(assets, data, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    """Run files written before pairs were keyed by the data's contents name the data by path only."""
    calls, _ = fake_fine_tune
    output_dir = tmp_path / "out"
    args = suite_args(assets, output_dir, "--data_dir", str(data), "--tasks", "rte", "--seeds", "1")
    glue.main(args)
    path = output_dir / "runs" / "rte" / "seed-1.json"
    record = json.loads(path.read_text())
    del record["data_sha256"]
    record["protocol"]["data"] = "some/other/spelling"
    path.write_text(json.dumps(record))
    glue.main(args)
    assert len(calls) == 2 and "rte: seed(s) 1 were scored on other data than" in capsys.readouterr().out
    assert "data_sha256" in json.loads(path.read_text())


# Refused runs: one line naming what differs, exit status 2


def test_protocol_mismatch_names_the_fields_that_differ(assets, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    output_dir = tmp_path / "out"
    glue.main(suite_args(assets, output_dir, "--tasks", "rte", "--seeds", "1"))
    message = refused(
        suite_args(
            assets, output_dir, "--tasks", "rte", "--seeds", "1", "--weight_decay", "0.01", "--max_length", "16"
        ),
        capsys,
    )
    assert (
        f"{output_dir / 'runs' / 'rte' / 'seed-1.json'} was made with another model or protocol than this run: "
        "max_length: 32 saved vs 16 in this run; weight_decay: 0.0 saved vs 0.01 in this run. Use another "
        f"--output_dir or remove {output_dir / 'runs'}."
    ) in message
    assert len(fake_fine_tune[0]) == 1


def test_unreadable_run_file_is_named(assets, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    path = tmp_path / "out" / "runs" / "rte" / "seed-1.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"task": "rte", "seed"')
    message = refused(suite_args(assets, tmp_path / "out", "--tasks", "rte", "--seeds", "1"), capsys)
    assert f"{path} is not a symbert-glue run file" in message and "remove it to rerun its pair" in message
    assert fake_fine_tune[0] == [] and path.read_text() == '{"task": "rte", "seed"'


def test_bad_arguments(assets, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    message = refused(suite_args(assets, tmp_path / "out", "--seeds", "1,two"), capsys)
    assert message == "symbert-glue: error: --seeds '1,two' must be comma-separated integers, e.g. 1,2,3,4,5.\n"
    message = refused(suite_args(assets, tmp_path / "out", "--data_dir", str(tmp_path / "nothing-here")), capsys)
    assert f"No cola data in {tmp_path / 'nothing-here'}: expected a save_to_disk DatasetDict" in message
    assert fake_fine_tune[0] == [] and not (tmp_path / "out").exists()


def test_unreachable_hub_dataset(assets, tmp_path, fake_fine_tune, capsys, monkeypatch):  # noqa: F811
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(glue_data, "load_dataset", offline)
    args = [
        "--model",
        str(assets / "model"),
        "--output_dir",
        str(tmp_path / "out"),
        "--tasks",
        "rte",
        "--max_length",
        "32",
    ]
    assert refused(args, capsys) == (
        "symbert-glue: error: nyu-mll/glue rte could not be loaded (Couldn't reach 'nyu-mll/glue' on the Hub "
        "(LocalEntryNotFoundError)); pass --data_dir with the GLUE data on disk.\n"
    )
    assert fake_fine_tune[0] == [] and not (tmp_path / "out").exists()


def test_other_weights_are_named_by_their_sha256(assets, tmp_path, fake_fine_tune, capsys):  # noqa: F811
    output_dir = tmp_path / "out"
    glue.main(suite_args(assets, output_dir, "--tasks", "rte", "--seeds", "1"))
    model = SymBertForMaskedLM.from_pretrained(assets / "model")
    with torch.no_grad():
        model.cls.predictions.bias.add_(1.0)
    model.save_pretrained(tmp_path / "other")
    shutil.copy(assets / "model" / "tokenizer.json", tmp_path / "other")
    shutil.copy(assets / "model" / "tokenizer_config.json", tmp_path / "other")
    args = suite_args(assets, output_dir, "--model", str(tmp_path / "other"), "--tasks", "rte", "--seeds", "1")
    message = refused(args, capsys)
    saved, other = (
        hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        for folder in (assets / "model", tmp_path / "other")
    )
    assert (
        f"than this run: model: {saved} ({assets / 'model'}) saved vs {other} ({tmp_path / 'other'}) in this run."
        in message
    )


def test_the_card_names_the_hub_dataset_only_for_scores_on_it(assets, data, tmp_path, fake_fine_tune, monkeypatch):  # noqa: F811
    monkeypatch.setattr(glue_data, "load_dataset", lambda name, task: load_task(task, data))  # the Hub's, simulated
    hub_args = ["--model", str(assets / "model"), "--tasks", "rte", "--seeds", "1", "--max_length", "32"]
    glue.main([*hub_args, "--output_dir", str(tmp_path / "hub")])
    glue.main([*hub_args, "--output_dir", str(tmp_path / "local"), "--data_dir", str(data)])
    hub, local = (GlueResults.read(tmp_path / name / "glue_results.json") for name in ("hub", "local"))

    assert hub.protocol["data"] == "nyu-mll/glue" and cards.scored_on_hub(hub)
    (result,) = cards.glue_eval_results(hub)
    assert (result.dataset_type, result.dataset_config, result.dataset_split) == ("nyu-mll/glue", "rte", "validation")
    assert [entry.dataset_id for entry in cards.glue_eval_entries(hub)] == (
        ["nyu-mll/glue"] if cards.EvalResultEntry is not None else []
    )
    assert cards.glue_data_text(hub) == "[nyu-mll/glue](https://huggingface.co/datasets/nyu-mll/glue)"

    assert local.protocol["data"] == str(data) and not cards.scored_on_hub(local)
    assert cards.glue_eval_results(local) == [] and cards.glue_eval_entries(local) == []
    sha = glue_data.data_sha256("rte", data)
    assert local.data_sha256 == {"rte": sha} and hub.data_sha256["rte"] != sha  # fingerprints, not files
    assert cards.glue_data_text(local) == (
        f"local data `glue_data` (sha256 of each task's files: rte `{sha[:12]}`), not the Hub's nyu-mll/glue"
    )


def folder_with_code(folder, marker):
    """A model folder whose config maps its classes to a code file of its own, which leaves `marker` when run."""
    folder.mkdir()
    config = {"model_type": "planted", "auto_map": {"AutoConfig": "planted.PlantedConfig"}, "architectures": []}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "planted.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PretrainedConfig\n\n"
        "class PlantedConfig(PretrainedConfig):\n    model_type = 'planted'\n"
    )
    return folder


def test_no_command_runs_code_from_a_model_folder_unasked(assets, tmp_path, capsys):  # noqa: F811
    from symbert.tools import onnx_export

    marker = tmp_path / "ran"
    folder = folder_with_code(tmp_path / "planted", marker)
    argv = suite_args(assets, tmp_path / "out", "--tasks", "rte")
    argv[argv.index("--model") + 1] = str(folder)
    message = refused(argv, capsys)
    assert "needs code of its own to load" in message and "--trust_remote_code" in message
    with pytest.raises(SystemExit) as exit_info:
        onnx_export.main([str(folder), str(tmp_path / "model.onnx")])
    assert exit_info.value.code == 2 and "is not a SymBERT model folder" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "model.onnx").exists()
