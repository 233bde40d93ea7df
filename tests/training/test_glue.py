"""GLUE: scoring against hand-computed values and the paper's Table 3, data in the official TSV layout, the whole
suite on a tiny model, restart, the checkpoint sweep and bad input."""

import contextlib
import csv
import hashlib
import io
import json
import logging
import random
import re
import shutil
from dataclasses import replace

import pytest
import torch
import transformers
from datasets import Dataset, DatasetDict
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from helpers.corpora import run_args
from helpers.glue import FAST, MAX_LENGTH, refused, sentence, suite_args
from helpers.release import fake_run
from symbert import SymBertForMaskedLM
from symbert.hub_cards import card as cards
from symbert.hub_cards.release import release_command
from symbert.training import pretrain
from symbert.training.data.tokenizer import train_wordpiece
from symbert.training.glue import command as glue
from symbert.training.glue import data as glue_data
from symbert.training.glue import scoring as glue_scoring
from symbert.training.glue import sweep as glue_sweep
from symbert.training.glue.data import load_task
from symbert.training.glue.results import GlueResults

EIGHT_TASKS = "cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte"


# Scoring


@pytest.mark.parametrize(
    "row, expected",
    [
        ([85.30, 44.35, 81.66, 82.07, 88.86, 59.42, 87.30, 88.76, 90.92], 78.74),  # base original
        ([78.36, 35.22, 78.66, 79.05, 87.70, 53.43, 84.47, 86.90, 89.56], 74.82),  # base symmetric
        ([87.83, 46.91, 81.60, 82.02, 88.89, 60.58, 86.88, 88.78, 90.78], 79.36),  # base pairwise
        ([81.04, 21.39, 77.16, 77.76, 86.08, 54.87, 82.20, 85.45, 88.49], 72.72),  # small original
        ([76.81, 10.29, 75.25, 75.72, 85.13, 55.74, 77.83, 82.79, 86.90], 69.61),  # small symmetric
        ([82.34, 24.21, 76.37, 76.89, 86.67, 56.25, 84.13, 84.97, 88.60], 73.38),  # small pairwise
    ],
)
def test_glue_score_of_table_3(row, expected):
    table_order = ("mrpc", "cola", "mnli-m", "mnli-mm", "qqp", "rte", "stsb", "qnli", "sst2")
    assert round(glue_scoring.glue_score(dict(zip(table_order, row))), 2) == expected


def test_scorer_against_hand_computed_values():
    # cola: TP 2, TN 1, FP 1, FN 0 → MCC = (2·1 − 1·0) / √(3·2·2·1) = 2/√12
    cola = glue_scoring.run_metrics("cola", {"validation": ([1, 0, 1, 1], [1, 0, 0, 1])})
    assert cola["matthews_correlation"] == pytest.approx(2 / 12**0.5) and cola["score"] == pytest.approx(100 / 3**0.5)
    # mrpc: 3 of 5 right; precision 2/3, recall 2/3 → F1 2/3; score (0.6 + 2/3)/2
    mrpc = glue_scoring.run_metrics("mrpc", {"validation": ([1, 1, 0, 1, 0], [1, 0, 0, 1, 1])})
    assert mrpc["accuracy"] == pytest.approx(0.6) and mrpc["f1"] == pytest.approx(2 / 3)
    assert mrpc["score"] == pytest.approx(100 * (0.6 + 2 / 3) / 2)
    # stsb: ranks agree (Spearman 1); Pearson = 6.5 / √(5 · 8.75)
    stsb = glue_scoring.run_metrics("stsb", {"validation": ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0])})
    assert stsb["pearson"] == pytest.approx(6.5 / (5 * 8.75) ** 0.5) and stsb["spearmanr"] == pytest.approx(1.0)
    assert stsb["score"] == pytest.approx(100 * (6.5 / 43.75**0.5 + 1) / 2)
    mnli = glue_scoring.run_metrics(
        "mnli", {"validation_matched": ([0, 1, 2, 2], [0, 1, 2, 0]), "validation_mismatched": ([0, 0], [0, 1])}
    )
    assert mnli == {"accuracy_matched": 0.75, "accuracy_mismatched": 0.5}
    assert glue_scoring.task_scores("mnli", mnli) == {"mnli-m": 75.0, "mnli-mm": 50.0}
    assert glue_scoring.run_metrics("rte", {"validation": ([0, 1, 1, 1], [0, 1, 0, 0])}) == {
        "accuracy": 0.5,
        "score": 50.0,
    }


def test_aggregates_use_the_sample_std_of_per_seed_glue_scores():
    nine = glue_data.score_names(glue_mean_only=True)
    seed_1 = dict.fromkeys(nine, 70.0)
    seed_2 = {**dict.fromkeys(nine, 70.0), "cola": 79.0}  # GLUE 71
    scores = {name: {"1": seed_1[name], "2": seed_2[name]} for name in nine}
    aggregates = glue_scoring.aggregate(scores, [1, 2])
    assert aggregates["tasks"]["cola"] == {"mean": 74.5, "std": pytest.approx(4.5 * 2**0.5), "n": 2}
    assert aggregates["tasks"]["rte"] == {"mean": 70.0, "std": 0.0, "n": 2}
    assert aggregates["glue"] == {
        "mean": 70.5,
        "std": pytest.approx(0.5 * 2**0.5),
        "per_seed": {"1": 70.0, "2": 71.0},
        "n_seeds": 2,
        "complete": True,
    }
    del scores["rte"]["2"]
    incomplete = glue_scoring.aggregate(scores, [1, 2])["glue"]
    assert incomplete == {"mean": None, "std": None, "per_seed": {"1": 70.0}, "n_seeds": 1, "complete": False}


def test_baselines_against_hand_computed_values_and_the_did_not_learn_flag():
    # sst2, 3 of 4 positive: majority accuracy 3/4, chance 1/2; standard error √(¾·¼/4) at the better baseline
    sst2 = glue_scoring.baseline_scores("sst2", {"validation": [1, 1, 1, 0]})["sst2"]
    assert sst2 == {"majority": 75.0, "chance": 50.0, "standard_error": pytest.approx(100 * (3 / 64) ** 0.5), "n": 4}
    # mrpc, same labels: majority accuracy 3/4, F1 2·¾/(¾+1) = 6/7; chance accuracy 1/2, F1 2·¾·½/(¾+½) = 3/5
    mrpc = glue_scoring.baseline_scores("mrpc", {"validation": [1, 1, 1, 0]})["mrpc"]
    assert mrpc["majority"] == pytest.approx(100 * (3 / 4 + 6 / 7) / 2) and mrpc["chance"] == pytest.approx(55.0)
    # mrpc's standard error: the mean of accuracy's √(¾·¼/4) and F1's √(6/7·1/7/4)
    assert mrpc["standard_error"] == pytest.approx(100 * ((3 / 64) ** 0.5 + (6 / 49 / 4) ** 0.5) / 2)
    # positives the minority (1 of 4): always negative scores (¾ + 0)/2 = 37.5, always positive (¼ + 2·¼/(¼+1))/2 =
    # 32.5; 2 of 5: always negative (3/5 + 0)/2 = 30, always positive (2/5 + 2·⅖/(⅖+1))/2 = 48.57: the best constant
    assert glue_scoring.baseline_scores("mrpc", {"validation": [0, 0, 0, 1]})["mrpc"]["majority"] == 37.5
    best = glue_scoring.baseline_scores("mrpc", {"validation": [0, 0, 0, 1, 1]})["mrpc"]["majority"]
    assert best == pytest.approx(100 * (2 / 5 + (4 / 5) / (7 / 5)) / 2)
    # correlations: 0 for both baselines, standard error 1/√n
    cola = glue_scoring.baseline_scores("cola", {"validation": [0, 0, 1, 1, 1]})["cola"]
    assert cola == {"majority": 0.0, "chance": 0.0, "standard_error": pytest.approx(100 / 5**0.5), "n": 5}
    stsb = glue_scoring.baseline_scores("stsb", {"validation": [0.5, 4.0, 2.5, 3.0]})["stsb"]
    assert stsb == {"majority": 0.0, "chance": 0.0, "standard_error": 50.0, "n": 4}
    mnli = glue_scoring.baseline_scores(
        "mnli", {"validation_matched": [0, 0, 1, 2], "validation_mismatched": [2, 2, 2]}
    )
    assert (mnli["mnli-m"]["majority"], mnli["mnli-m"]["chance"]) == (50.0, pytest.approx(100 / 3))
    assert (mnli["mnli-mm"]["majority"], mnli["mnli-mm"]["n"]) == (100.0, 3)
    # the flag: within 2 standard errors (the larger of the dev set's and the seeds' std) above the better baseline
    # majority 75, error √(¾·¼/100)
    baseline = glue_scoring.baseline_scores("sst2", {"validation": [1] * 75 + [0] * 25})
    error = 100 * (3 / 16 / 100) ** 0.5  # 4.33
    for mean, std, flagged in [(75.0, 0.0, True), (83.6, 0.0, True), (84.0, 0.0, False), (84.0, 5.0, True)]:
        scores = {"sst2": {"1": mean - std / 2**0.5, "2": mean + std / 2**0.5}}  # sample std: `std`
        verdict = glue_scoring.aggregate(scores, [1, 2], baseline)["tasks"]["sst2"]["baseline"]
        assert (verdict["best"], verdict["did_not_learn"]) == (75.0, flagged)
        assert verdict["margin"] == pytest.approx(2 * max(error, std))


# The task table: loading, label checks, scoring and the card's GLUE metadata all follow from glue_data.TASKS


def test_every_task_in_the_table_has_what_loading_scoring_and_the_card_need():
    scores = [score for _, _, score in glue_data.reported_scores()]
    assert len({score.name for score in scores}) == len(scores) == 12  # each score name names one number
    assert glue_data.score_names(glue_mean_only=True) == (
        "cola",
        "sst2",
        "mrpc",
        "qqp",
        "stsb",
        "mnli-m",
        "mnli-mm",
        "qnli",
        "rte",
    )
    for name, task in glue_data.TASKS.items():
        # loading: every column the model reads, and the label, has its TSV column; a headerless TSV names its fields;
        # a task without a TSV layout or a Hub dataset (local data only) says where its data come from
        if task.tsv_folder is not None:
            assert set(task.tsv_columns) == {*task.text_columns, "label"}, name
            header = task.tsv_fields or task.tsv_columns.values()
            assert all(column in header for column in task.tsv_columns.values()), name
        assert task.hub_dataset is not None or task.source, name
        assert task.eval_splits and all(split in glue_data.TSV_FILES for split in ("train", *task.eval_splits)), name
        # label checks: class names, or a regression range
        assert (task.label_names is None) != (task.label_range is None), name
        assert task.label_range is None or task.label_range[0] < task.label_range[1], name
        # scoring: metrics the scorer computes; the card: how the Hub names them and each score
        assert task.metric.names and all(metric in glue_scoring.METRICS for metric in task.metric.names), name
        assert task.metric.hub_type and task.metric.description, name
        assert all(score.display and score.name.startswith(name) for score in task.scores), name
    task_ids = [
        cards.task_id(config, score.split) for config, _, score in glue_data.reported_scores(glue_mean_only=True)
    ]
    assert task_ids == ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli_matched", "mnli_mismatched", "qnli", "rte"]


def test_a_task_added_to_the_table_is_loaded_checked_scored_and_reported(monkeypatch, tmp_path):
    boolq = glue_data.GlueTask(
        ("question", "passage"),
        ("False", "True"),
        "BoolQ",
        {"question": "question", "passage": "passage", "label": "label"},
        glue_data.ACCURACY_F1,
        (glue_data.GlueScore("boolq", "BoolQ"),),
        in_glue_mean=False,
    )
    monkeypatch.setitem(glue_data.TASKS, "boolq", boolq)
    (tmp_path / "BoolQ").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        rows = [f"is it {i}?\tit is {i}.\t{('False', 'True')[i % 2]}" for i in range(4)]
        (tmp_path / "BoolQ" / name).write_text("question\tpassage\tlabel\n" + "\n".join(rows) + "\n")

    data = load_task("boolq", tmp_path)
    assert data["validation"].column_names == ["question", "passage", "label", "idx"]
    assert data["validation"]["label"] == [0, 1, 0, 1]
    assert glue.parse_arguments(["--model", "m", "--tasks", "rte,boolq", "--output_dir", str(tmp_path)])[2] == [
        "rte",
        "boolq",
    ]
    (tmp_path / "BoolQ" / "dev.tsv").write_text("question\tpassage\tlabel\nq?\tp.\tmaybe\n")
    with pytest.raises(
        ValueError,
        match=r"BoolQ/dev.tsv, line 2, column 'label': label 'maybe' is not allowed; "
        r"allowed: 0..1 or False, True",
    ):
        load_task("boolq", tmp_path)

    # accuracy 3/5, F1 2/3 (as mrpc's in test_scorer_against_hand_computed_values)
    metrics = glue_scoring.run_metrics("boolq", {"validation": ([1, 1, 0, 1, 0], [1, 0, 0, 1, 1])})
    assert metrics == {"accuracy": 0.6, "f1": pytest.approx(2 / 3), "score": pytest.approx(100 * (0.6 + 2 / 3) / 2)}
    assert glue_scoring.task_scores("boolq", metrics) == {"boolq": metrics["score"]}
    runs = {("rte", 1): {"metrics": {"accuracy": 0.5, "score": 50.0}}, ("boolq", 1): {"metrics": metrics}}
    results = GlueResults.build({"name_or_path": "m"}, {}, runs, ["rte", "boolq"], [1])
    assert results.scores == {"rte": {"1": 50.0}, "boolq": {"1": metrics["score"]}}
    assert results.glue["per_seed"] == {}  # outside the GLUE mean, as wnli
    assert "| rte | GLUE | boolq (not in GLUE) |" in results.markdown()


def test_the_cards_glue_metadata_follows_the_table(monkeypatch):
    rte = glue_data.TASKS["rte"]
    monkeypatch.setitem(glue_data.TASKS, "rte", replace(rte, scores=(glue_data.GlueScore("rte", "Recognizing TE"),)))
    results = GlueResults.from_dict(
        {
            "protocol": {"data": "nyu-mll/glue"},
            "aggregates": {
                "tasks": {"rte": {"mean": 70.0, "std": 1.5, "n": 2}},
                "glue": {"mean": None, "std": None, "per_seed": {}, "n_seeds": 0, "complete": False},
            },
        }
    )
    assert "| Recognizing TE | accuracy | 70.00 ± 1.50 | 2 |" in cards.glue_table(results)
    (result,) = cards.glue_eval_results(results)
    assert (
        result.dataset_name,
        result.dataset_config,
        result.dataset_split,
        result.metric_type,
        result.metric_name,
    ) == ("GLUE Recognizing TE", "rte", "validation", "accuracy", "Recognizing TE accuracy (mean of 2 seeds)")


def test_a_task_from_another_hub_dataset_is_swept_and_published_from_its_table_row_alone(monkeypatch, tmp_path):
    """A row naming another Hub dataset, its config and benchmark (no TSV layout): symbert-glue loads and scores it,
    and the release's card names that dataset and benchmark and counts its score with the others."""
    toy = glue_data.GlueTask(
        ("premise", "hypothesis"),
        ("yes", "no"),
        None,  # no TSV layout: from the Hub (or a save_to_disk folder) only
        None,
        glue_data.ACCURACY,
        (glue_data.GlueScore("toy", "Toy-NLI"),),
        hub_dataset="example-org/toy-nli",
        hub_config="pairs",
        benchmark="ToyBench",
    )
    monkeypatch.setitem(glue_data.TASKS, "toy", toy)
    rng = random.Random(3)

    def split(rows):
        columns = {"premise": [sentence(rng) for _ in range(rows)], "hypothesis": [sentence(rng) for _ in range(rows)]}
        return Dataset.from_dict({**columns, "label": [i % 2 for i in range(rows)], "idx": list(range(rows))})

    toy_data, requested = DatasetDict(train=split(16), validation=split(6)), []

    def load_dataset(name, config):  # the Hub, simulated
        requested.append((name, config))
        return toy_data

    monkeypatch.setattr(glue_data, "load_dataset", load_dataset)
    tokenizer = train_wordpiece([sentence(rng) for _ in range(200)], vocab_size=120)
    model = fake_run(tmp_path / "runs" / "tiny-original", tokenizer, tmp_path / "unpickled")
    output = tmp_path / "glue"
    glue.main(["--model", str(model), "--tasks", "toy", "--seeds", "1,2", "--output_dir", str(output), *FAST])
    assert set(requested) == {("example-org/toy-nli", "pairs")}
    results = json.loads((output / "glue_results.json").read_text())
    assert list(results["scores"]) == ["toy"] and list(results["scores"]["toy"]) == ["1", "2"]
    assert results["aggregates"]["tasks"]["toy"]["baseline"]["n"] == 6  # the dev split's size
    assert results["protocol"]["data"] == "example-org/toy-nli, nyu-mll/glue"  # the table's Hub datasets

    with contextlib.redirect_stdout(io.StringIO()):
        release_command(
            [str(model), "--results", str(output), "--namespace", "symbert-test", "--output_dir", str(tmp_path / "out")]
        )
    card = ModelCard.load(tmp_path / "out" / "symbert-tiny-original" / "main" / "README.md")
    assert "## GLUE + ToyBench" in card.text  # the mean score now averages GLUE's nine numbers and the toy's
    assert "The GLUE + ToyBench score of a seed is the plain mean of the ten numbers (MNLI counts twice" in card.text
    mean, std = results["aggregates"]["tasks"]["toy"]["mean"], results["aggregates"]["tasks"]["toy"]["std"]
    assert f"| Toy-NLI | accuracy | {mean:.2f} ± {std:.2f} | 2 |" in card.text
    assert "[example-org/toy-nli](https://huggingface.co/datasets/example-org/toy-nli)" in card.text
    (result,) = card.data.eval_results
    assert (result.task_name, result.dataset_type, result.dataset_name, result.dataset_config) == (
        "ToyBench",
        "example-org/toy-nli",
        "ToyBench Toy-NLI",
        "pairs",
    )
    if cards.EvalResultEntry is not None:
        (entry,) = cards.read_eval_results(
            tmp_path / "out" / "symbert-tiny-original" / "main" / cards.EVAL_RESULTS_FILE
        )
        assert (entry.dataset_id, entry.task_id) == ("example-org/toy-nli", "pairs")
    complete = {name: {"1": 50.0} for name in glue_data.score_names(glue_mean_only=True)}
    assert "| **GLUE + ToyBench** | mean of the 10 scores |" in cards.glue_table(
        GlueResults.from_dict({"aggregates": glue_scoring.aggregate(complete, [1])})
    )


# Data


def test_tsv_layout_gives_the_hub_columns_and_label_ids(assets, tmp_path):
    mnli = load_task("mnli", assets / "data")
    assert list(mnli) == ["train", "validation_matched", "validation_mismatched"]
    assert mnli["train"].column_names == ["premise", "hypothesis", "label", "idx"]
    assert mnli["validation_mismatched"]["label"][:4] == [0, 1, 2, 0]  # entailment, neutral, contradiction
    rte = load_task("rte", assets / "data")
    assert rte["validation"]["label"][:2] == [0, 1] and rte["train"]["sentence1"][0].startswith('"')  # no quoting
    assert load_task("stsb", assets / "data")["train"]["label"][-1] == 5.0
    assert len(load_task("qqp", assets / "data")["train"]) == 24
    cola = load_task("cola", assets / "data")["train"]
    assert cola.column_names == ["sentence", "label", "idx"] and cola["label"][:2] == [0, 1]
    # a save_to_disk folder per task reads the same
    rte.save_to_disk(str(tmp_path / "rte"))
    saved = load_task("rte", tmp_path)
    assert saved["train"].to_dict() == rte["train"].to_dict()


def test_saved_dataset_without_a_dev_split_is_refused(assets, tmp_path):
    rte = load_task("rte", assets / "data")
    DatasetDict({"train": rte["train"]}).save_to_disk(str(tmp_path / "rte"))
    with pytest.raises(ValueError, match="rte: split\\(s\\) validation missing from .*rte; the data have train"):
        load_task("rte", tmp_path)
    with pytest.raises(ValueError, match="No mrpc data in .*: expected a save_to_disk DatasetDict in .*mrpc or"):
        load_task("mrpc", tmp_path)


def broken_copy(assets, tmp_path, folder, edit):
    shutil.copytree(assets / "data", tmp_path / "data")
    edit(tmp_path / "data" / folder)
    return ["--data_dir", str(tmp_path / "data")]


@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown task", r"Unknown GLUE task\(s\) boolq; allowed: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli"),
        ("missing model", r"'.*/no-such-model' does not exist: no such file or folder"),
        ("missing split", r"mnli: .*MNLI/dev_mismatched.tsv missing \(GLUE TSV layout"),
        ("missing column", r".*RTE/dev.tsv, line 1: column 'sentence2' missing from the header"),
        (
            "unknown label",
            r".*QNLI/train.tsv, line 2, column 'label': label 'maybe' is not allowed; allowed: 0..1 or entailment, not_entailment",
        ),
        ("label out of range", r".*CoLA/train.tsv, line 1, column 'label': label '2' is not allowed; allowed: 0..1 or"),
        (
            "stsb out of range",
            r".*STS-B/dev.tsv, line 3, column 'score': label '5.5' is not allowed; allowed: a similarity in \[0, 5\]",
        ),
        ("too long", r"max_length=128 exceeds the model's max_position_embeddings=64"),
        pytest.param(
            "fp16 on a CPU",
            r"error: --fp16 true cannot run on the CPU: .* so the run would train in fp32; use --fp16 false, or --bf16 true",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 trains in fp16 on a GPU"),
        ),
    ],
)
def test_bad_input_fails_before_training(assets, tmp_path, fake_fine_tune, capsys, case, message):
    def replace_in(name, old, new):
        return lambda folder: (folder / name).write_text((folder / name).read_text().replace(old, new, 1))

    args = suite_args(assets, tmp_path / "out", "--tasks", "sst2,mrpc,qqp,stsb,mnli,qnli,rte,cola")
    extra = {
        "unknown task": lambda: ["--tasks", "rte,boolq"],
        "missing model": lambda: ["--model", str(tmp_path / "no-such-model")],
        "missing split": lambda: broken_copy(assets, tmp_path, "MNLI", lambda f: (f / "dev_mismatched.tsv").unlink()),
        "missing column": lambda: broken_copy(
            assets, tmp_path, "RTE", replace_in("dev.tsv", "sentence2", "hypothesis")
        ),
        "unknown label": lambda: broken_copy(
            assets, tmp_path, "QNLI", replace_in("train.tsv", "\tentailment", "\tmaybe")
        ),
        "label out of range": lambda: broken_copy(
            assets, tmp_path, "CoLA", replace_in("train.tsv", "gj04\t0", "gj04\t2")
        ),
        "stsb out of range": lambda: broken_copy(assets, tmp_path, "STS-B", replace_in("dev.tsv", "\t0.217", "\t5.5")),
        "too long": lambda: ["--max_length", "128"],
        "fp16 on a CPU": lambda: ["--fp16", "true"],
    }[case]()
    assert re.search(message, refused(args + extra, capsys))
    assert fake_fine_tune[0] == []  # nothing trained
    assert not (tmp_path / "out" / "glue_results.json").exists()


def test_paper_protocol_is_the_default(tmp_path):
    glue_args, args, tasks, seeds = glue.parse_arguments(["--model", "m", "--output_dir", str(tmp_path)])
    assert tasks == EIGHT_TASKS.split(",") and seeds == [1, 2, 3, 4, 5] and glue_args.max_length == 128
    assert (args.num_train_epochs, args.learning_rate, args.lr_scheduler_type) == (5, 1e-5, "linear")
    assert (
        glue_sweep.pair_protocol(glue_args, args)["warmup_ratio"] == 0.1
    )  # transformers 5: warmup_steps=0.1; 4: warmup_ratio
    assert (args.per_device_train_batch_size, args.weight_decay, args.save_strategy) == (16, 0.0, "no")
    length_grouped = getattr(args, "train_sampling_strategy", None) == "group_by_length" or getattr(
        args, "group_by_length", False
    )
    assert length_grouped
    # recorded, and pinned memory only where there is an accelerator to copy to (torch warns otherwise)
    assert glue_sweep.pair_protocol(glue_args, args)["precision"] == "fp32"
    assert args.dataloader_pin_memory == glue.has_accelerator()


# The whole suite, restart, sweep


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.mark.heavy
def test_whole_suite_on_a_tiny_model(assets, tmp_path, capsys, recwarn):
    output_dir = tmp_path / "out"
    load_reports, logger = Records(), logging.getLogger("transformers.modeling_utils")
    logger.addHandler(load_reports)
    everything = Records()  # all transformers logs: no tensor-parallel plan report after a pair's quiet load
    logging.getLogger("transformers").addHandler(everything)
    verbosity, disabled = transformers.logging.get_verbosity(), logger.disabled
    # transformers' defaults, whatever a test before this one set (a server's logging.config disables loggers)
    transformers.logging.set_verbosity_warning()
    logger.disabled = False
    try:
        glue.main(suite_args(assets, output_dir, "--tasks", EIGHT_TASKS + ",wnli", "--seeds", "1"))
    finally:
        logger.removeHandler(load_reports)
        logging.getLogger("transformers").removeHandler(everything)
        transformers.logging.set_verbosity(verbosity)
        logger.disabled = disabled
    # 9 pairs, one load report (the classifier head newly initialised), no pin_memory warning on a CPU
    assert len(load_reports.records) == 1 or (verbosity > logging.WARNING and not load_reports.records), verbosity
    assert all("classifier.weight" in report.getMessage() for report in load_reports.records)
    assert logger.level == logging.NOTSET and not logger.filters
    assert not [record for record in everything.records if "were not sharded" in record.getMessage()]
    assert glue.has_accelerator() or not [w for w in recwarn if "pin_memory" in str(w.message)]
    results = json.loads((output_dir / "glue_results.json").read_text())

    weights = assets / "model" / "model.safetensors"
    model = SymBertForMaskedLM.from_pretrained(assets / "model")
    assert results["model"] == {
        "name_or_path": str(assets / "model"),
        "revision": None,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "attention_type": "pairwise",
        "num_parameters": model.num_parameters(),
    }
    assert results["schema_version"] == 1 and results["protocol"]["seeds"] == [1]
    assert results["protocol"]["tasks"] == [*EIGHT_TASKS.split(","), "wnli"] and results["protocol"]["max_steps"] == 2
    assert set(results["runs"]["mnli"]["1"]) == {"accuracy_matched", "accuracy_mismatched"}
    assert set(results["runs"]["stsb"]["1"]) == {"pearson", "spearmanr", "score"}
    assert set(results["runs"]["mrpc"]["1"]) == {"accuracy", "f1", "score"}
    assert list(results["scores"]) == [
        "cola",
        "sst2",
        "mrpc",
        "qqp",
        "stsb",
        "mnli-m",
        "mnli-mm",
        "qnli",
        "rte",
        "wnli",
    ]
    for task, by_seed in results["runs"].items():  # scores follow from the stored metrics
        for name, value in glue_scoring.task_scores(task, by_seed["1"]).items():
            assert results["scores"][name]["1"] == value and results["aggregates"]["tasks"][name]["n"] == 1
    nine = {name: results["scores"][name]["1"] for name in glue_data.score_names(glue_mean_only=True)}
    assert results["aggregates"]["glue"] == {
        "mean": glue_scoring.glue_score(nine),
        "std": 0.0,
        "n_seeds": 1,
        "complete": True,
        "per_seed": {"1": glue_scoring.glue_score(nine)},
    }
    assert results["aggregates"]["tasks"]["stsb"]["mean"] == results["runs"]["stsb"]["1"]["score"]
    assert 0 <= results["runs"]["rte"]["1"]["accuracy"] <= 1
    assert (output_dir / "runs" / "mnli" / "seed-1.json").is_file()
    assert sorted(p.name for p in (output_dir / "runs" / "mnli").iterdir()) == ["seed-1.json"]  # no checkpoints kept
    markdown = (output_dir / "glue_results.md").read_text()
    assert (
        f"| {results['aggregates']['glue']['mean']:.2f} (0.00) | {results['scores']['wnli']['1']:.2f} (0.00) |"
        in markdown
    )
    rte = load_task("rte", assets / "data")["validation"]["label"]  # baselines: from the same dev set
    assert results["aggregates"]["tasks"]["rte"]["baseline"] == glue_scoring.learning_verdict(
        results["aggregates"]["tasks"]["rte"], glue_scoring.baseline_scores("rte", {"validation": rte})["rte"]
    )
    flagged = [name for name, task in results["aggregates"]["tasks"].items() if task["baseline"]["did_not_learn"]]
    assert "rte" in flagged  # 2 steps on made-up labels: no learning
    assert "| rte | " in markdown and "| **did not learn** |" in markdown
    out = capsys.readouterr().out
    majority = results["aggregates"]["tasks"]["rte"]["baseline"]["majority"]
    assert f"rte seed 1: rte {results['scores']['rte']['1']:.2f} (majority {majority:.2f}, chance 50.00)" in out


def test_batches_are_padded_to_their_longest_and_grouped_by_length(assets, tmp_path, monkeypatch):
    batches = []

    class RecordingTrainer(glue_sweep.Trainer):
        def train(self, *args, **kwargs):
            batches.extend(self.get_train_dataloader())
            return super().train(*args, **kwargs)

    monkeypatch.setattr(glue_sweep, "Trainer", RecordingTrainer)
    glue.main(
        suite_args(assets, tmp_path / "out", "--tasks", "rte", "--seeds", "1", "--per_device_train_batch_size", "2")
    )
    lengths = [batch["attention_mask"].sum(1).tolist() for batch in batches]
    assert len(batches) == 12 and all(batch["input_ids"].shape[1] == max(n) for batch, n in zip(batches, lengths))
    # The Trainer's length-grouped sampler: 24 examples, batch 2 → mega-batches of 6 (3 batches), each sorted by
    # length, longest first (only the first example of a mega-batch may be swapped for the longest of all).
    flat = [n for pair in lengths for n in pair]
    for start in range(0, 24, 6):
        assert flat[start + 1 : start + 6] == sorted(flat[start + 1 : start + 6], reverse=True)


def test_plain_bert_checkpoint(assets, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertForMaskedLM(config).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    glue.main(
        suite_args(assets, tmp_path / "out", "--model", str(tmp_path / "bert"), "--tasks", "stsb", "--seeds", "3")
    )
    results = json.loads((tmp_path / "out" / "glue_results.json").read_text())
    assert results["model"]["attention_type"] == "original"
    assert results["model"]["num_parameters"] == BertForMaskedLM(config).num_parameters()
    assert results["scores"]["stsb"]["3"] == results["runs"]["stsb"]["3"]["score"]
    assert results["aggregates"]["glue"]["complete"] is False and results["aggregates"]["glue"]["mean"] is None


def test_rerun_skips_finished_pairs(assets, tmp_path, fake_fine_tune, capsys):
    calls, _ = fake_fine_tune
    output_dir = tmp_path / "out"
    glue.main(suite_args(assets, output_dir, "--tasks", "rte,mrpc", "--seeds", "1,2"))
    assert len(calls) == 4
    glue.main(suite_args(assets, output_dir, "--tasks", "rte,mrpc", "--seeds", "1,2"))
    assert len(calls) == 4  # all done: nothing trained
    (output_dir / "runs" / "mrpc" / "seed-2.json").unlink()  # as if killed while training mrpc seed 2
    glue.main(suite_args(assets, output_dir, "--tasks", "rte,mrpc", "--seeds", "1,2,3"))
    assert [(task, seed) for _, task, seed in calls[4:]] == [("rte", 3), ("mrpc", 2), ("mrpc", 3)]
    results = json.loads((output_dir / "glue_results.json").read_text())
    assert results["scores"]["rte"] == pytest.approx({"1": 50.0, "2": 51.0, "3": 52.0})
    rte = results["aggregates"]["tasks"]["rte"]
    assert {key: rte[key] for key in ("mean", "std", "n")} == pytest.approx({"mean": 51.0, "std": 1.0, "n": 3})
    moved = tmp_path / "moved-model"
    shutil.copytree(assets / "model", moved)
    glue.main(suite_args(assets, output_dir, "--model", str(moved), "--tasks", "rte", "--seeds", "1"))
    assert len(calls) == 7  # the same weights in another folder: still done
    stderr = refused(
        suite_args(assets, output_dir, "--tasks", "rte", "--seeds", "1", "--learning_rate", "2e-5"), capsys
    )
    assert (
        "was made with another model or protocol than this run: learning_rate: 1e-05 saved vs 2e-05 in this run."
        in stderr
    )
    assert len(calls) == 7


def test_sweep_along_pretraining_checkpoints(assets, tmp_path, fake_fine_tune, capsys):
    calls, accuracies = fake_fine_tune
    for name in ("original", "pairwise"):
        for step in (100, 200, 300):
            shutil.copytree(assets / "model", tmp_path / name / f"checkpoint-{step}")
    accuracies.update(
        {
            "original/checkpoint-100": 0.50,
            "original/checkpoint-200": 0.75,
            "original/checkpoint-300": 0.80,
            "pairwise/checkpoint-100": 0.60,
            "pairwise/checkpoint-200": 0.70,
            "pairwise/checkpoint-300": 0.70,
        }
    )
    args = [
        "--pretraining_dirs",
        str(tmp_path / "original"),
        str(tmp_path / "pairwise"),
        "--tasks",
        "rte",
        "--seeds",
        "1,2",
        "--data_dir",
        str(assets / "data"),
        "--output_dir",
        str(tmp_path / "sweep"),
        "--max_length",
        MAX_LENGTH,
        *FAST,
    ]

    assert "no checkpoint for step(s) 250; it has 100, 200, 300." in refused(args + ["--steps", "100,250"], capsys)
    assert calls == []
    glue.main(args)
    assert len(calls) == 12

    with open(tmp_path / "sweep" / "glue_vs_step.csv") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["model", "step", "glue", "rte"]
    # seeds 1 and 2 score accuracy and accuracy + 0.01: the mean is accuracy + 0.005
    expected = [
        ("original", 100, 50.5),
        ("original", 200, 75.5),
        ("original", 300, 80.5),
        ("pairwise", 100, 60.5),
        ("pairwise", 200, 70.5),
        ("pairwise", 300, 70.5),
    ]
    assert [(r["model"], int(r["step"]), pytest.approx(float(r["glue"]))) for r in rows] == expected
    # 95% of the final score, crossed between the two steps around it: step 100 + 100 · (target − low) / (high − low)
    original_target, pairwise_target = 0.95 * 80.5, 0.95 * 70.5
    assert glue_sweep.crossing_step([100, 200, 300], [50.5, 75.5, 80.5]) == pytest.approx(
        200 + 100 * (original_target - 75.5) / 5
    )
    assert glue_sweep.crossing_step([100, 200, 300], [60.5, 70.5, 70.5]) == pytest.approx(
        100 + 100 * (pairwise_target - 60.5) / 10
    )
    assert (
        glue_sweep.crossing_step([1, 2], [90.0, 80.0]) == 1.0
        and glue_sweep.crossing_step([1, 2], [-30.0, -20.0]) is None
    )
    summary = (tmp_path / "sweep" / "glue_vs_step.md").read_text()
    assert f"| original | 300 | 80.50 | {original_target:.2f} | 219.5 |" in summary
    assert (tmp_path / "sweep" / "glue_vs_step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "sweep" / "pairwise" / "step-200" / "glue_results.json").is_file()


@pytest.mark.heavy
def test_sweep_on_checkpoints_of_a_real_pretraining_comparison(assets, tmp_path):
    """symbert-pretrain --compare writes one folder per attention type; the sweep fine-tunes their checkpoints."""
    rng = random.Random(2)
    (tmp_path / "corpus.txt").write_text("\n".join(sentence(rng) + "." for _ in range(300)) + "\n")
    files = dict(train_files=tmp_path / "corpus.txt", tokenizer=assets / "model")
    steps = dict(max_steps=4, warmup_steps=1, eval_steps=2, save_steps=2, logging_steps=2)
    pretrain.main(
        run_args(
            tmp_path, tmp_path / "pre", compare="original,pairwise", **files, eval_blocks=4, **steps, data_seed=None
        )
    )
    glue.main(
        [
            "--pretraining_dirs",
            str(tmp_path / "pre" / "original"),
            str(tmp_path / "pre" / "pairwise"),
            "--tasks",
            "rte",
            "--seeds",
            "1",
            "--data_dir",
            str(assets / "data"),
            "--output_dir",
            str(tmp_path / "sweep"),
            "--max_length",
            MAX_LENGTH,
            *FAST,
            "--max_steps",
            "1",
        ]
    )

    with open(tmp_path / "sweep" / "glue_vs_step.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(row["model"], row["step"]) for row in rows] == [
        ("original", "2"),
        ("original", "4"),
        ("pairwise", "2"),
        ("pairwise", "4"),
    ]
    for row in rows:  # each point is the rte score of that checkpoint's own suite
        results = json.loads(
            (tmp_path / "sweep" / row["model"] / f"step-{row['step']}" / "glue_results.json").read_text()
        )
        checkpoint = tmp_path / "pre" / row["model"] / f"checkpoint-{row['step']}"
        assert (
            results["model"]["name_or_path"] == str(checkpoint) and results["model"]["attention_type"] == row["model"]
        )
        assert float(row["glue"]) == pytest.approx(results["scores"]["rte"]["1"]) == pytest.approx(float(row["rte"]))
    assert (tmp_path / "sweep" / "glue_vs_step.png").stat().st_size > 10_000


def test_a_task_longer_than_the_models_training_blocks_is_named_before_training(tmp_path):
    from datasets import Dataset

    from symbert.training.glue.sweep import length_notice

    model = tmp_path / "demo"
    (model / "checkpoint-10").mkdir(parents=True)
    (model / "training_summary.json").write_text(json.dumps({"max_seq_length": 4}))
    tokenized = {
        "train": Dataset.from_dict({"input_ids": [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1] * 8]}),
        "validation": Dataset.from_dict({"input_ids": [[1, 2], [1] * 7]}),
    }
    for folder in (model, model / "checkpoint-10"):  # a checkpoint: its run's training length
        assert length_notice(str(folder), "rte", tokenized, 128) == (
            "notice: rte: 60% of its examples are longer than the 4-token blocks demo was pre-trained on, so they use "
            "position embeddings it never trained; --max_length 4 matches its training (now 128)."
        ).replace("demo was", f"{folder.name} was")
    assert length_notice(str(model), "rte", tokenized, 4) is None  # within its training
    assert length_notice(str(tmp_path / "bert"), "rte", tokenized, 128) is None  # no record: nothing said


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"metrics": {"accuracy": 2.0, "score": 200.0}}, "has accuracy=2.0, outside [0, 1]"),
        ({"metrics": {"accuracy": float("nan")}}, "has accuracy=nan, not a finite number"),
        ({"seed": "1"}, "has seed '1', not an integer"),
        ({"task": "imdb"}, "names task 'imdb', which is not in the task table"),
        ({"seed": 3}, "records task 'rte' seed 3, not the pair its name says (runs/<task>/seed-<seed>.json)"),
        ({"task": "sst2"}, "records task 'sst2' seed 1, not the pair its name says (runs/<task>/seed-<seed>.json)"),
        (
            "copied as seed-3.json",
            "records task 'rte' seed 1, not the pair its name says (runs/<task>/seed-<seed>.json)",
        ),
    ],
)
def test_an_edited_run_file_is_not_reused(assets, tmp_path, capsys, fake_fine_tune, edit, message):
    output = tmp_path / "out"
    glue.main(suite_args(assets, output, "--tasks", "rte", "--seeds", "1"))
    run_file = output / "runs" / "rte" / "seed-1.json"
    if edit == "copied as seed-3.json":  # it would count as a third seed
        run_file = run_file.with_name("seed-3.json")
        run_file.write_bytes(run_file.with_name("seed-1.json").read_bytes())
    else:
        run_file.write_text(json.dumps({**json.loads(run_file.read_text()), **edit}))
    error = refused(suite_args(assets, output, "--tasks", "rte", "--seeds", "1"), capsys)
    assert f"{run_file} {message}; remove it to rerun its pair." in error


@pytest.mark.heavy
def test_a_checkpoint_stored_in_float16_is_fine_tuned_in_float32(assets, tmp_path, monkeypatch):
    """The protocol's float32 weights whatever the checkpoint stores: transformers 5 loads a float16 one as float16,
    which trains badly without autocast (and not at all on some CPUs)."""
    model = tmp_path / "model16"
    SymBertForMaskedLM.from_pretrained(assets / "model").half().save_pretrained(model)
    AutoTokenizer.from_pretrained(assets / "model").save_pretrained(model)
    trained_dtypes = []

    class RecordingTrainer(glue_sweep.Trainer):
        def train(self, *args, **kwargs):
            trained_dtypes.append({parameter.dtype for parameter in self.model.parameters()})
            return super().train(*args, **kwargs)

    monkeypatch.setattr(glue_sweep, "Trainer", RecordingTrainer)
    arguments = suite_args(assets, tmp_path / "out", "--tasks", "sst2", "--seeds", "1")
    glue.main([*arguments[:1], str(model), *arguments[2:]])
    assert trained_dtypes == [{torch.float32}]
    assert json.loads((tmp_path / "out" / "glue_results.json").read_text())["protocol"]["precision"] == "fp32"
