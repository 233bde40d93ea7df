"""Validation of staged folders before any push: each loads in a fresh process and reproduces its source model, its
files are the ones the card names, its code is the project's, its config is the source's, and nothing is a pickle. A
`bert` revision (main's plain BERT export) loads without remote code as transformers' own BERT class, holds no code
and no auto_map, its outputs on a fixed batch are the source model's within bert_export's bound, and the difference its
provenance.json and cards (its own and main's) state is the one measured again. A staged file deleted since staging is
named, never read."""

import json
import math
import os
import re
import stat
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers
from huggingface_hub import ModelCard
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from .. import SymBertForMaskedLM
from ..cli import UserError
from ..json_files import is_number, load_json
from ..modeling_symbert import BERT_CLASSES
from ..tools import fresh_load
from ..tools.bert_export import BOUND, CHECK_BATCH, check_inputs, load_symbert, output_tensors, relative_difference
from ..training.glue.results import GlueResults
from . import card as cards
from .plan import CHECK_TEXTS, PICKLE_SUFFIXES, RESULTS_FILE, Stage, read_json, sha256
from .staging import code_files, code_hashes


def load_in_fresh_process(
    stages: list[Stage], batches: dict[Path, dict[str, torch.Tensor]]
) -> tuple[dict[Path, dict], dict[Path, dict[str, torch.Tensor]]]:
    """({folder: report}, {folder: {output name: tensor}}) from loading every stage's folder in one fresh process that
    cannot import this project (symbert/tools/fresh_load.py), as on a machine without it: a SymBERT folder with
    trust_remote_code=True from its own code, run on CHECK_TEXTS; a `bert` export with transformers' own classes
    (trust_remote_code=False), its tokenizer encoding CHECK_TEXTS and its model run on its fixed batch (`batches`, by
    folder). The outputs hold every layer's hidden states."""
    with tempfile.TemporaryDirectory() as elsewhere:
        inputs, auto_classes = [], []
        for i, stage in enumerate(stages):
            if stage.bert_export:
                inputs.append(Path(elsewhere) / f"inputs-{i}.pt")
                torch.save(batches[stage.folder], inputs[-1])
                auto_classes.append(cards.auto_class(read_json(stage.folder / "config.json")["architectures"][0]))
            else:
                inputs.append(fresh_load.NO_INPUTS)
                auto_classes.append("AutoModelForMaskedLM")
        outputs = Path(elsewhere) / "outputs.pt"
        report = fresh_load.load_in_fresh_process(
            [stage.folder for stage in stages],
            "--auto_class",
            *auto_classes,
            "--trust_remote_code",
            *["false" if stage.bert_export else "true" for stage in stages],
            "--texts",
            json.dumps(CHECK_TEXTS),
            "--inputs",
            *inputs,
            "--all_outputs",
            "--outputs",
            outputs,
        )
        outputs = torch.load(outputs, weights_only=True)
    if report["symbert_imported"]:
        raise RuntimeError("The fresh-process load check imported the symbert package; it must not.")
    reports = {Path(folder): loaded for folder, loaded in report["models"].items()}
    return reports, {Path(folder): tensors for folder, tensors in outputs.items()}


def reference_inputs(source: Path) -> dict[str, torch.Tensor]:
    """CHECK_TEXTS encoded by the source model's tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)  # the installed classes
    texts = [t.format(mask=tokenizer.mask_token) for t in CHECK_TEXTS]
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


def reference_input_ids(source: Path) -> list[list[int]]:
    return reference_inputs(source)["input_ids"].tolist()


def reference_outputs(source: Path) -> tuple[list[list[int]], torch.Tensor]:
    """(input ids, logits) of the source model, loaded with this project's classes."""
    inputs = reference_inputs(source)
    model = SymBertForMaskedLM.from_pretrained(source).eval()
    with torch.no_grad():
        return inputs["input_ids"].tolist(), model(**inputs).logits


def check_files(stage: Stage) -> list[str]:
    """Problems with the staged folder's card, GLUE results and provenance (everything but loading the model)."""
    folder, problems = stage.folder, []
    tokenizers = [name for name in ("tokenizer.json", "vocab.txt") if (folder / name).is_file()]
    missing = [name for name in ("README.md", "model.safetensors", "provenance.json") if not (folder / name).is_file()]
    if missing or not tokenizers:  # deleted since staging: named, never read (a traceback)
        return [f"{name} is missing" for name in missing] + (
            [] if tokenizers else ["tokenizer.json and vocab.txt are missing"]
        )
    try:
        card = ModelCard.load(folder / "README.md")
    except Exception as error:  # a card that does not parse is a failed check, whatever the parser raises
        return [f"README.md does not parse as a model card: {error}"]
    # an encoder's tasks: fill-mask, or, made from a teacher without an MLM head, sentence embeddings
    encoder_tags = ("fill-mask", "sentence-similarity", "feature-extraction")
    if card.data.library_name != "transformers" or card.data.pipeline_tag not in encoder_tags:
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
        measured = GlueResults.from_dict(read_json(folder / RESULTS_FILE)).weights_sha256  # checked when staged
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


# What a user's directory layout looks like in a text: a home or temporary folder, on Linux, macOS or Windows
LOCAL_PATH = re.compile(r"(?<![\w.~-])(?:/home/|/Users/|/root/|/tmp/|/private/var/|[A-Za-z]:\\{1,2}Users\\)")
TEXT_SUFFIXES = (".md", ".json", ".yaml", ".yml", ".csv")


def check_local_paths(stage: Stage) -> list[str]:
    """Staged text files (cards, records, results; not the tokenizer's vocabulary) that hold a local path: the
    home folder, the working folder or a path under a home or temporary folder."""
    known = [str(Path(p)) for p in (Path.home(), Path.cwd()) if len(Path(p).parts) > 2]  # not "/", "/work"
    found = []
    for path in sorted(stage.folder.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES or path.name.startswith("tokenizer"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        match = LOCAL_PATH.search(text) or next((re.search(re.escape(k), text) for k in known if k in text), None)
        if match:
            start = text.rfind("\n", 0, match.start()) + 1
            found.append(
                f"{path.relative_to(stage.folder)} holds a local path ({text[start : match.end() + 40].strip()[:80]!r}); "
                "a release publishes no user's directory layout"
            )
    return found


def check_links(folder: Path) -> list[str]:
    """A symbolic link, a named pipe or another special file anywhere in a staged folder, found without following
    links or opening files: such a folder is not read further (a pipe would block its reader) nor loaded."""
    problems = []
    for parent, folders, names in os.walk(folder):  # never into linked folders
        for name in sorted([*folders, *names]):
            path = Path(parent) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                problems.append(
                    f"{path.relative_to(folder).as_posix()} is a symbolic link (to {os.readlink(path)!r}), which a "
                    "release never holds"
                )
            elif not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                problems.append(
                    f"{path.relative_to(folder).as_posix()} is not a regular file (a named pipe, socket or device)"
                )
    return problems


def gone(stage: Stage) -> list[str]:
    """The staged files (the stage's manifest) missing from its folder: deleted since staging."""
    return sorted(name for name in stage.files or () if not os.path.lexists(stage.folder / name))


def check_manifest(stage: Stage) -> list[str]:
    """Files in the staged folder that the release did not stage (not in the stage's manifest, `Stage.files`), and
    staged files that are gone."""
    if stage.files is None:
        return []
    missing = [f"{name} was staged but is missing" for name in gone(stage)]
    staged = (
        path.relative_to(stage.folder).as_posix()
        for path in stage.folder.rglob("*")
        if path.is_file() and not path.is_symlink()
    )
    return missing + [
        f"{name} was not staged by the release (not in its manifest of staged files)"
        for name in sorted(staged)
        if name not in stage.files
    ]


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


def check_safety(folder: Path, code: bool = True) -> list[str]:
    """Problems that make a staged folder unsafe to load at all: a pickle anywhere in it, or code files that are not
    byte for byte the project's own (the installed symbert package's); with `code=False` (a plain BERT export), any
    code file at all."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    problems = [
        f"{path.relative_to(folder)} is a pickle, which a release never holds" for path in files if looks_pickled(path)
    ]
    if not code:
        return problems + [
            f"{path.relative_to(folder)} is code, which the plain BERT export never holds"
            for path in files
            if path.suffix == ".py"
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
        staged = load_json(path)
    except ValueError as error:  # not UTF-8, not JSON, a key given twice (which of two auto_maps loads?)
        return [f"config.json is not valid JSON ({error})"]
    except RecursionError:
        return ["config.json is nested too deeply to be a configuration"]
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


def check_bert_export(stage: Stage) -> list[str]:
    """Problems that keep a `bert` stage from being plain BERT, which transformers loads with its own classes:
    config.json's model_type must be "bert" and its architecture the BERT class of the source's, and neither it nor
    tokenizer_config.json may map classes to code (auto_map)."""
    config = json_object(stage.folder / "config.json")
    if config is None:
        return []  # check_config names it
    problems = []
    source = (read_json(stage.source / "config.json").get("architectures") or ["SymBertModel"])[0]
    if config.get("model_type") != "bert":
        problems.append(f"config.json has model_type={config.get('model_type')!r}, not 'bert'")
    if config.get("architectures") != [BERT_CLASSES.get(source)]:
        problems.append(
            f"config.json names {config.get('architectures')!r}, not the BERT class of the source's {source} "
            f"({BERT_CLASSES.get(source)})"
        )
    for name in ("config.json", "tokenizer_config.json"):
        if "auto_map" in (json_object(stage.folder / name) or {}):
            problems.append(f"{name} has an auto_map: the plain BERT export loads without remote code")
    return problems


def json_object(path: Path) -> dict | None:
    """The JSON object in `path`; None when it is missing or not a JSON object."""
    try:
        value = load_json(path)
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def check_loaded_model(report: dict) -> list[str]:
    """Problems in a fresh process's report on a loaded masked-LM folder: re-initialised weights, an untied decoder."""
    problems = []
    if report["reinitialised"] or report["missing_from_file"]:
        problems.append(
            f"weights re-initialised on load: {(report['reinitialised'] + report['missing_from_file'])[:5]}"
        )
    if not report["tied"]:
        problems.append("the MLM decoder is not tied to the word embeddings after loading")
    return problems


def check_loaded_export(
    stage: Stage, report: dict, outputs: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]
) -> list[str]:
    """Problems of a `bert` stage as the fresh process loaded it without remote code: not transformers' BERT class,
    a tokenizer that encodes otherwise than the source's, outputs further than bert_export's bound from `reference`
    (the source model's on the same fixed batch)."""
    problems = []
    expected = read_json(stage.folder / "config.json")["architectures"][0]
    if (report["class"], report["module"]) != (expected, "transformers.models.bert.modeling_bert"):
        problems.append(f"loaded as {report['module']}.{report['class']}, not transformers' {expected}")
    if not report["tokenizer"]["module"].startswith("transformers."):
        problems.append(f"its tokenizer loaded from {report['tokenizer']['module']}, not from transformers")
    problems += check_loaded_model(report)
    if report["input_ids"] != reference_input_ids(stage.source):
        problems.append("its tokenizer encodes differently from the source model's")
    difference = relative_difference(reference, outputs)
    if not difference <= BOUND:
        problems.append(
            f"its outputs differ from those of {stage.source} by {difference:.2e} (relative) on the fixed batch, "
            f"above {BOUND:.0e}"
        )
    return problems


# How far validation's recomputation of an export's difference may be from the figure staging measured (both in
# float64 on the same fixed batch): 5% (the cards show two digits), or float64's own noise on the tiny differences
# of an exact fold (1e-12, far below the bound the cards quote)
FIGURE_TOLERANCE, FLOAT64_NOISE = 0.05, 1e-12


def export_difference(stage: Stage, source: SymBertForMaskedLM, batch: dict[str, torch.Tensor]) -> float:
    """The export's largest relative difference from its source, measured again as symbert-to-bert measures it: the
    staged folder loaded with transformers' own BERT class (no remote code; the folder holds no code nor pickle),
    both in float64, on the fixed batch. `source` is turned to float64."""
    architecture = read_json(stage.folder / "config.json")["architectures"][0]
    export = getattr(transformers, architecture).from_pretrained(stage.folder)
    return relative_difference(output_tensors(source.double(), batch), output_tensors(export.double(), batch))


def check_export_figures(stage: Stage, measured: float, main_card: Path | None) -> list[str]:
    """Problems of what a `bert` stage's provenance.json and cards (its own, and main's "Use it as plain BERT")
    state of the export: its difference from the source other than `measured` (validation's own measure), another
    bound or batch than bert_export's, another parameter count than its config gives."""
    record = (json_object(stage.folder / "provenance.json") or {}).get("bert_export")
    if not isinstance(record, dict):
        return ["provenance.json has no bert_export record of the export's measured difference"]
    stated, problems = record.get("max_relative_difference"), []
    if record.get("bound") != BOUND or record.get("batch") != list(CHECK_BATCH):
        problems.append(
            f"provenance.json's bert_export has bound={record.get('bound')!r}, batch={record.get('batch')!r}; the "
            f"export is measured with bound {BOUND!r} on batch {list(CHECK_BATCH)!r}"
        )
    if not (is_number(stated) and math.isfinite(stated) and stated >= 0):
        return [*problems, f"provenance.json's bert_export.max_relative_difference={stated!r} is not a number >= 0"]
    if not math.isclose(stated, measured, rel_tol=FIGURE_TOLERANCE, abs_tol=FLOAT64_NOISE):
        problems.append(
            f"provenance.json's bert_export.max_relative_difference={stated!r} is not what the export measures "
            f"({measured:.2e}, float64 on the fixed batch, as symbert-to-bert measures it)"
        )
    figures = cards.BertExport.measure(stage.folder, stated)
    for card in [stage.folder / "README.md", *([main_card] if main_card else [])]:
        text = card.read_text(encoding="utf-8", errors="replace") if card.is_file() else ""
        if figures.measured not in text or f"{figures.parameters:,} parameters" not in text:
            problems.append(
                f"{card.relative_to(card.parent.parent)} does not state the export as measured ({figures.measured}; "
                f"{figures.parameters:,} parameters)"
            )
    return problems


def check_loaded_symbert(stage: Stage, report: dict, logits: torch.Tensor) -> list[str]:
    """Problems of a SymBERT stage as the fresh process loaded it with trust_remote_code=True: classes not from the
    folder's code, a tokenizer that encodes otherwise than the source's, other logits than the source model's."""
    problems = []
    if not report["module"].startswith("transformers_modules"):
        problems.append(f"loaded its classes from {report['module']}, not from the folder's code")
    problems += check_loaded_model(report)
    input_ids, expected = reference_outputs(stage.source)
    if report["input_ids"] != input_ids:
        problems.append("its tokenizer encodes differently from the source model's")
    elif logits.shape != expected.shape or not torch.allclose(logits, expected, rtol=1e-5, atol=1e-5):
        difference = (
            (logits - expected).abs().max().item() if logits.shape == expected.shape else f"shape {tuple(logits.shape)}"
        )
        problems.append(f"does not reproduce the logits of {stage.source} (max difference {difference})")
    return problems


def check_sentence_transformers(stage: Stage) -> list[str]:
    """A stage that carries a sentence-transformers configuration (modules.json) must load there and give the source
    model's sentence embeddings (the `bert` export without remote code). Skipped, with a notice, where
    sentence-transformers is not installed."""
    if not (stage.folder / "modules.json").is_file():
        return []
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print(
            f"notice: {stage.folder} carries a sentence-transformers configuration; sentence-transformers is not "
            "installed, so its loading there was not checked.",
            file=sys.stderr,
        )
        return []
    texts = [text.format(mask="river") for text in CHECK_TEXTS]
    try:
        staged = SentenceTransformer(str(stage.folder), device="cpu", trust_remote_code=not stage.bert_export)
        source = SentenceTransformer(str(stage.source), device="cpu", trust_remote_code=False)  # installed classes
        got, expected = (torch.as_tensor(model.encode(texts)) for model in (staged, source))
    except Exception as error:  # noqa: BLE001 (whatever sentence-transformers raises is the finding)
        return [f"does not load in sentence-transformers: {type(error).__name__}: {' '.join(str(error).split())}"]
    if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
        return [f"its sentence-transformers embeddings differ from {stage.source}'s"]
    return []


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' loading progress bars off (each load draws one on stderr, around the release's own lines)."""
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            transformers_logging.enable_progress_bar()


def validate(stages: list[Stage]) -> None:
    """Raise listing every problem of every staged folder; return quietly if all pass."""
    with no_progress_bars():
        check_stages(stages)


def check_stages(stages: list[Stage]) -> None:
    links = {stage.folder: check_links(stage.folder) for stage in stages}  # a folder with one is read no further
    problems = {stage.folder: [] if links[stage.folder] or gone(stage) else check_files(stage) for stage in stages}
    unsafe = {
        stage.folder: links[stage.folder] + check_manifest(stage)
        if links[stage.folder]
        else check_manifest(stage)
        + check_local_paths(stage)
        + check_config(stage)
        + check_safety(stage.folder, code=not stage.bert_export)
        + (check_bert_export(stage) if stage.bert_export else [])
        for stage in stages
    }
    loadable = [stage for stage in stages if not unsafe[stage.folder]]  # never run code that is not ours
    sources = {stage.folder: load_symbert(stage.source) for stage in loadable if stage.bert_export}
    batches = {folder: check_inputs(model.config) for folder, model in sources.items()}
    reports, outputs = load_in_fresh_process(loadable, batches) if loadable else ({}, {})
    for stage in stages:
        if unsafe[stage.folder]:
            problems[stage.folder] += [*unsafe[stage.folder], "so it was not loaded, nor its code run"]
            continue
        report, got = reports[stage.folder.resolve()], outputs.get(stage.folder.resolve())
        if "error" in report:
            how = "without remote code (plain transformers)" if stage.bert_export else "with trust_remote_code=True"
            problems[stage.folder].append(f"does not load {how} in a fresh process: {report['error']}")
        elif stage.bert_export:
            reference = output_tensors(sources[stage.folder], batches[stage.folder])
            problems[stage.folder] += check_loaded_export(stage, report, got, reference)
            measured = export_difference(stage, sources[stage.folder], batches[stage.folder])
            main = next(
                (s.folder for s in stages if s.revision == "main" and s.folder.parent == stage.folder.parent), None
            )
            problems[stage.folder] += check_export_figures(stage, measured, main and main / "README.md")
        else:
            problems[stage.folder] += check_loaded_symbert(stage, report, got["logits"])
        if "error" not in report:
            problems[stage.folder] += check_sentence_transformers(stage)
    failed = {folder: items for folder, items in problems.items() if items}
    if failed:
        lines = [f"{folder}:\n" + "\n".join(f"  - {item}" for item in items) for folder, items in failed.items()]
        raise UserError("Validation failed; nothing was pushed.\n" + "\n".join(lines))
