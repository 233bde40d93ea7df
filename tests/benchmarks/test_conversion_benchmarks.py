"""benchmarks/conversion.py and benchmarks/agreement.py on a tiny random BERT with its own tokenizer: the copy against
the fit for every type, and the agreement of saved models, against references computed here."""

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from conftest import tiny_sentences, train_tokenizer
from symbert import SymBertModel
from symbert.tools.convert import mean_cosine

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
    from symbert.loading_symbert import calibration_sequences

    sequences = calibration_sequences(tokenizer, held_out_texts, 64)
    bert = BertModel.from_pretrained(bert_folder).eval()
    reloaded = SymBertModel.from_pretrained(tmp_path / "symmetric").eval()
    assert row["mean_cosine"] == pytest.approx(mean_cosine(reloaded, bert, sequences), abs=1e-6)
    assert row["attention_type"] == "symmetric" and len(row["layer_errors"]) == 2


def test_agreement_refuses_a_folder_it_cannot_load_in_one_line(bert_folder, tmp_path, capsys):
    from conftest import assert_one_line

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


def test_a_task_without_a_hub_dataset_asks_for_the_fetched_data(capsys):
    from symbert.cli import UserError
    from symbert.training import glue_data

    with pytest.raises(UserError, match="uci_sentiment is not on the Hub: fetch it with"):
        glue_data.load_task("uci_sentiment")


def test_the_data_digest_of_a_saved_dataset_ignores_the_cache_files_tokenising_writes(tmp_path):
    from datasets import Dataset, DatasetDict

    from symbert.training import glue_data

    rows = [{"sentence": f"text {i}", "label": i % 2} for i in range(8)]
    DatasetDict(train=Dataset.from_list(rows), validation=Dataset.from_list(rows[:4])).save_to_disk(
        str(tmp_path / "uci_sentiment")
    )
    before = glue_data.data_sha256("uci_sentiment", tmp_path)
    (tmp_path / "uci_sentiment" / "train" / "cache-0123456789abcdef.arrow").write_bytes(b"tokenised")
    assert glue_data.data_sha256("uci_sentiment", tmp_path) == before
    (tmp_path / "uci_sentiment" / "train" / "state.json").write_text("{}")  # the data's own files still count
    assert glue_data.data_sha256("uci_sentiment", tmp_path) != before


def glue_output(folder, scores, data="ab", learning_rate=1e-5):
    """A symbert-glue output folder with uci_sentiment accuracy `scores` over seeds 1, 2, 3."""
    import statistics

    folder.mkdir(parents=True)
    aggregate = {"mean": statistics.mean(scores), "std": statistics.stdev(scores), "n": 3}
    aggregate["baseline"] = {"majority": 51.67, "chance": 50.0}
    results = {
        "protocol": {
            "seeds": [1, 2, 3],
            "learning_rate": learning_rate,
            "data": str(folder),
            "tasks": ["uci_sentiment"],
        },
        "data_sha256": {"uci_sentiment": data * 32},
        "scores": {"uci_sentiment": dict(zip("123", scores))},
        "aggregates": {"tasks": {"uci_sentiment": aggregate}},
    }
    (folder / "glue_results.json").write_text(json.dumps(results))
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
