"""SymBERT exported as plain BERT (`symbert-to-bert`) in the tools that take BERT without remote code, and the
documented sentence-transformers route with remote code: sentence-transformers, torch's ONNX exporter with
onnxruntime, a GLUE-fine-tuned classifier and the fill-mask pipeline, each against the SymBERT model it came from.

The processes that load folders cannot import this project and have a pseudo-terminal as their stdin: where
transformers needs a yes to run a folder's code it asks there (and waits 15 s) instead of failing, so a missing
`trust_remote_code` shows as its question in the output."""

import json
import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
)

import symbert
from helpers.glue import MAX_LENGTH, suite_args
from helpers.integrations import SENTENCES, VOCAB, probabilities, save_with_tokenizer, symbert_config
from helpers.tiny import tiny_config
from symbert import ATTENTION_TYPES
from symbert.tools.bert_export import BOUND, export_to_bert, relative_difference
from symbert.tools.bert_export import main as symbert_to_bert
from symbert.tools.onnx_export import export_onnx, max_difference
from symbert.training.glue import command as glue
from symbert.training.glue import scoring as glue_scoring
from symbert.training.glue import sweep as glue_sweep
from symbert.training.glue.data import TASKS, load_task

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
FRESH_LOAD = ROOT / "modeling" / "tools" / "fresh_load.py"
DOCS = ROOT / "docs" / "integrations.md"
DOC_MARKER = "<!-- tests/modeling/test_bert_integrations.py runs this snippet as it is written here -->"
PROMPT = re.compile(r"custom code|trust_remote_code", re.IGNORECASE)  # transformers' question, or its refusal
MASKED = "the cat [MASK] on the mat"

# What every fresh process runs first: `import symbert` fails (fresh_load.py's BlockProject), so folders load from
# their own files; it prints whether its stdin is a terminal.
PRELUDE = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("fresh_load", sys.argv.pop(1))
    fresh_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh_load)
    sys.meta_path.insert(0, fresh_load.BlockProject())
    print("stdin is a terminal:", sys.stdin.isatty(), flush=True)
    """
)


def run_on_a_terminal(script, *args, cwd, timeout=300):
    """`script` run by a fresh interpreter after PRELUDE, offline, in `cwd`, with a pseudo-terminal nobody types into
    as stdin; returns its stdout and stderr together, after checking it succeeded on that terminal."""
    controller, terminal = pty.openpty()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(Path(cwd) / "modules"),
        "PYTHONPATH": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
    try:
        result = subprocess.run(
            [sys.executable, "-c", PRELUDE + script, str(FRESH_LOAD), *map(str, args)],
            stdin=terminal,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "stdin is a terminal: True" in output
    return output


def mean_pooled(model, batch):
    """What sentence-transformers' mean pooling gives: the last hidden state averaged over the unpadded tokens."""
    with torch.no_grad():
        hidden = model.eval()(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return (hidden * mask).sum(1) / mask.sum(1)


def within_bound(reference, other):
    return relative_difference({"outputs": reference}, {"outputs": other}) <= BOUND


# ---------------------------------------------------------------- the exports, used in a fresh process


@pytest.fixture(scope="module")
def exports(tokenizer, tmp_path_factory):  # noqa: F811
    """{attention type: (SymBERT MLM folder, its BERT export)}: an MLM, as symbert-pretrain leaves it."""
    root = tmp_path_factory.mktemp("exports")
    folders = {}
    for attention_type in ATTENTION_TYPES:
        folder = save_with_tokenizer(
            symbert.SymBertForMaskedLM(symbert_config(attention_type)), tokenizer, root / attention_type
        )
        assert export_to_bert(folder, f"{folder}-bert") <= BOUND
        folders[attention_type] = (folder, f"{folder}-bert")
    return folders


# One fresh process that cannot import this project loads every export as a user of plain transformers would, with
# `SentenceTransformer(folder)` (Transformer + mean pooling) and `pipeline("fill-mask", model=folder)`, both without
# trust_remote_code.
WITHOUT_REMOTE_CODE = textwrap.dedent(
    """
    import json, torch
    from sentence_transformers import SentenceTransformer
    from transformers import pipeline

    cases, sentences, masked = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    runs = {}
    for attention_type, folder in cases.items():
        sentence_model = SentenceTransformer(folder, device="cpu")
        fill_mask = pipeline("fill-mask", model=folder, device="cpu")
        runs[attention_type] = {
            "embeddings": sentence_model.encode(sentences, convert_to_tensor=True),
            "fill_mask": fill_mask(masked, top_k=3),
            "classes": [type(module).__module__ for module in (sentence_model[0].auto_model, fill_mask.model)],
        }
    runs["modules"] = sorted(name for name in sys.modules if name.startswith(("symbert", "transformers_modules")))
    torch.save(runs, sys.argv[4])
    """
)


@pytest.fixture(scope="module")
def plain_runs(exports, tmp_path_factory):
    """The fresh process's results by attention type, and its output."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    cases = {attention_type: exported for attention_type, (_, exported) in exports.items()}
    output = run_on_a_terminal(
        WITHOUT_REMOTE_CODE, json.dumps(cases), json.dumps(SENTENCES), MASKED, elsewhere / "runs.pt", cwd=elsewhere
    )
    return torch.load(elsewhere / "runs.pt", weights_only=False), output


def test_the_exports_load_as_bert_without_a_question(plain_runs):
    runs, output = plain_runs
    assert not PROMPT.search(output), output[-3000:]
    assert runs.pop("modules") == []  # neither this project nor a folder's code was imported
    for run in runs.values():
        assert run["classes"] == ["transformers.models.bert.modeling_bert"] * 2


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_sentence_transformers_on_the_export(exports, plain_runs, tokenizer, attention_type):  # noqa: F811
    encoder = symbert.SymBertModel.from_pretrained(exports[attention_type][0])  # the MLM's encoder
    expected = mean_pooled(encoder, tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    assert within_bound(expected, plain_runs[0][attention_type]["embeddings"])


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_fill_mask_pipeline_on_the_export(exports, plain_runs, tokenizer, attention_type):  # noqa: F811
    inputs = tokenizer(MASKED, return_tensors="pt")
    with torch.no_grad():
        logits = symbert.SymBertForMaskedLM.from_pretrained(exports[attention_type][0]).eval()(**inputs).logits
    position = inputs["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    top = probabilities(logits[0, position]).topk(3)
    result = plain_runs[0][attention_type]["fill_mask"]
    assert [r["token"] for r in result] == top.indices.tolist()
    assert [r["token_str"] for r in result] == [VOCAB[i] for i in top.indices.tolist()]
    assert [r["score"] for r in result] == pytest.approx(top.values.tolist(), abs=1e-5)


# ---------------------------------------------------------------- ONNX


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_onnx_export_of_the_export(exports, tmp_path, attention_type):
    """torch's TorchScript-based exporter on the export as transformers loads it; onnxruntime against the SymBERT model
    on a padded [3, 13] batch (the export example is [2, 8])."""
    folder, exported = exports[attention_type]
    bert = AutoModelForMaskedLM.from_pretrained(exported)
    assert type(bert).__module__ == "transformers.models.bert.modeling_bert"
    path = str(tmp_path / "bert.onnx")
    export_onnx(bert, path, ["logits"])
    assert max_difference(symbert.SymBertForMaskedLM.from_pretrained(folder), path, batch=3, length=13) <= 1e-4


# ---------------------------------------------------------------- GLUE


def dev_predictions(model, folder, data):
    """{dev split: (predicted classes, gold labels)} and {dev split: logits} of `model` with the tokenizer in `folder`,
    each split tokenized as symbert-glue does and padded as one batch."""
    wordpiece = AutoTokenizer.from_pretrained(folder)
    splits = {split: data[split] for split in TASKS["mrpc"].eval_splits}
    predictions, logits = {}, {}
    for split, dataset in glue_sweep.tokenize("mrpc", splits, wordpiece, int(MAX_LENGTH)).items():
        batch = DataCollatorWithPadding(wordpiece)(list(dataset))
        labels = batch.pop("labels")
        with torch.no_grad():
            logits[split] = model.eval()(**batch).logits
        predictions[split] = (logits[split].argmax(-1).numpy(), labels.numpy())
    return predictions, logits


@pytest.mark.parametrize("attention_type", ["pairwise", "mhe_mul"])
def test_glue_classifier_exported_scores_the_same(assets, tmp_path, attention_type):  # noqa: F811
    """symbert-glue fine-tunes the model on mrpc (keeping the final checkpoint) and symbert-to-bert exports that
    classifier: as transformers' BERT it gives the SymBERT classifier's dev predictions and the metrics symbert-glue
    reported."""
    model = assets / "model"  # pairwise
    if attention_type != "pairwise":
        model = tmp_path / attention_type
        wordpiece = AutoTokenizer.from_pretrained(assets / "model")
        config = tiny_config(attention_type, vocab_size=len(wordpiece), pad_token_id=wordpiece.pad_token_id)
        symbert.SymBertForMaskedLM(config).save_pretrained(model)
        wordpiece.save_pretrained(model)
    # 20 steps at 3e-3 (the data are random): a classifier that predicts both classes on the dev set
    extra = ["--model", str(model), "--tasks", "mrpc", "--seeds", "1", "--learning_rate", "3e-3", "--max_steps", "20"]
    glue.main(suite_args(assets, tmp_path / "glue", *extra, "--save_strategy", "steps", "--save_steps", "20"))
    reported = json.loads((tmp_path / "glue" / "glue_results.json").read_text())["runs"]["mrpc"]["1"]
    checkpoint = tmp_path / "glue" / "runs" / "mrpc" / "seed-1" / "checkpoint-20"  # the model symbert-glue scored
    symbert_to_bert([str(checkpoint), str(tmp_path / "bert")])

    data = load_task("mrpc", str(assets / "data"))
    classifier = symbert.SymBertForSequenceClassification.from_pretrained(checkpoint)
    predictions, logits = dev_predictions(classifier, checkpoint, data)
    bert = AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert")
    assert type(bert).__module__ == "transformers.models.bert.modeling_bert"
    bert_predictions, bert_logits = dev_predictions(bert, tmp_path / "bert", data)
    for split, (predicted, labels) in predictions.items():
        assert len(set(predicted.tolist())) == 2  # both classes predicted: the comparison is of decisions
        assert numpy.array_equal(bert_predictions[split][0], predicted)
        assert numpy.array_equal(bert_predictions[split][1], labels)
        assert within_bound(logits[split], bert_logits[split])
    assert (
        glue_scoring.run_metrics("mrpc", bert_predictions) == glue_scoring.run_metrics("mrpc", predictions) == reported
    )


# ---------------------------------------------------------------- the documented route with remote code


def documented_snippet():
    """The sentence-transformers snippet of docs/integrations.md: the python block right after DOC_MARKER."""
    text = DOCS.read_text()
    assert text.count(DOC_MARKER) == 1
    block = re.match(r"\s*```python\n(.*?)```", text.split(DOC_MARKER)[1], re.DOTALL)
    assert block, f"no python block right after {DOC_MARKER} in {DOCS}"
    return block.group(1)


def test_documented_sentence_transformers_snippet_asks_nothing(tokenizer, tmp_path):  # noqa: F811
    """The snippet run as written, on a SymBERT folder at its placeholder path, by a process that cannot import this
    project: it loads the folder's code without asking, and its embeddings are the model's, before and after saving."""
    snippet = documented_snippet()
    sentences = ["a sentence", "another one"]
    assert "path/or/hub-id" in snippet and json.dumps(sentences) in snippet
    folder = save_with_tokenizer(
        symbert.SymBertModel(symbert_config("pairwise")), tokenizer, tmp_path / "path/or/hub-id"
    )
    keep = "\nimport numpy\nnumpy.save('embeddings.npy', numpy.stack([embeddings, encoder.encode(%s)]))\n"
    output = run_on_a_terminal(snippet + keep % json.dumps(sentences), cwd=tmp_path)
    assert not PROMPT.search(output), output[-3000:]

    expected = mean_pooled(
        symbert.SymBertModel.from_pretrained(folder), tokenizer(sentences, padding=True, return_tensors="pt")
    )
    embeddings, reloaded = torch.from_numpy(numpy.load(tmp_path / "embeddings.npy"))
    assert within_bound(expected, embeddings) and torch.equal(reloaded, embeddings)
