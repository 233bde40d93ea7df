"""Every SymBERT model exports to plain BERT with the same outputs (`to_bert`, `symbert-to-bert`): each attention
type's parameters fold into BERT's query, key and value. Checked with every tensor moved far from its initialisation
(the pairwise S, the δ gains and the head embeddings most), with padding, for every registered type and head."""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import symbert
from helpers.tiny import padded_batch, tiny_config
from symbert.cli import UserError
from symbert.modeling_symbert import BERT_CLASSES
from symbert.tools import bert_export
from symbert.tools.bert_export import check_inputs, export_to_bert, output_tensors, relative_difference

HEADS = BERT_CLASSES  # each SymBERT class -> the transformers class of its export
# tensors a type adds to BERT's, moved further than the rest: S ~ N(0, 1) + N(0, 0.5²); gains and head embeddings
# from 1 (or 0) to anywhere in about ±1
TYPE_TENSORS = ("pairwise", "scale_q", "scale_k", "scale_v", "head_embeddings")
SETTINGS = {"no_query": {"no_query_scaling": "standard"}, "pairwise": {"pairwise_init": "identity"}}


def trained(model, seed=0, spread=0.1, type_spread=0.5):
    """`model` with every tensor moved by N(0, spread²), the attention type's own by N(0, type_spread²), in eval
    mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            scale = type_spread if name.rsplit(".", 1)[-1] in TYPE_TENSORS else spread
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return model.eval()


def inputs_for(class_name):
    input_ids, attention_mask = padded_batch(batch=4, length=11)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    if class_name == "SymBertForMultipleChoice":
        inputs = {name: tensor.view(2, 2, -1) for name, tensor in inputs.items()}
    return inputs


@pytest.mark.parametrize("class_name", HEADS)
def test_every_head_of_every_type_exports_with_the_same_outputs(attention_type, class_name):
    torch.manual_seed(0)
    model = trained(getattr(symbert, class_name)(tiny_config(attention_type, num_labels=3)))
    bert = model.to_bert()
    assert type(bert) is getattr(transformers, HEADS[class_name]) and bert.config.model_type == "bert"
    assert not hasattr(bert.config, "auto_map") and not hasattr(bert.config, "attention_type")
    inputs = inputs_for(class_name)
    want, got = output_tensors(model, inputs), output_tensors(bert, inputs)
    assert len([name for name in want if name.startswith("hidden_states.")]) == 3  # embeddings and both layers
    # fp32 itself is the limit: the export is as close to the model as the model is to its own float64 outputs
    exact = output_tensors(copy.deepcopy(model).double(), inputs)
    assert relative_difference(want, got) <= max(1e-5, 2 * relative_difference(exact, want))
    # the weights themselves (the command's measure): both evaluated in float64
    assert relative_difference(exact, output_tensors(bert.double(), inputs)) <= 1e-5
    # parameters: BERT's count whatever the type (a type's saving, or the MHE and shared surplus, is gone)
    reference = getattr(transformers, HEADS[class_name])(bert.config)
    assert bert.num_parameters() == reference.num_parameters()


@pytest.mark.parametrize("attention_type", sorted(SETTINGS))
def test_settings_that_change_the_scores_export_too(attention_type):
    model = trained(symbert.SymBertForMaskedLM(tiny_config(attention_type, **SETTINGS[attention_type])))
    inputs = inputs_for("SymBertForMaskedLM")
    assert relative_difference(output_tensors(model, inputs), output_tensors(model.to_bert(), inputs)) <= 1e-5


def test_the_folding_is_exact_not_approximate(attention_type):
    """In float64, with every tensor moved by N(0, 0.5²), the outputs agree to rounding: the mapping is an identity
    of the formulas, and fp32's 1e-5 is only fp32's rounding."""
    model = trained(symbert.SymBertForMaskedLM(tiny_config(attention_type)).double(), spread=0.5)
    bert = model.to_bert()
    assert bert.dtype == torch.float64
    inputs = inputs_for("SymBertForMaskedLM")
    assert relative_difference(output_tensors(model, inputs), output_tensors(bert, inputs)) <= 1e-12


def test_the_export_keeps_the_models_mode_dtype_and_pooler():
    model = symbert.SymBertModel(tiny_config("pairwise"), add_pooling_layer=False).to(torch.bfloat16).train()
    bert = model.to_bert()
    assert bert.training and bert.dtype == torch.bfloat16 and bert.pooler is None
    assert symbert.SymBertModel(tiny_config("pairwise")).to_bert().pooler is not None


def test_question_answering_exports_with_two_outputs_whatever_num_labels():
    model = trained(symbert.SymBertForQuestionAnswering(tiny_config("shared", num_labels=5)))
    bert = model.to_bert()
    assert bert.qa_outputs.out_features == 2
    inputs = inputs_for("SymBertForQuestionAnswering")
    assert relative_difference(output_tensors(model, inputs), output_tensors(bert, inputs)) <= 1e-5


def test_a_quantised_model_is_refused():
    model = symbert.SymBertModel(tiny_config())
    model.hf_quantizer = object()  # what from_pretrained(quantization_config=...) sets
    with pytest.raises(ValueError, match="quantised SymBertModel"):
        model.to_bert()


# ---------------------------------------------------------------- symbert-to-bert


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A trained-looking pairwise MLM folder with a WordPiece tokenizer."""
    folder = tmp_path_factory.mktemp("pairwise")
    torch.manual_seed(0)
    model = trained(symbert.SymBertForMaskedLM(tiny_config("pairwise")))
    model.save_pretrained(folder)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(94))]
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    vocab_argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"  # renamed in 5.0
    transformers.BertTokenizerFast(**{vocab_argument: str(vocab_file)}).save_pretrained(folder)
    vocab_file.unlink(missing_ok=not (folder / "tokenizer.json").exists())
    return folder


def run_command(*argv, **kwargs):
    env = {**os.environ, "SYMBERT_DEBUG": "0"}
    return subprocess.run(
        [sys.executable, "-m", "symbert.tools.bert_export", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        **kwargs,
    )


FRESH_LOAD = """
import json, sys
sys.meta_path.insert(0, type("Block", (), {"find_spec": staticmethod(
    lambda name, *_: (_ for _ in ()).throw(ModuleNotFoundError(name)) if name.split(".")[0] == "symbert" else None)})())
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer
folder = sys.argv[1]
model = AutoModelForMaskedLM.from_pretrained(folder)  # no trust_remote_code
inputs = torch.load(sys.argv[2])
with torch.no_grad():
    logits = model.double().eval()(**inputs).logits
torch.save(logits, sys.argv[3])
print(json.dumps({"class": type(model).__name__, "module": type(model).__module__,
                  "ids": AutoTokenizer.from_pretrained(folder)("w1 w2 w3")["input_ids"]}))
"""


@pytest.mark.heavy
def test_command_writes_a_folder_plain_transformers_loads(saved, tmp_path):
    output = tmp_path / "bert"
    result = run_command(saved, output)
    assert result.returncode == 0, result.stderr
    difference = float(result.stdout.split("max relative difference ")[1].split()[0])
    assert difference <= 1e-5 and "bound 1e-05" in result.stdout
    names = sorted(p.name for p in output.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names and not any(n.endswith(".py") for n in names)
    config = json.loads((output / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]
    assert "auto_map" not in config and "attention_type" not in config
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))

    inputs = check_inputs(symbert.SymBertConfig.from_pretrained(saved))
    torch.save(inputs, tmp_path / "inputs.pt")
    loaded = subprocess.run(
        [sys.executable, "-c", FRESH_LOAD, output, tmp_path / "inputs.pt", tmp_path / "logits.pt"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert loaded.returncode == 0, loaded.stderr
    report = json.loads(loaded.stdout.splitlines()[-1])
    assert report["class"] == "BertForMaskedLM" and report["module"].startswith("transformers.models.bert.")
    assert report["ids"] == transformers.AutoTokenizer.from_pretrained(saved)("w1 w2 w3")["input_ids"]
    model = symbert.SymBertForMaskedLM.from_pretrained(saved).double()
    with torch.no_grad():
        want = model.eval()(**inputs).logits
    got = torch.load(tmp_path / "logits.pt")
    assert relative_difference({"logits": want}, {"logits": got}) <= 1e-5


def test_a_measured_difference_above_the_bound_writes_nothing(saved, tmp_path, monkeypatch):
    monkeypatch.setattr(bert_export, "BOUND", 0.0)
    monkeypatch.setattr(bert_export, "relative_difference", lambda *_: 3e-7)
    with pytest.raises(UserError, match=r"differs from it by 3.00e-07 \(relative\), above 0e\+00; nothing was written"):
        export_to_bert(str(saved), tmp_path / "bert")
    assert os.listdir(tmp_path) == []


def damaged_copy(saved, tmp_path, damage):
    folder = tmp_path / "damaged"
    folder.mkdir()
    for path in saved.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    damage(folder)
    return folder


def truncate_weights(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def integer_weights(folder):
    tensors = load_file(folder / "model.safetensors")
    save_file({k: v.to(torch.int64) for k, v in tensors.items()}, folder / "model.safetensors", {"format": "pt"})


def quantised_config(folder):
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    (folder / "config.json").write_text(json.dumps(config))


def bert_config_json(folder):
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertForMaskedLM"])
    (folder / "config.json").write_text(json.dumps(config))


BAD_MODELS = {
    "no config": (lambda folder: (folder / "config.json").unlink(), "is not a model folder with a readable config"),
    "a BERT": (bert_config_json, "is a 'bert' model, not a SymBERT one"),
    "truncated weights": (truncate_weights, "truncated or corrupt"),
    "integer weights": (integer_weights, "integer"),
    "quantised": (quantised_config, "is quantised (bitsandbytes)"),
}


@pytest.mark.parametrize("case", BAD_MODELS)
def test_bad_model_is_one_line_and_nothing_is_written(saved, tmp_path, case, monkeypatch, capsys):
    damage, named = BAD_MODELS[case]
    folder = damaged_copy(saved, tmp_path, damage)
    monkeypatch.setattr(sys, "argv", ["symbert-to-bert"])
    monkeypatch.delenv("SYMBERT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        bert_export.main([str(folder), str(tmp_path / "bert")])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert error.startswith("symbert-to-bert: error: ") and named in error.splitlines()[-1], error
    assert sorted(os.listdir(tmp_path)) == ["damaged"]


@pytest.mark.heavy
def test_an_existing_output_is_refused_and_an_empty_folder_taken(saved, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    result = run_command(saved, tmp_path / "full")
    assert result.returncode == 2 and "exists and is not an empty folder" in result.stderr
    assert os.listdir(tmp_path / "full") == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert export_to_bert(str(saved), tmp_path / "empty") <= 1e-5
    assert (tmp_path / "empty" / "model.safetensors").is_file()


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
def test_a_stopped_export_leaves_no_output(saved, tmp_path):
    """Killed while it writes (here: as soon as its staging folder appears), the output never exists; a rerun
    exports normally."""
    process = subprocess.Popen([sys.executable, "-m", "symbert.tools.bert_export", str(saved), str(tmp_path / "bert")])
    deadline = time.monotonic() + 120
    while not any(name.endswith(".to-bert.tmp") for name in os.listdir(tmp_path)) and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "bert").exists()
    assert run_command(saved, tmp_path / "bert").returncode == 0
    assert (tmp_path / "bert" / "config.json").is_file()


def test_a_full_disk_is_one_line_and_leaves_nothing(saved, tmp_path, monkeypatch):
    from safetensors import SafetensorError

    def full_disk(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full_disk)
    with pytest.raises(UserError, match=r"Cannot write the export next to .*No space left on device \(.* GiB free"):
        export_to_bert(str(saved), tmp_path / "bert")
    assert os.listdir(tmp_path) == []


def test_bad_models_and_outputs_are_refused_by_name_and_nothing_is_written(saved, tmp_path):
    nan = shutil.copytree(saved, tmp_path / "nan")
    weights = load_file(nan / "model.safetensors")
    weights["bert.encoder.layer.0.output.dense.bias"][0] = float("nan")
    save_file(weights, nan / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"holds non-finite weights \(bert\.encoder\.layer\.0\.output\.dense\.bias\)"):
        export_to_bert(str(nan), tmp_path / "out")
    damaged = shutil.copytree(saved, tmp_path / "damaged")
    (damaged / "tokenizer.json").write_text("{not json")
    with pytest.raises(UserError, match="holds a tokenizer that cannot be read"):
        export_to_bert(str(damaged), tmp_path / "out")
    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(UserError, match="lies inside .*a-file', which is a file"):
        export_to_bert(str(saved), tmp_path / "a-file" / "out")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(UserError, match="link' is a symbolic link; allowed: a new or empty folder, not a link"):
        export_to_bert(str(saved), tmp_path / "link")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "damaged", "empty", "link", "nan"]
    assert os.listdir(tmp_path / "empty") == []
