"""SymBERT in the tools used with BERT: PEFT (LoRA), sentence-transformers, ONNX export + onnxruntime, torch.compile and
transformers pipelines, on tiny models of every variant saved with a tokenizer and loaded by path.

SYMBERT_HEAVY_TESTS=1 also runs the slow parts: inductor compilation and the torch.export-based ONNX exporter."""

import os
import subprocess
import sys
import textwrap

import onnx
import pytest
import torch
from peft import LoraConfig, get_peft_model
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import AutoModel
from transformers.pipelines import SUPPORTED_TASKS

import symbert
from helpers.integrations import LABELS, SENTENCES, VOCAB, probabilities, save_with_tokenizer, symbert_config
from symbert import ATTENTION_TYPES
from symbert.tools.onnx_export import OUTPUT_NAMES, export_onnx, max_difference

opt_in = pytest.mark.skipif(not os.environ.get("SYMBERT_HEAVY_TESTS"), reason="set SYMBERT_HEAVY_TESTS=1 to run")


# ---------------------------------------------------------------- PEFT


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_lora_trains_and_merges(attention_type, tokenizer):
    torch.manual_seed(0)
    model = symbert.SymBertForSequenceClassification(symbert_config(attention_type))
    # BERT's usual LoRA targets where the type has them (`no_query` has no query; `shared` has only `shared`)
    attention = model.bert.encoder.layer[0].attention.self
    target_modules = [name for name in ("query", "value", "shared") if hasattr(attention, name)]
    lora = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=target_modules))
    wrapped = [
        name
        for name, module in lora.named_modules()
        if hasattr(module, "lora_A") and name.endswith(tuple(target_modules))
    ]
    assert len(wrapped) == 2 * len(target_modules)  # every layer

    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    labels = torch.tensor([0, 1, 2])
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(5):
        lora(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert all(lora.get_submodule(name).lora_B["default"].weight.abs().sum() > 0 for name in wrapped)  # B starts at 0

    lora.eval()
    with torch.no_grad():
        adapter_logits = lora(**batch).logits
        with lora.disable_adapter():
            assert (lora(**batch).logits - adapter_logits).abs().max() > 1e-4  # the adapter changes the outputs
        merged = lora.merge_and_unload()
        merged_logits = merged(**batch).logits
    assert type(merged) is symbert.SymBertForSequenceClassification
    assert not any("lora" in name for name, _ in merged.named_parameters())
    torch.testing.assert_close(merged_logits, adapter_logits, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- sentence-transformers


def test_sentence_transformers_mean_pooling_and_reload(tmp_path, tokenizer):
    folder = save_with_tokenizer(symbert.SymBertModel(symbert_config("pairwise")), tokenizer, tmp_path / "encoder")
    remote = {"trust_remote_code": True}  # the processor too: the tokenizer reads config.json (else it asks, twice)
    transformer = Transformer(
        folder, model_kwargs=remote, config_kwargs=remote, processor_kwargs=remote, max_seq_length=32
    )
    encoder = SentenceTransformer(
        modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")], device="cpu"
    )
    embeddings = encoder.encode(SENTENCES, convert_to_tensor=True)

    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    torch.testing.assert_close(embeddings, (hidden * mask).sum(1) / mask.sum(1), atol=1e-5, rtol=1e-5)

    encoder.save(str(tmp_path / "sentence-model"))
    reloaded = SentenceTransformer(str(tmp_path / "sentence-model"), trust_remote_code=True, device="cpu")
    assert torch.equal(reloaded.encode(SENTENCES, convert_to_tensor=True), embeddings)


# ---------------------------------------------------------------- ONNX


def check_onnx_export(attention_type, head, tmp_path, dynamo):
    config = symbert_config(attention_type)
    model = (symbert.SymBertModel if head == "model" else symbert.SymBertForSequenceClassification)(config).eval()
    path = str(tmp_path / f"{attention_type}-{head}.onnx")
    export_onnx(model, path, OUTPUT_NAMES[head], dynamo=dynamo)
    graph = onnx.load(path).graph
    assert [o.name for o in graph.output] == OUTPUT_NAMES[head]
    for graph_input in graph.input:  # batch and sequence axes are symbolic, not the example's 2 × 8
        assert all(dim.dim_param for dim in graph_input.type.tensor_type.shape.dim), graph_input
    assert max_difference(model, path, batch=3, length=13) <= 1e-4


@pytest.mark.parametrize("head", ["model", "sequence-classification"])
@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_onnx_export_matches_pytorch(attention_type, head, tmp_path):
    check_onnx_export(attention_type, head, tmp_path, dynamo=False)


@opt_in
@pytest.mark.parametrize("head", ["model", "sequence-classification"])
@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_onnx_dynamo_export_matches_pytorch(attention_type, head, tmp_path):
    check_onnx_export(attention_type, head, tmp_path, dynamo=True)


def test_onnx_command(tmp_path, tokenizer, capsys):
    folder = save_with_tokenizer(
        symbert.SymBertForSequenceClassification(symbert_config("mhe_add")), tokenizer, tmp_path / "m"
    )
    symbert.tools.onnx_export.main([folder, str(tmp_path / "m.onnx"), "--head", "sequence-classification"])
    assert "max abs diff" in capsys.readouterr().out and (tmp_path / "m.onnx").is_file()
    with pytest.raises(SystemExit):
        symbert.tools.onnx_export.main([folder, str(tmp_path / "m.txt")])


# ---------------------------------------------------------------- torch.compile


def mlm_batch():
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, len(VOCAB), (2, 10), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": input_ids.masked_fill(attention_mask == 0, -100),
    }


def compiled_step_matches_eager(attention_type, backend):
    torch.manual_seed(0)
    eager = symbert.SymBertForMaskedLM(symbert_config(attention_type)).train()
    compiled_model = symbert.SymBertForMaskedLM(symbert_config(attention_type)).train()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model, backend=backend, fullgraph=True)  # fullgraph: any graph break raises
    batch = mlm_batch()
    eager_loss, compiled_loss = eager(**batch).loss, compiled(**batch).loss
    eager_loss.backward()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-5, rtol=1e-5)
    eager_grads = dict(eager.named_parameters())
    for name, parameter in compiled_model.named_parameters():
        torch.testing.assert_close(parameter.grad, eager_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_mlm_compiles_without_graph_breaks(attention_type):
    torch._dynamo.reset()
    model = symbert.SymBertForMaskedLM(symbert_config(attention_type)).train()
    explanation = torch._dynamo.explain(model)(**mlm_batch())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled_step_matches_eager(attention_type, backend="aot_eager")  # traces the backward graph too


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_recipe_training_step_compiles_once_for_every_type(attention_type):
    """The compiled recipe path: dropout on, static sparse prediction. Batches with other masks and other numbers of
    masked tokens reuse the first graph (a recompile raises), with the losses of the same model run eagerly."""
    torch._dynamo.reset()
    config = symbert_config(attention_type)
    config.update(dict(sparse_prediction=True, max_predictions_per_seq=6, attention_probs_dropout_prob=0.1))
    torch.manual_seed(0)
    model = symbert.SymBertForMaskedLM(config).train()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    generator = torch.Generator().manual_seed(1)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for masked_share in (0.15, 0.3, 0.5):
            batch = mlm_batch()
            masked = torch.rand(batch["input_ids"].shape, generator=generator) < masked_share
            batch["labels"] = batch["labels"].masked_fill(~masked, -100)
            torch.manual_seed(2)
            loss = compiled(**batch).loss
            loss.backward()
            torch.manual_seed(2)
            torch.testing.assert_close(loss, model(**batch).loss, atol=1e-5, rtol=1e-5)


@opt_in
@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
def test_mlm_inductor_forward_backward(attention_type):
    torch._dynamo.reset()
    compiled_step_matches_eager(attention_type, backend="inductor")


# ---------------------------------------------------------------- pipelines


# One fresh process that cannot import this project runs every pipeline, so the model classes come from the saved
# folders' own code (trust_remote_code=True), as for a user without SymBERT installed; it also returns the pipeline
# model's raw outputs on the same text, which the tests compare the pipeline results against.
PIPELINE_RUNNER = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    from check_compat import BlockProject
    sys.meta_path.insert(0, BlockProject())
    from transformers import pipeline

    runs = []
    for case in torch.load(sys.argv[2]):
        task_pipeline = pipeline(case["task"], model=case["folder"], trust_remote_code=True, device="cpu")
        inputs = task_pipeline.tokenizer(case["text"], return_tensors="pt")
        with torch.no_grad():
            outputs = task_pipeline.model(**inputs)
        result = task_pipeline(*case["args"], **case["kwargs"])
        runs.append({"module": type(task_pipeline.model).__module__, "result": result, "input_ids": inputs["input_ids"][0], "outputs": outputs})
    torch.save(runs, sys.argv[3])
    """
)
QA_CONTEXT = "paris is the capital of france"
PIPELINE_CASES = {  # task: (head, positional args, keyword args, the text the raw outputs are computed on)
    "fill-mask": (symbert.SymBertForMaskedLM, ["the cat [MASK] on the mat"], {"top_k": 3}, "the cat [MASK] on the mat"),
    "text-classification": (symbert.SymBertForSequenceClassification, [SENTENCES[0]], {"top_k": None}, SENTENCES[0]),
    "token-classification": (symbert.SymBertForTokenClassification, [SENTENCES[1]], {}, SENTENCES[1]),
    "question-answering": (
        symbert.SymBertForQuestionAnswering,
        [],
        {"question": "what is the capital", "context": QA_CONTEXT, "top_k": 3},
        QA_CONTEXT,
    ),
    "feature-extraction": (symbert.SymBertModel, [SENTENCES[2]], {"return_tensors": True}, SENTENCES[2]),
}


# transformers 5.3 dropped the extractive question-answering pipeline (for every model); tests/compat/run_matrix.sh
# runs it under 4.54, 4.57 and 5.2.
HAS_QA_PIPELINE = "question-answering" in SUPPORTED_TASKS


@pytest.fixture(scope="module")
def pipeline_runs(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    cases = []
    for attention_type in ATTENTION_TYPES:
        for task, (head, args, kwargs, text) in PIPELINE_CASES.items():
            if task == "question-answering" and not HAS_QA_PIPELINE:
                continue
            folder = save_with_tokenizer(head(symbert_config(attention_type)), tokenizer, root / attention_type / task)
            cases.append(
                {
                    "attention_type": attention_type,
                    "task": task,
                    "folder": folder,
                    "args": args,
                    "kwargs": kwargs,
                    "text": text,
                }
            )
    torch.save(cases, root / "cases.pt")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(elsewhere / "modules"),
        "PYTHONPATH": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
    compat = os.path.join(os.path.dirname(os.path.dirname(__file__)), "compat")
    command = [sys.executable, "-c", PIPELINE_RUNNER, compat, str(root / "cases.pt"), str(root / "runs.pt")]
    result = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = torch.load(root / "runs.pt", weights_only=False)
    assert all(run["module"].startswith("transformers_modules") for run in runs)
    return {(case["attention_type"], case["task"]): run for case, run in zip(cases, runs, strict=True)}


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_fill_mask_pipeline(pipeline_runs, attention_type):
    run = pipeline_runs[attention_type, "fill-mask"]
    position = run["input_ids"].tolist().index(VOCAB.index("[MASK]"))
    top = probabilities(run["outputs"].logits[0, position]).topk(3)
    assert [r["token"] for r in run["result"]] == top.indices.tolist()
    assert [r["token_str"] for r in run["result"]] == [VOCAB[i] for i in top.indices.tolist()]
    assert [r["score"] for r in run["result"]] == pytest.approx(top.values.tolist(), rel=1e-5)


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_text_classification_pipeline(pipeline_runs, attention_type):
    run = pipeline_runs[attention_type, "text-classification"]
    expected = {LABELS[i]: p for i, p in enumerate(probabilities(run["outputs"].logits[0]).tolist())}
    assert {r["label"]: r["score"] for r in run["result"]} == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_token_classification_pipeline(pipeline_runs, attention_type):
    run = pipeline_runs[attention_type, "token-classification"]
    expected = probabilities(run["outputs"].logits[0, 1:-1])  # the pipeline skips [CLS] and [SEP]
    assert [r["word"] for r in run["result"]] == SENTENCES[1].split()
    assert [r["entity"] for r in run["result"]] == [LABELS[i] for i in expected.argmax(-1).tolist()]
    assert [r["score"] for r in run["result"]] == pytest.approx(expected.max(-1).values.tolist(), rel=1e-5)


@pytest.mark.skipif(not HAS_QA_PIPELINE, reason="this transformers has no question-answering pipeline (dropped in 5.3)")
@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_question_answering_pipeline(pipeline_runs, attention_type):
    answers = pipeline_runs[attention_type, "question-answering"]["result"]
    scores = [a["score"] for a in answers]
    # span scores are p_start · p_end over distinct spans: positive, sorted, summing to at most 1
    assert len(answers) == 3 and scores == sorted(scores, reverse=True) and scores[-1] > 0 and sum(scores) <= 1 + 1e-6
    for answer in answers:  # character spans of the context
        assert answer["answer"] and answer["answer"] == QA_CONTEXT[answer["start"] : answer["end"]]


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.heavy
def test_feature_extraction_pipeline(pipeline_runs, attention_type):
    run = pipeline_runs[attention_type, "feature-extraction"]
    torch.testing.assert_close(run["result"], run["outputs"].last_hidden_state, atol=0, rtol=0)
