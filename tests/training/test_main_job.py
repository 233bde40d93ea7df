"""The main job's report: the unigram baseline, the model's masked-token scores, and the model against the baseline
on exactly the Trainer's eval masks."""

import json
import math
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.corpora import run_args, tiny_corpus, tiny_sentences
from symbert.training.arguments import DataArguments, parse_arguments
from symbert.training.data import loading as data
from symbert.training.data.tokenizer import SHIPPED_WORDPIECE
from symbert.training.evaluation import FILL_MASK_SENTENCES, masked_token_scores, saved_model_scores, unigram_baseline
from symbert.training.pretrain import main, set_torch_threads


def test_unigram_baseline_by_hand():
    # counts 3, 1, 0 -> add-one smoothed probabilities 4/7, 2/7, 1/7; token 0 is the most frequent
    scores = unigram_baseline(torch.tensor([3, 1, 0]), torch.tensor([0, 1, 2, 0]))
    expected = -(2 * math.log(4 / 7) + math.log(2 / 7) + math.log(1 / 7)) / 4
    assert scores == {"loss": pytest.approx(expected, abs=1e-12), "accuracy": 0.5, "masked_tokens": 4}


class FixedLogits(torch.nn.Module):
    """Returns the logits it was given, whatever the input; `eval()` is all the scoring needs of a model."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, **batch):
        return SimpleNamespace(logits=self.logits)


def test_masked_token_scores_by_hand():
    labels = torch.tensor([[-100, 0, -100], [1, -100, 2]])  # three masked tokens, vocabulary of 3
    at_masked = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 3.0]])  # right, wrong (says 2), right
    # log-softmax by hand: -log(e^2 / (e^2 + 2)), -log(1 / (2 + e)), -log(e^3 / (2 + e^3))
    expected = (
        -math.log(math.e**2 / (math.e**2 + 2)) - math.log(1 / (2 + math.e)) - math.log(math.e**3 / (2 + math.e**3))
    ) / 3
    dense = torch.full((2, 3, 3), float("nan"))  # unmasked positions must not count
    dense[labels != -100] = at_masked
    for logits in (at_masked, dense):  # sparse_prediction's logits (masked positions only) and every position's
        scores = masked_token_scores(FixedLogits(logits), [{"input_ids": labels.clamp(min=0), "labels": labels}])
        assert scores["loss"] == pytest.approx(expected, abs=1e-6)
        assert scores["accuracy"] == pytest.approx(2 / 3)
        assert scores["masked_tokens"] == 3


def test_masked_token_scores_skip_the_padding_rows_of_a_fixed_prediction_count():
    # max_predictions_per_seq: the masked positions' rows first, in order, then rows of ignored positions
    labels = torch.tensor([[-100, 0, -100], [1, -100, -100]])
    at_masked = torch.tensor([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0]])  # both right
    padded = torch.cat([at_masked, torch.full((2, 3), float("nan"))])
    for logits in (at_masked, padded):
        scores = masked_token_scores(FixedLogits(logits), [{"input_ids": labels.clamp(min=0), "labels": labels}])
        assert scores["loss"] == pytest.approx(-math.log(math.e**5 / (math.e**5 + 2)), abs=1e-6)
        assert scores["accuracy"] == 1.0 and scores["masked_tokens"] == 2


def train_main_job(tmp_path):
    """The main job (cpu-demo recipe) on a tiny corpus and tokenizer, 6 steps; returns its output folder."""
    words = "the a river man house walked slowly along bank old night water road looked said went came saw".split()
    tiny_corpus(tmp_path, tiny_sentences(300, words, longest=20), vocab_size=100)
    output_dir = tmp_path / "run"
    main(run_args(tmp_path, output_dir, max_steps=6, eval_steps=6, save_steps=100, eval_on_start=None, data_seed=None))
    return output_dir


@pytest.mark.heavy
def test_report_scores_the_trainers_eval_masks(tmp_path, capsys):
    output_dir = train_main_job(tmp_path)
    printed = capsys.readouterr().out
    comparison = saved_model_scores(output_dir)
    # one eval batch of 8 blocks: the Trainer's eval loss is the mean over its masked tokens, as the report's is
    trainer_loss = [entry["eval_loss"] for entry in json_log(output_dir) if "eval_loss" in entry][-1]
    assert comparison["model"]["loss"] == pytest.approx(trainer_loss, abs=1e-5)
    assert comparison["eval_blocks"] == 8
    assert comparison["unigram"]["masked_tokens"] == comparison["model"]["masked_tokens"] > 0
    unigram, model = comparison["unigram"], comparison["model"]
    assert f"unigram baseline (train token frequencies) {unigram['loss']:13.4f} {unigram['accuracy']:15.1%}" in printed
    assert f"model at step 6 {' ' * 25}{model['loss']:13.4f} {model['accuracy']:15.1%}" in printed
    for sentence in FILL_MASK_SENTENCES:
        assert sentence.format(mask="[MASK]") in printed


def json_log(output_dir):
    return json.loads((output_dir / "trainer_state.json").read_text())["log_history"]


@pytest.mark.parametrize("load, cores, world_size, threads", [(0.1, 2, 1, 2), (7.5, 2, 1, 2), (0.0, 4, 2, 2)])
def test_torch_threads_are_the_machines_cores_whatever_its_load(monkeypatch, load, cores, world_size, threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    before = torch.get_num_threads()
    try:
        set_torch_threads(SimpleNamespace(use_cpu=True, world_size=world_size))
        assert torch.get_num_threads() == threads
        monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stays
        torch.set_num_threads(3)
        set_torch_threads(SimpleNamespace(use_cpu=True, world_size=world_size))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.heavy
def test_the_report_scores_what_training_built(tmp_path, monkeypatch):
    """The end-of-run report takes the tokenizer, blocks and masks that training built: the corpus is read and
    tokenised once (only the fill-mask check loads the saved folder, in a fresh process)."""
    calls = {"corpus_tokenizer": 0, "load_blocks": 0}
    for name in calls:
        original = getattr(data, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(data, name, counted)
    train_main_job(tmp_path)
    assert calls == {"corpus_tokenizer": 1, "load_blocks": 1}


def test_the_main_job_uses_the_shipped_tokenizer_whatever_the_cache(tmp_path, monkeypatch):
    """The default vocabulary is the shipped tokenizer (training one is not reproducible: tokenizers' WordPiece
    trainer breaks ties in no fixed order), so every machine gets the same ids and the documented figures."""
    monkeypatch.setenv("SYMBERT_CACHE", str(tmp_path / "empty-cache"))
    tokenizer = data.load_tokenizer(DataArguments())
    shipped = json.loads((SHIPPED_WORDPIECE / "tokenizer.json").read_text())["model"]["vocab"]
    assert tokenizer.get_vocab() == shipped and len(shipped) == DataArguments().tokenizer_vocab_size
    assert tokenizer("The old man walked slowly.")["input_ids"][0] == tokenizer.cls_token_id
    assert not (tmp_path / "empty-cache").exists()  # nothing trained, nothing cached
    text = (SHIPPED_WORDPIECE.parent / "SOURCE.md").read_text()
    assert SHIPPED_WORDPIECE.name in text


@pytest.mark.heavy
def test_the_steps_a_pass_the_docs_state_are_the_recipes(tmp_path):
    """docs/pretraining.md states the main job's blocks and steps a pass; they follow from the recipe, the embedded
    corpus and the shipped tokenizer, and this test fails when one of those changes them (refresh the sentence)."""
    docs = " ".join((Path(__file__).parents[2] / "docs" / "pretraining.md").read_text().split())
    stated = re.search(r"gives ([\d,]+) training blocks of (\d+) tokens, (\d+) steps of (\d+) blocks a pass", docs)
    assert stated, "docs/pretraining.md no longer states the cpu-demo recipe's blocks and steps a pass"
    _, _, data_args, training_args = parse_arguments(["--recipe", "cpu-demo", "--output_dir", str(tmp_path / "run")])
    train, _ = data.load_blocks(data_args, data.load_tokenizer(data_args), seed=training_args.seed)
    batch = training_args.per_device_train_batch_size
    assert [int(stated[1].replace(",", "")), int(stated[2]), int(stated[3]), int(stated[4])] == [
        len(train),
        data_args.max_seq_length,
        len(train) // batch,
        batch,
    ]
