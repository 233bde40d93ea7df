"""Validation of staged folders before any push: each loads in a fresh process and reproduces its source model, its
files are the ones the card names, its code is the project's, its config is the source's, and nothing is a pickle."""

import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from .. import SymBertForMaskedLM, fresh_load
from ..cli import UserError
from . import card as cards
from .plan import CHECK_TEXTS, PICKLE_SUFFIXES, RESULTS_FILE, Stage, read_json, sha256
from .staging import code_files, code_hashes


def load_in_fresh_process(folders: list[Path]) -> tuple[dict[Path, dict], dict[Path, torch.Tensor]]:
    """({folder: report}, {folder: logits}) from loading each folder with trust_remote_code=True in a fresh process
    that cannot import this project (symbert/fresh_load.py): the staged folders must load from their own files, as on
    a machine without this project."""
    with tempfile.TemporaryDirectory() as elsewhere:
        outputs = Path(elsewhere) / "outputs.pt"
        report = fresh_load.load_in_fresh_process(folders, "--texts", json.dumps(CHECK_TEXTS), "--outputs", outputs)
        outputs = torch.load(outputs, weights_only=True)
    if report["symbert_imported"]:
        raise RuntimeError("The fresh-process load check imported the symbert package; it must not.")
    logits = {Path(folder): tensors[0] for folder, tensors in outputs.items()}
    return {Path(folder): loaded for folder, loaded in report["models"].items()}, logits


def reference_outputs(source: Path) -> tuple[list[list[int]], torch.Tensor]:
    """(input ids, logits) of the source model, loaded with this project's classes."""
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    model = SymBertForMaskedLM.from_pretrained(source).eval()
    inputs = tokenizer([t.format(mask=tokenizer.mask_token) for t in CHECK_TEXTS], padding=True, return_tensors="pt")
    with torch.no_grad():
        return inputs["input_ids"].tolist(), model(**inputs).logits


def check_files(stage: Stage) -> list[str]:
    """Problems with the staged folder's card, GLUE results and provenance (everything but loading the model)."""
    folder, problems = stage.folder, []
    try:
        card = ModelCard.load(folder / "README.md")
    except Exception as error:  # a card that does not parse is a failed check, whatever the parser raises
        return [f"README.md does not parse as a model card: {error}"]
    if (card.data.library_name, card.data.pipeline_tag) != ("transformers", "fill-mask"):
        problems.append(
            f"card metadata has library_name={card.data.library_name!r}, pipeline_tag={card.data.pipeline_tag!r}"
        )
    if (card.data.eval_results or []) != stage.eval_results:
        problems.append("the card's model-index does not parse back into the GLUE results it was built from")
    missing = [name for name in cards.files_named(card.text) if not (folder / name).is_file()]
    if missing:
        problems.append(f"the card names files that are not in the folder: {', '.join(missing)}")
    weights = sha256(folder / "model.safetensors")
    if stage.eval_results:
        measured = read_json(folder / RESULTS_FILE)["model"]["weights_sha256"]
        if measured != weights:
            problems.append(
                f"{RESULTS_FILE} was measured on weights {measured[:16]}…, model.safetensors is {weights[:16]}…"
            )
    eval_file = folder / cards.EVAL_RESULTS_FILE
    try:
        entries = cards.read_eval_results(eval_file) if eval_file.is_file() else []
    except Exception as error:  # whatever YAML or the parser raises on a damaged file
        entries = f"{type(error).__name__}: {error}"
    if entries != stage.eval_entries:
        problems.append(f"{cards.EVAL_RESULTS_FILE} does not parse back into the GLUE results it was built from")
    prov = read_json(folder / "provenance.json")
    tokenizer_file = folder / "tokenizer.json" if (folder / "tokenizer.json").is_file() else folder / "vocab.txt"
    code = code_hashes({path.name: path for path in folder.glob("*.py")})
    if (prov["weights_sha256"], prov["tokenizer_sha256"], prov.get("code_sha256")) != (
        weights,
        sha256(tokenizer_file),
        code,
    ):
        problems.append("provenance.json's weights, tokenizer or code sha256 does not match the folder's files")
    evaluations = code_hashes({path.relative_to(folder).as_posix(): path for path in folder.glob(".eval_results/*")})
    if prov.get("eval_results_sha256", {}) != evaluations:
        problems.append("provenance.json's eval_results sha256 does not match the folder's .eval_results files")
    return problems


def looks_pickled(path: Path) -> bool:
    """A pickle by name (the suffixes torch.save and pickle files go by) or by content: a pickle's protocol 2-5
    header, or a torch.save zip archive, which holds a data.pkl."""
    if path.suffix in PICKLE_SUFFIXES:
        return True
    if path.suffix == ".safetensors":  # begins with its header's length, which can look like a pickle header
        return False
    with open(path, "rb") as file:
        head = file.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith(".pkl") for name in archive.namelist())
    return False


def check_safety(folder: Path) -> list[str]:
    """Problems that make a staged folder unsafe to load at all: a pickle anywhere in it, or code files that are not
    byte for byte the project's own (the installed symbert package's)."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    problems = [
        f"{path.relative_to(folder)} is a pickle, which a release never holds" for path in files if looks_pickled(path)
    ]
    project_files = code_files()
    project = code_hashes(project_files)
    staged = code_hashes({path.relative_to(folder).as_posix(): path for path in files if path.suffix == ".py"})
    for name, digest in staged.items():
        if name not in project:
            problems.append(f"{name} is not one of the project's code files ({', '.join(project)})")
        elif digest != project[name]:
            problems.append(
                f"{name} differs from the project's {project_files[name]} (sha256 {digest[:16]}…, the project's "
                f"{project[name][:16]}…)"
            )
    problems += [
        f"{name} is missing: every release ships the project's model code" for name in project if name not in staged
    ]
    return problems


def config_differences(
    intended: dict, staged: dict, path: str = ""
) -> tuple[list[str], list[str], list[tuple[str, Any, Any]]]:
    """(added keys, removed keys, [(changed key, intended value, staged value)]) of `staged` against `intended`
    (config.json's contents); nested keys are dotted (auto_map.AutoModel)."""
    added, removed, changed = [], [], []
    for key in sorted(intended.keys() | staged.keys()):
        name = f"{path}{key}"
        if key not in intended:
            added.append(name)
        elif key not in staged:
            removed.append(name)
        elif isinstance(intended[key], dict) and isinstance(staged[key], dict):
            nested = config_differences(intended[key], staged[key], f"{name}.")
            added, removed, changed = added + nested[0], removed + nested[1], changed + nested[2]
        elif intended[key] != staged[key] or type(intended[key]) is not type(staged[key]):  # 1 == 1.0 == True
            changed.append((name, intended[key], staged[key]))
    return added, removed, changed


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_config(stage: Stage) -> list[str]:
    """Problems with the staged config.json: it must hold what staging wrote (the source's configuration), no key
    added, removed or changed. A changed config.json can point auto_map at other code or change the model, so a
    folder with one is not loaded."""
    path = stage.folder / "config.json"
    if not path.is_file():
        return ["config.json is missing"]
    try:
        staged = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return [f"config.json is not valid JSON ({error})"]
    if not isinstance(staged, dict):
        return [f"config.json holds a JSON {type(staged).__name__}, not a configuration object"]
    added, removed, changed = config_differences(stage.intended_config(), staged)
    details = [
        *([f"added key(s) {', '.join(added)}"] if added else []),
        *(
            [f"changed key(s) {', '.join(f'{key} ({short(old)} -> {short(new)})' for key, old, new in changed)}"]
            if changed
            else []
        ),
        *([f"removed key(s) {', '.join(removed)}"] if removed else []),
    ]
    if not details:
        return []
    return [f"config.json is not the one staged from {stage.source / 'config.json'}: {'; '.join(details)}"]


def validate(stages: list[Stage]) -> None:
    """Raise listing every problem of every staged folder; return quietly if all pass."""
    problems = {stage.folder: check_files(stage) for stage in stages}
    unsafe = {stage.folder: check_config(stage) + check_safety(stage.folder) for stage in stages}
    loadable = [stage.folder for stage in stages if not unsafe[stage.folder]]  # never run code that is not ours
    reports, logits = load_in_fresh_process(loadable) if loadable else ({}, {})
    for stage in stages:
        if unsafe[stage.folder]:
            problems[stage.folder] += [*unsafe[stage.folder], "so it was not loaded, nor its code run"]
            continue
        report = reports[stage.folder.resolve()]
        if "error" in report:
            problems[stage.folder].append(
                f"does not load with trust_remote_code=True in a fresh process: {report['error']}"
            )
            continue
        if not report["module"].startswith("transformers_modules"):
            problems[stage.folder].append(f"loaded its classes from {report['module']}, not from the folder's code")
        if report["reinitialised"] or report["missing_from_file"]:
            problems[stage.folder].append(
                f"weights re-initialised on load: {(report['reinitialised'] + report['missing_from_file'])[:5]}"
            )
        if not report["tied"]:
            problems[stage.folder].append("the MLM decoder is not tied to the word embeddings after loading")
        input_ids, expected = reference_outputs(stage.source)
        got = logits[stage.folder.resolve()]
        if report["input_ids"] != input_ids:
            problems[stage.folder].append("its tokenizer encodes differently from the source model's")
        elif got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
            difference = (
                (got - expected).abs().max().item() if got.shape == expected.shape else f"shape {tuple(got.shape)}"
            )
            problems[stage.folder].append(
                f"does not reproduce the logits of {stage.source} (max difference {difference})"
            )
    failed = {folder: items for folder, items in problems.items() if items}
    if failed:
        lines = [f"{folder}:\n" + "\n".join(f"  - {item}" for item in items) for folder, items in failed.items()]
        raise UserError("Validation failed; nothing was pushed.\n" + "\n".join(lines))
