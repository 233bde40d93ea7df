"""Staging: each planned model written as a Hub repository folder (weights, config, code, tokenizer, card, GLUE
results, provenance), or a tiny random model per attention type; next to each `main`, its plain BERT export as the
`bert` revision (transformers' own BERT classes, no code, a card of its own)."""

import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCardData
from transformers.utils import logging as transformers_logging

from .. import ATTENTION_TYPES, SymBertConfig, SymBertSelfAttention, attention_class, loading_symbert
from ..cli import UserError
from ..tools.bert_export import BOUND, CHECK_BATCH, export_to_bert
from ..training.reporting import plot_losses
from . import card as cards
from . import eval_results as hub_eval
from . import tiny_random
from .options import ReleaseOptions
from .plan import (
    BERT_REVISION,
    GLUE_PLOT,
    LIBRARIES,
    MODEL_FILES,
    RESULTS_FILE,
    TOKENIZER_FILES,
    TRAINING_FILES,
    ModelPlan,
    Stage,
    Staging,
    checked_repo_id,
    logged_eval_losses,
    read_json,
    sha256,
)


def code_files() -> dict[str, Path]:
    """The model code shipped with every release: this project's, the code the provenance commit names."""
    bundle = Path(loading_symbert.__file__)
    return {name: bundle.with_name(name) for name in loading_symbert.BUNDLE_FILES}


def code_hashes(files: dict[str, Path]) -> dict[str, str]:
    """{name: sha256} of code files ({name: path})."""
    return {name: sha256(path) for name, path in sorted(files.items())}


def text_hashes(texts: dict[str, str]) -> dict[str, str]:
    """{name: sha256} of files to be written ({name: text}), as `sha256` will read them back."""
    return {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in sorted(texts.items())}


def model_files(folder: Path) -> dict[str, Path]:
    files = {name: folder / name for name in (*MODEL_FILES, *TOKENIZER_FILES) if (folder / name).is_file()}
    return {**files, **{name: path.resolve() for name, path in code_files().items()}}  # the files, not their links


def manifest(copies: dict[str, Path], texts: dict[str, str]) -> frozenset[str]:
    """The names (relative, with "/") of the files a revision is staged with: what validation allows in its folder."""
    return frozenset(copies) | frozenset(texts)


def git_commit() -> str:
    """The project's commit, with "-dirty" when the shipped model code differs from it; "unknown" outside a checkout."""
    code = [str(path.resolve()) for path in code_files().values()]

    def git(*arguments):
        return subprocess.run(["git", *arguments], cwd=Path(code[0]).parent, capture_output=True, text=True, timeout=10)

    try:
        head, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--", *code)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def library_versions() -> dict[str, str | None]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


# JSON records staged from a run that may hold the paths it was run with: published with each path's last part only
PUBLISHED_RECORDS = (RESULTS_FILE, "training_summary.json", "trainer_state.json", "metrics.json", "conversion.json")


def without_local_paths(value: Any) -> Any:
    """`value` (parsed JSON) with every absolute or home-relative path string replaced by its last part: a published
    record names its data and inputs, never a user's directory layout."""
    if isinstance(value, dict):
        return {key: without_local_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_paths(item) for item in value]
    if isinstance(value, str) and (Path(value).is_absolute() or value.startswith("~")) and "\n" not in value:
        return Path(value).name
    return value


def local_paths(value: Any) -> set[str]:
    """The absolute or home-relative path strings in `value` (parsed JSON)."""
    if isinstance(value, dict):
        return set().union(*map(local_paths, value.values()))
    if isinstance(value, list):
        return set().union(*map(local_paths, value))
    return {value} if isinstance(value, str) and without_local_paths(value) != value else set()


def published_records(copies: dict[str, Path]) -> dict[str, str]:
    """{name: text} of the PUBLISHED_RECORDS among `copies` (which they are taken out of), without local paths, and
    of glue_results.md, with the paths its JSON record holds shown by their last part."""
    texts, paths = {}, set()
    for name in [name for name in copies if name in PUBLISHED_RECORDS]:
        record = read_json(copies.pop(name))
        paths |= local_paths(record)
        texts[name] = json.dumps(without_local_paths(record), indent=2) + "\n"
    if "glue_results.md" in copies:
        text = copies.pop("glue_results.md").read_text(encoding="utf-8")
        for path in sorted(paths, key=len, reverse=True):  # a folder after the files inside it
            text = text.replace(path, Path(path).name)
        texts["glue_results.md"] = text
    return texts


def provenance(folder_files: dict[str, Path], dataset: str, **extra: Any) -> dict:
    tokenizer_file = folder_files.get("tokenizer.json") or folder_files["vocab.txt"]
    return {
        "git_commit": git_commit(),
        "library_versions": library_versions(),
        "dataset": dataset,
        "tokenizer_sha256": sha256(tokenizer_file),
        "weights_sha256": sha256(folder_files["model.safetensors"]),
        "code_sha256": code_hashes({name: path for name, path in folder_files.items() if name.endswith(".py")}),
        **extra,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def has_bert_form(attention_type: str) -> bool:
    """Whether the type's class folds into BERT's query, key and value: it defines `bert_projections` (the base
    class's raises). Every built-in type does; one registered without it is released without a `bert` branch."""
    return attention_class(attention_type).bert_projections is not SymBertSelfAttention.bert_projections


def export_bert(
    source: Path, workdir: str | Path, name: str, config: SymBertConfig
) -> tuple[Path, cards.BertExport] | None:
    """`source`'s plain BERT export, written to workdir/bert-exports/`name` by `export_to_bert` (which measures it
    against the model before it appears and refuses above its bound), and what the cards say about it; None, with a
    notice, for an attention type without a BERT form."""
    if not has_bert_form(config.attention_type):
        print(
            f"notice: {name}: attention_type={config.attention_type!r} has no BERT form (its class defines no "
            "bert_projections), so it is released without a `bert` branch.",
            file=sys.stderr,
        )
        return None
    output = Path(workdir) / "bert-exports" / name
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # four loads and saves of the weights
    try:
        difference = export_to_bert(str(source), output)
    except UserError as error:  # an export off its bound, or a type without a BERT form: no release
        raise UserError(f"{error} The release stops here: nothing was pushed.") from None
    finally:
        if bars:
            transformers_logging.enable_progress_bar()
    return output, cards.BertExport.measure(output, difference)


def stage_bert_export(
    staging: Staging,
    repo_id: str,
    tag: str,
    config: SymBertConfig,
    source: Path,
    export: tuple[Path, cards.BertExport],
    dataset: str,
    data: ModelCardData,
    card_options: dict,
    carried: dict[str, Path] | None = None,
    **provenance_extra: Any,
) -> Stage:
    """Stage `export` (`export_bert`'s folder and facts) as the repository's `bert` revision with a card of its own
    (`card_options`: card_values' kind, size, training, results) and a provenance record naming main's weights."""
    folder, bert = export
    files = {path.name: path for path in sorted(folder.iterdir()) if path.is_file()}
    files.update(carried or {})
    records = published_records(files)
    prov = provenance(
        files,
        dataset,
        exported_from={"revision": "main", "weights_sha256": sha256(source / "model.safetensors")},
        bert_export={"max_relative_difference": bert.difference, "bound": BOUND, "batch": list(CHECK_BATCH)},
        **provenance_extra,
    )
    values = cards.card_values(config, repo_id, BERT_REVISION, provenance=prov, bert=bert, **card_options)
    card = cards.render(repo_id.split("/")[1], data, template=cards.BERT_TEMPLATE, tag=tag, **values)
    texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n", **records}
    staged = staging.write(repo_id, BERT_REVISION, files, texts)
    config = read_json(files["config.json"])
    return Stage(repo_id, BERT_REVISION, staged, source, config=config, files=manifest(files, texts))


def stage_model(
    plan: ModelPlan,
    *,
    staging: Staging,
    tag: str,
    dataset: str | None,
    hardware: str | None,
    workdir: str | Path,
    base_model: str | None = None,
) -> list[Stage]:
    """Stage `main`, its plain BERT export as `bert` and one `step-N` folder per checkpoint; returns their `Stage`s.
    `dataset` and `hardware` (--dataset, --hardware) override what symbert-pretrain recorded; `tag` is the revision
    the card pins."""
    run, config = plan.run, plan.config
    name = plan.repo_id.split("/")[1]
    export = export_bert(run.folder, workdir, name, config)
    training = run.training(dataset, hardware)
    dataset, hub_dataset = run.data(dataset)
    datasets = [hub_dataset] if hub_dataset else None  # the metadata takes Hub ids only
    files = main_files(plan, name, workdir)
    made_from = run.made_from(base_model)
    card_options = dict(
        kind="release",
        size=run.size,
        training=training,
        results=plan.results,
        made_from=made_from,
        baselines=plan.baselines,
    )
    stages = [stage_main(plan, staging, tag, files, dataset, datasets, export, card_options)]
    if export:
        tags = ["bert-export"]
        data = cards.card_data(
            name, config.attention_type, datasets=datasets, extra_tags=tags, custom_code=False, made_from=made_from
        )
        stages.append(
            stage_bert_export(
                staging,
                plan.repo_id,
                tag,
                config,
                run.folder,
                export,
                dataset,
                data,
                card_options,
                carried=run.carried_files,
                training_steps=run.steps,
            )
        )
    for checkpoint in plan.checkpoints:
        stages.append(stage_checkpoint(plan, staging, checkpoint, files, training, dataset, datasets))
    return stages


def main_files(plan: ModelPlan, name: str, workdir: str | Path) -> dict[str, Path]:
    """{name in the repository: file} of `main`: the model, the run's training files and what it carries of the
    model it was made from, its GLUE results and plots."""
    run, model = plan.run, plan.run.folder
    files = {**model_files(model), **{n: model / n for n in TRAINING_FILES if (model / n).is_file()}}
    files["loss.png"] = model / "loss.png"
    if not files["loss.png"].is_file():  # an output from before the plot existed: draw it from the log
        files["loss.png"] = plot_losses(
            run.log_history, Path(workdir) / f"{name}-loss.png", title=plan.config.attention_type
        )
    files.update(run.carried_files)  # conversion.json, sentence-transformers configuration: on main and bert
    if plan.results_path is not None:  # (None: released with --without_results, the card says no score was measured)
        files[RESULTS_FILE] = plan.results_path
        if plan.results_path.with_suffix(".md").is_file():
            files["glue_results.md"] = plan.results_path.with_suffix(".md")
    if plan.glue_plot is not None:
        files[GLUE_PLOT] = plan.glue_plot
    return files


def stage_main(
    plan: ModelPlan,
    staging: Staging,
    tag: str,
    files: dict[str, Path],
    dataset: str,
    datasets: list[str] | None,
    export,
    card_options: dict,
) -> Stage:
    """`main`: the model with its card, provenance and `.eval_results`."""
    repo_id, config, results = plan.repo_id, plan.config, plan.results
    name = repo_id.split("/")[1]
    for notice in cards.glue_notices(repo_id, results) if results else []:
        print(f"notice: {notice}", file=sys.stderr)
    eval_results, eval_entries = (
        (hub_eval.glue_eval_results(results), hub_eval.glue_eval_entries(results)) if results else ([], [])
    )
    eval_texts = {hub_eval.EVAL_RESULTS_FILE: hub_eval.eval_results_yaml(eval_entries)} if eval_entries else {}
    records = published_records(files)
    prov = provenance(
        files,
        dataset,
        glue_results_sha256=text_hashes({RESULTS_FILE: records[RESULTS_FILE]})[RESULTS_FILE] if results else None,
        eval_results_sha256=text_hashes(eval_texts),
        training_steps=plan.run.steps,
    )
    data = cards.card_data(
        name, config.attention_type, eval_results=eval_results, datasets=datasets, made_from=card_options["made_from"]
    )
    values = cards.card_values(config, repo_id, tag, provenance=prov, bert=export and export[1], **card_options)
    card = cards.render(
        name,
        data,
        **values,
        loss_plot="loss.png",
        glue_plot=GLUE_PLOT if plan.glue_plot else None,
        eval_results_file=next(iter(eval_texts), None),
    )
    texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n", **eval_texts, **records}
    main = staging.write(repo_id, "main", files, texts)
    config_json, staged_files = read_json(files["config.json"]), manifest(files, texts)
    return Stage(repo_id, "main", main, plan.run.folder, eval_results, eval_entries, config_json, staged_files)


def stage_checkpoint(
    plan: ModelPlan,
    staging: Staging,
    checkpoint: Path,
    files: dict[str, Path],
    training: cards.Training,
    dataset: str,
    datasets: list[str] | None,
) -> Stage:
    """`step-N`: a checkpoint with its own card, the whole run's log and its own trainer state."""
    repo_id, config = plan.repo_id, plan.config
    name = repo_id.split("/")[1]
    step = int(checkpoint.name.split("-")[1])
    branch = f"step-{step}"
    run_files = {n: files[n] for n in ("loss.png", "metrics.csv") if n in files}  # the whole run's log
    own_files = (
        {"trainer_state.json": checkpoint / "trainer_state.json"}
        if (checkpoint / "trainer_state.json").is_file()
        else {}
    )
    checkpoint_files = {**model_files(checkpoint), **run_files, **own_files}
    records = published_records(checkpoint_files)
    prov = provenance(checkpoint_files, dataset, training_steps=step)
    data = cards.card_data(name, config.attention_type, datasets=datasets, extra_tags=["intermediate-checkpoint"])
    at_step = training.at_checkpoint(step, logged_eval_losses(checkpoint), checkpoint.name)
    values = cards.card_values(config, repo_id, branch, "checkpoint", prov, size=plan.run.size, training=at_step)
    card = cards.render(cards.checkpoint_title(name, step), data, **values, loss_plot="loss.png")
    texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n", **records}
    folder = staging.write(repo_id, branch, checkpoint_files, texts)
    config_json, staged_files = read_json(checkpoint_files["config.json"]), manifest(checkpoint_files, texts)
    return Stage(repo_id, branch, folder, checkpoint, config=config_json, files=staged_files)


def stage_tiny_random(options: ReleaseOptions, workdir: str | Path) -> list[Stage]:
    """One tiny random model per attention type, saved in `workdir` and staged from there, each with its plain BERT
    export as `bert`."""
    repo_ids = {
        kind: checked_repo_id(f"{options.namespace}/tiny-random-symbert-{kind}", f"--namespace {options.namespace!r}")
        for kind in ATTENTION_TYPES
    }
    staging = Staging(options.output_dir, options.name_template)
    for repo_id in repo_ids.values():
        for revision in ("main", BERT_REVISION):
            staging.folder(repo_id, revision)  # every folder checked before the first is written
    tokenizer = tiny_random.tiny_tokenizer()
    stages = []
    for attention_type, repo_id in repo_ids.items():
        source = tiny_random.save_tiny_random(attention_type, Path(workdir) / attention_type, tokenizer)
        config = SymBertConfig.from_pretrained(source)
        name = repo_id.split("/")[1]
        files = model_files(source)
        export = export_bert(source, workdir, name, config)
        prov = provenance(files, tiny_random.DATASET, seed=tiny_random.SEED)
        data = cards.card_data(name, attention_type, extra_tags=["tiny-random", "testing"])
        values = cards.card_values(config, repo_id, options.tag, "tiny_random", prov, bert=export and export[1])
        card = cards.render(name, data, **values)
        texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n"}
        folder = staging.write(repo_id, "main", files, texts)
        config_json, staged_files = read_json(files["config.json"]), manifest(files, texts)
        stages.append(Stage(repo_id, "main", folder, source, config=config_json, files=staged_files))
        if not export:
            continue
        tags = ["tiny-random", "testing", "bert-export"]
        data = cards.card_data(name, attention_type, extra_tags=tags, custom_code=False)
        stages.append(
            stage_bert_export(
                staging,
                repo_id,
                options.tag,
                config,
                source,
                export,
                tiny_random.DATASET,
                data,
                {"kind": "tiny_random"},
                seed=tiny_random.SEED,
            )
        )
    return stages
