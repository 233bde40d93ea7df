"""Saved folders load as Hugging Face models: natively (project installed) and with trust_remote_code=True in a fresh
process that cannot import this project, for every head and variant."""

import json
import os
import subprocess
import sys

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import AutoModel, AutoModelForMaskedLM, PreTrainedTokenizerFast, Trainer, TrainingArguments, pipeline

import symbert
from helpers.models import HEADS
from helpers.tiny import VOCAB_SIZE, padded_batch, tiny_config
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert.loading_symbert import BUNDLE_FILES
from symbert.tools import fresh_load
from symbert.tools.fresh_load import load_in_fresh_process


def model_inputs(auto_name):
    input_ids, attention_mask = padded_batch(seed=5, batch=4, length=9)
    if auto_name == "AutoModelForMultipleChoice":  # [batch, choices, seq]
        return {"input_ids": input_ids.view(2, 2, 9), "attention_mask": attention_mask.view(2, 2, 9)}
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("saved").resolve()  # the report names folders by their resolved paths
    cases, expected = [], {}
    for attention_type in ATTENTION_TYPES:
        for auto_name, model_class in HEADS.items():
            torch.manual_seed(len(cases))
            model = model_class(tiny_config(attention_type, num_labels=3)).eval()
            folder = root / attention_type / auto_name
            model.save_pretrained(folder)
            inputs = model_inputs(auto_name)
            torch.save(inputs, folder / "inputs.pt")
            with torch.no_grad():
                expected[str(folder)] = model(**inputs).to_tuple()
            cases.append(
                {
                    "folder": str(folder),
                    "auto_class": auto_name,
                    "inputs": str(folder / "inputs.pt"),
                    "outputs": str(folder / "outputs.pt"),
                }
            )
    # symbert/tools/fresh_load.py, as pre-training and the release run it: a fresh process that cannot import symbert
    report = load_in_fresh_process(
        [case["folder"] for case in cases],
        "--auto_class",
        *[case["auto_class"] for case in cases],
        "--inputs",
        "inputs.pt",
        "--outputs",
        root / "outputs.pt",
        timeout=600,
    )
    outputs = torch.load(root / "outputs.pt", weights_only=True)
    for case in cases:
        torch.save(outputs[case["folder"]], case["outputs"])
    report = {folder: loaded for folder, loaded in report["models"].items()} | {
        "symbert_imported": report["symbert_imported"]
    }
    return cases, expected, report


@pytest.mark.heavy
def test_fresh_process_never_imported_the_project(saved_models):
    _, _, report = saved_models
    assert report["symbert_imported"] is False


@pytest.mark.parametrize("attention_type", ATTENTION_TYPES)
@pytest.mark.parametrize("auto_name", HEADS)
@pytest.mark.heavy
def test_trust_remote_code_round_trip(saved_models, attention_type, auto_name):
    cases, expected, report = saved_models
    case = next(c for c in cases if c["folder"].endswith(f"{attention_type}/{auto_name}"))
    folder = case["folder"]
    files = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", *BUNDLE_FILES} <= files
    config = json.loads(open(f"{folder}/config.json").read())
    assert config["model_type"] == "symbert" and config["attention_type"] == attention_type
    assert set(HEADS) | {"AutoConfig"} <= set(config["auto_map"])

    loaded = report[folder]
    assert loaded["class"] == HEADS[auto_name].__name__
    assert loaded["module"].startswith("transformers_modules")
    assert loaded["reinitialised"] == [] and loaded["missing_from_file"] == []
    if auto_name == "AutoModelForMaskedLM":
        assert loaded["tied"] is True
    for got, want in zip(torch.load(case["outputs"], weights_only=True), expected[folder], strict=True):
        assert torch.equal(got, want)


@pytest.mark.heavy
def test_fresh_load_script_reports_code_that_needs_the_project(tmp_path):
    folder = tmp_path / "needs-symbert"
    symbert.SymBertForMaskedLM(tiny_config("original")).save_pretrained(folder)
    modeling = folder / "modeling_symbert.py"
    modeling.write_text("import symbert.cli\n" + modeling.read_text())  # code that only runs with the project installed
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, fresh_load.__file__, str(folder), "--auto_class", "AutoModelForMaskedLM"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["symbert_imported"] is False and list(report["models"]) == [str(folder)]
    # transformers' own import check names the package, or the import itself fails where that check does not run
    error = report["models"][str(folder)]["error"]
    assert error.startswith(
        ("ImportError: This modeling file requires", "ModuleNotFoundError: No module named 'symbert'")
    )
    assert "symbert" in error
    with pytest.raises(SystemExit):  # one Auto class for every folder or one per folder
        fresh_load.parse_arguments(["a", "b", "c", "--auto_class", "AutoModel", "AutoModelForMaskedLM"])


@pytest.mark.heavy
def test_a_folder_without_its_code_is_named_not_sent_to_the_hub(tmp_path):
    """A folder copied without its .py files, loaded with trust_remote_code=True where the project loads folders
    (fresh_load.py: the fill-mask example, the release's validation), gave transformers' line about a file missing
    at https://huggingface.co/<the folder's path>: one line names the files it lacks."""
    folder = tmp_path / "no-code"
    symbert.SymBertForMaskedLM(tiny_config("original")).save_pretrained(folder)
    for code in folder.glob("*.py"):
        code.unlink()
    report = load_in_fresh_process([folder], "--auto_class", "AutoModel")
    error = report["models"][str(folder.resolve())]["error"]
    assert error == (
        f"FileNotFoundError: {folder.resolve()} lacks configuration_symbert.py, modeling_symbert.py, the model code "
        "its config.json's auto_map names for trust_remote_code=True: copy the folder with its .py files, or save "
        "the model again with save_pretrained after `import symbert` (which writes them)."
    )


@pytest.mark.heavy
def test_native_auto_classes_without_remote_code(saved_models):
    cases, expected, _ = saved_models
    folder = next(c["folder"] for c in cases if c["folder"].endswith("pairwise/AutoModelForMaskedLM"))
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    assert type(model) is symbert.SymBertForMaskedLM
    with torch.no_grad():
        assert torch.equal(model(**model_inputs("AutoModelForMaskedLM")).logits, expected[folder][0])
    encoder = AutoModel.from_pretrained(folder)  # an MLM checkpoint loads as the bare encoder
    assert type(encoder) is symbert.SymBertModel
    assert torch.equal(encoder.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)


def test_trainer_checkpoints_are_hub_folders(tmp_path):
    model = symbert.SymBertForMaskedLM(tiny_config("shared"))
    generator = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(1, VOCAB_SIZE, (8, 12), generator=generator)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        save_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=rows).train()
    checkpoint = tmp_path / "checkpoint-2"
    assert {"config.json", "model.safetensors", *BUNDLE_FILES} <= set(os.listdir(checkpoint))
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_symbert.SymBertForMaskedLM"
    reloaded = AutoModelForMaskedLM.from_pretrained(checkpoint, trust_remote_code=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def word_piece_tokenizer(words):
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def test_fill_mask_pipeline_from_a_saved_folder(tmp_path):
    words = "the cat sat on a mat dog ran in park".split()
    tokenizer = word_piece_tokenizer(words)
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config("pairwise", vocab_size=len(tokenizer)))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    fill_mask = pipeline("fill-mask", model=str(tmp_path), tokenizer=str(tmp_path), trust_remote_code=True, top_k=3)
    predictions = fill_mask("the cat sat on the [MASK] .")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    encoded = tokenizer("the cat sat on the [MASK] .", return_tensors="pt")
    with torch.no_grad():
        logits = reloaded(**encoded).logits[0, encoded.input_ids[0].tolist().index(tokenizer.mask_token_id)]
    top3 = logits.softmax(-1).topk(3)
    assert [p["token"] for p in predictions] == top3.indices.tolist()
    assert [p["score"] for p in predictions] == pytest.approx(top3.values.tolist(), abs=1e-6)
    from_objects = pipeline("fill-mask", model=reloaded, tokenizer=tokenizer, top_k=3)
    assert from_objects("the cat sat on the [MASK] .") == predictions
