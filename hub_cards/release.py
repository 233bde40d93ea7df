"""Stage, validate and publish SymBERT models on the Hugging Face Hub.

    symbert-release runs/small runs/base --namespace my-org                    # dry run: stage, validate, show
    symbert-release runs/small runs/base --namespace my-org --push             # create the repositories and upload
    symbert-release runs/base/pairwise --checkpoints 20000,100000 --namespace my-org   # + branches step-20000, ...
    symbert-release --tiny_random --namespace my-org                           # one tiny random model per type

MODELS are `symbert-pretrain` output folders, or folders holding them (e.g. a `--compare` output, or one folder per
size): every folder below with a `training_summary.json` is a model. Each model needs its GLUE results file
(`glue_results.json`, written by `symbert-glue`), found under the model folder or under the `--results` paths and
matched to the model by the sha256 of its weights. Each model is staged as `OUTPUT_DIR/<repo name>/main` (and
`OUTPUT_DIR/<repo name>/step-N` per checkpoint), then validated: it loads in a fresh Python process that cannot import
this project and reproduces the source model's logits, its card's model-index and its .eval_results/glue.yaml (the
Hub's current format) parse back into the same GLUE results, the GLUE results name its weights, every file the card
names is there, its code files are this project's (by sha256), its config.json holds what was staged (the source's: no
key added, removed or changed) and it holds no pickle. Nothing is pushed unless every model passes.

Nothing is unpickled: the training arguments come from `training_summary.json` ("training_arguments", written by
`symbert-pretrain`), and no training_args.bin, optimizer or RNG state is staged. Every repository id is checked with
huggingface_hub's rules and every staged folder must lie inside --output_dir before anything is written.

With --push, every repository is uploaded in one commit on `main`, tagged `--tag` (the revision the card pins);
each checkpoint becomes a branch `step-N` with one commit of its own; all repositories join the `--collection`.
The token comes from HF_TOKEN or `hf auth login` and is only ever handed to `HfApi`.
"""

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard, constants, get_token
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile  # not exported at the top level by the 0.x releases transformers 4.x needs
from huggingface_hub.utils import validate_repo_id
from huggingface_hub.utils.sha import git_hash, sha_fileobj
from transformers import AutoTokenizer

from .. import ATTENTION_TYPES, SymBertConfig, SymBertForMaskedLM, fresh_load, modeling_symbert
from ..cli import UserError, command_parser, run_command
from ..training.reporting import plot_losses
from . import card as cards
from . import tiny_random

RESULTS_FILE = "glue_results.json"
GLUE_PLOT = "glue_vs_step.png"
MODEL_FILES = ("config.json", "model.safetensors")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
)
TRAINING_FILES = ("trainer_state.json", "training_summary.json", "metrics.csv", "metrics.json")  # JSON and CSV only
REQUIRED_TRAINING_FILES = ("trainer_state.json", "training_summary.json")
# What the card needs from training_summary.json, and from its "training_arguments" (TrainingArguments.to_dict()).
SUMMARY_KEYS = (
    "steps",
    "global_batch_size",
    "max_seq_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "final_eval_loss",
    "training_arguments",
)
TRAINING_ARGUMENT_KEYS = (
    "learning_rate",
    "warmup_steps",
    "lr_scheduler_type",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "bf16",
    "fp16",
    "seed",
    "use_cpu",
)
# Names that torch.save / pickle files go by (training_args.bin, optimizer.pt, rng_state.pth, pytorch_model.bin, ...).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
LIBRARIES = ("symbert", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "datasets")
# Sentences the staged and the source model must give the same logits for ({mask} is the tokenizer's mask token).
CHECK_TEXTS = ["The old man walked slowly along the {mask} of the river.", "She {mask} the letter twice before night."]


@dataclass
class Stage:
    """One revision (`main` or `step-N`) of one repository, staged in `folder`."""

    repo_id: str
    revision: str
    folder: Path
    source: Path  # the model folder whose outputs the staged one must reproduce
    eval_results: list = field(default_factory=list)  # what the card's model-index must parse back into
    eval_entries: list = field(default_factory=list)  # what .eval_results/glue.yaml must parse back into
    config: dict | None = None  # what staging wrote as config.json; None: the source's config.json, as copied

    def intended_config(self):
        """The config.json staging means the folder to hold (staging copies the source's, unchanged)."""
        return self.config if self.config is not None else read_json(self.source / "config.json")


def sha256(path):
    with open(path, "rb") as file:
        return sha_fileobj(file).hex()


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise UserError(f"{path} is not valid JSON ({error}).") from None


def read_summary(model):
    """training_summary.json, refused unless it holds everything the card needs, "training_arguments" included
    (outputs of an older symbert-pretrain kept those only in the training_args.bin pickle, which is never loaded)."""
    path = model / "training_summary.json"
    summary = read_json(path)
    if not isinstance(summary, dict) or not isinstance(summary.get("training_arguments", {}), dict):
        raise UserError(f'{path} is not a training summary: a JSON object whose "training_arguments" is an object.')
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if not missing:
        missing = [
            f"training_arguments.{key}" for key in TRAINING_ARGUMENT_KEYS if key not in summary["training_arguments"]
        ]
    if missing:
        raise UserError(
            f"{path} lacks {', '.join(map(repr, missing))}: it is the output of an older symbert-pretrain (the release "
            "reads the training arguments from this JSON file, never from the training_args.bin pickle); add the run's "
            'TrainingArguments.to_dict() under "training_arguments" or pre-train again.'
        )
    return summary


def eval_losses(log_history):
    """{step: eval loss} of a Trainer's log history."""
    return {entry["step"]: entry["eval_loss"] for entry in log_history if "eval_loss" in entry and "step" in entry}


def logged_eval_losses(folder):
    """{step: eval loss} of the Trainer's log in folder/trainer_state.json; None when there is none."""
    state = Path(folder) / "trainer_state.json"
    return eval_losses(read_json(state)["log_history"]) if state.is_file() else None


@dataclass(frozen=True)
class PretrainingRun:
    """A symbert-pretrain output folder as the release reads it, once: training_summary.json (the run's
    TrainingArguments.to_dict() under "training_arguments", its DataArguments under "data_arguments") and the
    Trainer's log in trainer_state.json. Nothing is unpickled."""

    folder: Path
    summary: dict
    log_history: list

    @classmethod
    def read(cls, folder):
        for name in REQUIRED_TRAINING_FILES:
            if not (folder / name).is_file():
                raise UserError(f"{folder} lacks {name}: is it a symbert-pretrain output folder?")
        return cls(folder, read_summary(folder), read_json(folder / "trainer_state.json")["log_history"])

    @property
    def training_arguments(self):
        return self.summary["training_arguments"]

    @property
    def steps(self):
        return self.summary["steps"]

    @property
    def size(self):
        return self.summary.get("size")

    @property
    def eval_losses(self):
        """{step: eval loss} as the Trainer logged them."""
        return eval_losses(self.log_history)

    @property
    def runtime(self):
        """Seconds of training: symbert-pretrain's record, else the Trainer's own; None if neither has it."""
        runtime = self.summary.get("train_runtime")
        if runtime is None:
            runtime = next((e["train_runtime"] for e in reversed(self.log_history) if "train_runtime" in e), None)
        return runtime

    def data(self, dataset=None):
        """(description, Hub dataset id or None) of the pre-training data: `dataset` (--dataset), else as recorded."""
        if dataset:
            return dataset, dataset if "/" in dataset else None  # Hub ids have a namespace
        if self.summary.get("data_arguments") is None:
            raise UserError(
                f"{self.folder}/training_summary.json does not record the pre-training data (an older output); pass --dataset."
            )
        return cards.dataset_text(self.summary["data_arguments"])

    def training(self, dataset=None, hardware=None):
        """The card's `Training` facts; `dataset` and `hardware` (--dataset, --hardware) override what was recorded."""
        summary, arguments = self.summary, self.training_arguments
        machine = hardware or summary.get("hardware") or ("CPU" if arguments["use_cpu"] else "GPU (model not recorded)")
        return cards.Training(
            dataset=self.data(dataset)[0],
            steps=summary["steps"],
            global_batch_size=summary["global_batch_size"],
            max_seq_length=summary["max_seq_length"],
            per_device_train_batch_size=summary["per_device_train_batch_size"],
            gradient_accumulation_steps=summary["gradient_accumulation_steps"],
            world_size=summary.get("world_size", 1),
            learning_rate=arguments["learning_rate"],
            warmup_steps=warmup_steps(arguments, summary["steps"]),
            lr_scheduler_type=arguments["lr_scheduler_type"],
            weight_decay=arguments["weight_decay"],
            adam_beta1=arguments["adam_beta1"],
            adam_beta2=arguments["adam_beta2"],
            adam_epsilon=arguments["adam_epsilon"],
            precision="bf16" if arguments["bf16"] else "fp16" if arguments["fp16"] else "fp32",
            seed=arguments["seed"],
            machine=machine,
            train_runtime=self.runtime,
            final_eval_loss=summary["final_eval_loss"],
        )


def warmup_steps(training_arguments, steps):
    """Warm-up steps as the Trainer counts them: `warmup_steps` below 1 is a ratio in transformers 5, and 4.x has
    `warmup_ratio`."""
    warmup, total = training_arguments["warmup_steps"] or 0, training_arguments.get("max_steps") or steps
    if warmup >= 1:
        return int(warmup)
    return math.ceil(total * (warmup or training_arguments.get("warmup_ratio") or 0))


def checkpoint_eval_loss(checkpoint, step):
    """The card's eval loss of checkpoint-`step`, from its own trainer_state.json."""
    return cards.checkpoint_eval_loss(logged_eval_losses(checkpoint), step, checkpoint.name)


# ---------------------------------------------------------------------------------------------- inputs


def find_models(paths, staging_dir):
    """Pre-training output folders: each path itself, or every folder below it holding a training_summary.json
    (outside checkpoints and outside the staging folder)."""
    models, staging_dir = [], Path(staging_dir).resolve()
    for path in map(Path, paths):
        if not path.is_dir():
            raise UserError(f"model folder {str(path)!r} does not exist.")
        if (path / "config.json").is_file():
            models.append(path)
            continue
        found = sorted(
            p.parent
            for p in path.rglob("training_summary.json")
            if not p.parent.name.startswith("checkpoint-") and staging_dir not in p.resolve().parents
        )
        if not found:
            raise UserError(
                f"{str(path)!r} is neither a model folder (no config.json) nor holds any symbert-pretrain output "
                "(no training_summary.json below it)."
            )
        models += found
    return models


def read_results_files(paths):
    """{path: results} for every glue_results.json given or below the given folders, checked against the schema."""
    files, given = [], set()
    for path in map(Path, paths):
        if path.is_file():
            given.add(path.resolve())
            files.append(path.resolve())
        elif path.is_dir():
            files += sorted(p.resolve() for p in path.rglob(RESULTS_FILE))
        else:
            raise UserError(f"results path {str(path)!r} does not exist.")
    results = {}
    for path in files:
        try:
            data = read_json(path)
            sha = data["model"]["weights_sha256"]
            data["scores"], data["aggregates"]["tasks"], data["aggregates"]["glue"]  # noqa: B018 (keys read later)
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise UserError(f"{path} is not a GLUE results file ({type(error).__name__}: {error}).") from None
        if data.get("schema_version") != 1:
            raise UserError(f"{path} has schema_version={data.get('schema_version')!r}; this release tool reads 1.")
        if sha is None and path not in given:  # measured on sharded or .bin weights: matches no model.safetensors
            continue
        if not isinstance(sha, str) or len(sha) != 64:
            raise UserError(f"{path}: model.weights_sha256={sha!r} is not a sha256 hex digest.")
        results[path] = data
    return results


def match_results(model, weights_sha256, candidates):
    """The results file measured on these weights (of several, the one with the most runs), else a clear error."""
    matching = [path for path, data in candidates.items() if data["model"]["weights_sha256"] == weights_sha256]
    if matching:  # e.g. a sweep that ended on the final checkpoint next to the full suite: take the fuller one
        runs = {path: sum(len(by_seed) for by_seed in candidates[path]["scores"].values()) for path in matching}
        fullest = [path for path in matching if runs[path] == max(runs.values())]
        if len(fullest) == 1:
            return fullest[0]
        raise UserError(
            f"Several GLUE results files with as many runs are for the weights of {model}: "
            f"{', '.join(map(str, fullest))}; pass the one to release with --results."
        )
    others = "".join(
        f"\n  {path}: weights_sha256 {data['model']['weights_sha256'][:16]}… ({data['model'].get('name_or_path')})"
        for path, data in candidates.items()
    )
    raise UserError(
        f"No GLUE results file for {model} (its model.safetensors has sha256 {weights_sha256[:16]}…). Run "
        f"`symbert-glue --model {model}` and pass its output with --results."
        + (f" Results files found are for other weights:{others}" if others else "")
    )


def check_model_folder(folder):
    """The files a release needs from a model folder; raises naming what is missing."""
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if not (folder / "tokenizer_config.json").is_file() or not any(
        (folder / n).is_file() for n in ("tokenizer.json", "vocab.txt")
    ):
        missing.append("tokenizer (tokenizer_config.json and tokenizer.json or vocab.txt)")
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)}.")
    config = read_json(folder / "config.json")
    if config.get("model_type") != "symbert" or "auto_map" not in config:
        raise UserError(
            f"{folder}/config.json is not a SymBERT config with an auto_map (model_type={config.get('model_type')!r})."
        )
    return SymBertConfig.from_dict(config)


def plan_models(args):
    """[(PretrainingRun, config, repo id, results path, results, checkpoint folders, GLUE plot or None)] for every
    model; every input is checked before any work is done."""
    staging = Staging(args.output_dir, args.name_template)
    models = find_models(args.models, args.output_dir)
    extra_files = [Path(p).resolve() for p in args.results if Path(p).is_file()]
    candidates = read_results_files([*args.results, *models])
    steps = [int(s) for s in args.checkpoints.split(",")] if args.checkpoints else []
    plans, repos, used = [], {}, set()
    for model in models:
        config = check_model_folder(model)
        run = PretrainingRun.read(model)
        results = match_results(model, sha256(model / "model.safetensors"), candidates)
        if candidates[results]["model"].get("attention_type") not in (None, config.attention_type):
            raise UserError(
                f"{results} says attention_type={candidates[results]['model']['attention_type']!r} but {model} is "
                f"{config.attention_type!r}."
            )
        used.add(results)
        run.data(args.dataset)  # recorded, or given
        size = run.summary.get("size", "custom")
        repo_id = release_repo_id(args.namespace, args.name_template, model, size, config.attention_type)
        if repo_id in repos:
            raise UserError(
                f"{model} and {repos[repo_id]} would both be released as {repo_id}; change --name_template."
            )
        repos[repo_id] = model
        staging.folder(repo_id, "main")
        checkpoints = []
        for step in steps:
            staging.folder(repo_id, f"step-{step}")
            checkpoint = model / f"checkpoint-{step}"
            if not checkpoint.is_dir():
                available = sorted(
                    int(p.name.split("-")[1]) for p in model.glob("checkpoint-*") if p.name[11:].isdigit()
                )
                raise UserError(f"{model} has no checkpoint-{step}; its checkpoints: {available or 'none'}.")
            check_model_folder(checkpoint)
            checkpoints.append(checkpoint)
        glue_plot = find_glue_plot(args.glue_vs_step, args.results, results, model)
        plans.append((run, config, repo_id, results, candidates[results], checkpoints, glue_plot))
    for path in extra_files:
        if path not in used:
            data = candidates[path]["model"]
            raise UserError(
                f"{path} is the GLUE result of other weights (weights_sha256 {data['weights_sha256'][:16]}…, model "
                f"{data.get('name_or_path')!r}) than any model being released."
            )
    return plans


def checked_repo_id(repo_id, origin):
    """`repo_id`, refused (naming `origin`, where its parts come from) unless the Hub accepts it as a repository id:
    a value such as ".." or "a/../b" never becomes a repository or a folder name."""
    try:
        validate_repo_id(repo_id)
    except ValueError as error:  # huggingface_hub's HFValidationError
        raise UserError(
            f"{origin} gives the repository id {repo_id!r}, which the Hub does not accept: {error}"
        ) from None
    return repo_id


def release_repo_id(namespace, name_template, model, size, attention_type):
    """`--namespace`/`--name_template` filled in with the model's size (from training_summary.json) and type."""
    name = name_template.format(size=str(size), attention_type=attention_type)  # as parse_arguments checked it
    origin = (
        f"size={size!r} (from {model}/training_summary.json) with --name_template {name_template!r} and "
        f"--namespace {namespace!r}"
    )
    return checked_repo_id(f"{namespace}/{name}", origin)


@dataclass(frozen=True)
class Staging:
    """Where revisions are staged: --output_dir/<repo name>/<revision> (`name_template` names the repositories'
    origin in errors)."""

    output_dir: str
    name_template: str

    def folder(self, repo_id, revision):
        """output_dir/<repo name>/<revision>, where staging replaces whatever is there: refused unless it resolves to
        a folder two levels inside output_dir (no "..", no link out) that is either absent or staged before."""
        root, folder = Path(self.output_dir).resolve(), Path(self.output_dir) / repo_id.split("/")[-1] / revision
        resolved = folder.resolve()
        if not resolved.is_relative_to(root) or len(resolved.relative_to(root).parts) != 2:
            raise UserError(
                f"{repo_id!r} (from --name_template {self.name_template!r}) would be staged in {str(resolved)!r}, which "
                f"is not a folder inside --output_dir {str(root)!r}; nothing was written."
            )
        if resolved.exists() and not (resolved / "provenance.json").is_file():
            raise UserError(
                f"{str(folder)!r} exists and was not staged by symbert-release (no provenance.json), so it is not "
                "replaced: move it or choose another --output_dir; nothing was written."
            )
        return folder

    def write(self, repo_id, revision, copies, texts):
        """Stage a revision: build its folder (checked by `folder`) from copied files ({name: source path}) and
        written ones ({name: str}) next to it, then move it into place: an interrupted staging never leaves a
        half-written folder."""
        folder = self.folder(repo_id, revision)
        folder.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        for name, source in copies.items():
            shutil.copyfile(source, building / name)
        for name, text in texts.items():
            (building / name).parent.mkdir(parents=True, exist_ok=True)
            (building / name).write_text(text, encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(building, folder)
        return folder


# ---------------------------------------------------------------------------------------------- staging


def code_files():
    """The model code shipped with every release: this project's, the code the provenance commit names."""
    modeling = Path(modeling_symbert.__file__)
    return {"modeling_symbert.py": modeling, "configuration_symbert.py": modeling.with_name("configuration_symbert.py")}


def code_hashes(files):
    """{name: sha256} of code files ({name: path})."""
    return {name: sha256(path) for name, path in sorted(files.items())}


def text_hashes(texts):
    """{name: sha256} of files to be written ({name: text}), as `sha256` will read them back."""
    return {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in sorted(texts.items())}


def model_files(folder):
    files = {name: folder / name for name in (*MODEL_FILES, *TOKENIZER_FILES) if (folder / name).is_file()}
    return {**files, **code_files()}


def git_commit():
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


def library_versions():
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(folder_files, dataset, **extra):
    tokenizer_file = folder_files.get("tokenizer.json") or folder_files["vocab.txt"]
    return {
        "git_commit": git_commit(),
        "library_versions": library_versions(),
        "dataset": dataset,
        "tokenizer_sha256": sha256(tokenizer_file),
        "weights_sha256": sha256(folder_files["model.safetensors"]),
        "code_sha256": code_hashes({name: path for name, path in folder_files.items() if name.endswith(".py")}),
        **extra,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def find_glue_plot(glue_vs_step, results_paths, results_path, model):
    """`glue_vs_step` (--glue_vs_step), else the sweep plot next to the results file, in the model folder, or under
    the `results_paths` folders (--results)."""
    if glue_vs_step:
        if not Path(glue_vs_step).is_file():
            raise UserError(f"--glue_vs_step {glue_vs_step!r} does not exist.")
        return Path(glue_vs_step)
    nearby = [results_path.parent / GLUE_PLOT, model / GLUE_PLOT]
    under_results = [
        p for folder in map(Path, results_paths) if folder.is_dir() for p in sorted(folder.rglob(GLUE_PLOT))
    ]
    return next((p for p in [*nearby, *under_results] if p.is_file()), None)


def stage_model(
    run, config, repo_id, results_path, results, checkpoints, glue_plot, *, staging, tag, dataset, hardware, workdir
):
    """Stage `main` and one `step-N` folder per checkpoint; returns their `Stage`s. `dataset` and `hardware`
    (--dataset, --hardware) override what symbert-pretrain recorded; `tag` is the revision the card pins."""
    name, model = repo_id.split("/")[1], run.folder
    training = run.training(dataset, hardware)
    dataset, hub_dataset = run.data(dataset)
    datasets = [hub_dataset] if hub_dataset else None  # the metadata takes Hub ids only
    files = {**model_files(model), **{n: model / n for n in TRAINING_FILES if (model / n).is_file()}}
    files["loss.png"] = model / "loss.png"
    if not files["loss.png"].is_file():  # an output from before the plot existed: draw it from the log
        files["loss.png"] = plot_losses(
            run.log_history, Path(workdir) / f"{name}-loss.png", title=config.attention_type
        )
    files[RESULTS_FILE] = results_path
    if results_path.with_suffix(".md").is_file():
        files["glue_results.md"] = results_path.with_suffix(".md")
    if glue_plot is not None:
        files[GLUE_PLOT] = glue_plot

    eval_results, eval_entries = cards.glue_eval_results(results), cards.glue_eval_entries(results)
    eval_texts = {cards.EVAL_RESULTS_FILE: cards.eval_results_yaml(eval_entries)} if eval_entries else {}
    prov = provenance(
        files,
        dataset,
        glue_results_sha256=sha256(results_path),
        eval_results_sha256=text_hashes(eval_texts),
        training_steps=run.steps,
    )
    data = cards.card_data(name, config.attention_type, eval_results=eval_results, datasets=datasets)
    values = cards.card_values(
        config,
        repo_id,
        tag,
        "release",
        prov,
        size=run.size,
        training=training,
        results=results,
    )
    card = cards.render(
        name,
        data,
        **values,
        loss_plot="loss.png",
        glue_plot=GLUE_PLOT if glue_plot else None,
        eval_results_file=next(iter(eval_texts), None),
    )
    texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n", **eval_texts}
    main = staging.write(repo_id, "main", files, texts)
    stages = [Stage(repo_id, "main", main, model, eval_results, eval_entries, read_json(files["config.json"]))]

    for checkpoint in checkpoints:
        step = int(checkpoint.name.split("-")[1])
        branch = f"step-{step}"
        run_files = {n: files[n] for n in ("loss.png", "metrics.csv") if n in files}  # the whole run's log
        own_files = (
            {"trainer_state.json": checkpoint / "trainer_state.json"}
            if (checkpoint / "trainer_state.json").is_file()
            else {}
        )
        checkpoint_files = {**model_files(checkpoint), **run_files, **own_files}
        prov = provenance(checkpoint_files, dataset, training_steps=step)
        data = cards.card_data(name, config.attention_type, datasets=datasets, extra_tags=["intermediate-checkpoint"])
        at_step = training.at_checkpoint(step, logged_eval_losses(checkpoint), checkpoint.name)
        values = cards.card_values(config, repo_id, branch, "checkpoint", prov, size=run.size, training=at_step)
        card = cards.render(cards.checkpoint_title(name, step), data, **values, loss_plot="loss.png")
        texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n"}
        folder = staging.write(repo_id, branch, checkpoint_files, texts)
        stages.append(Stage(repo_id, branch, folder, checkpoint, config=read_json(checkpoint_files["config.json"])))
    return stages


def stage_tiny_random(args, workdir):
    """One tiny random model per attention type, saved in `workdir` and staged from there."""
    repo_ids = {
        kind: checked_repo_id(f"{args.namespace}/tiny-random-symbert-{kind}", f"--namespace {args.namespace!r}")
        for kind in ATTENTION_TYPES
    }
    staging = Staging(args.output_dir, args.name_template)
    for repo_id in repo_ids.values():
        staging.folder(repo_id, "main")  # every folder checked before the first is written
    tokenizer = tiny_random.tiny_tokenizer()
    stages = []
    for attention_type, repo_id in repo_ids.items():
        source = tiny_random.save_tiny_random(attention_type, Path(workdir) / attention_type, tokenizer)
        config = SymBertConfig.from_pretrained(source)
        name = repo_id.split("/")[1]
        files = model_files(source)
        prov = provenance(files, tiny_random.DATASET, seed=tiny_random.SEED)
        data = cards.card_data(name, attention_type, extra_tags=["tiny-random", "testing"])
        card = cards.render(name, data, **cards.card_values(config, repo_id, args.tag, "tiny_random", prov))
        texts = {"README.md": str(card), "provenance.json": json.dumps(prov, indent=2) + "\n"}
        folder = staging.write(repo_id, "main", files, texts)
        stages.append(Stage(repo_id, "main", folder, source, config=read_json(files["config.json"])))
    return stages


# ---------------------------------------------------------------------------------------------- validation


def load_in_fresh_process(folders):
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


def reference_outputs(source):
    """(input ids, logits) of the source model, loaded with this project's classes."""
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    model = SymBertForMaskedLM.from_pretrained(source).eval()
    inputs = tokenizer([t.format(mask=tokenizer.mask_token) for t in CHECK_TEXTS], padding=True, return_tensors="pt")
    with torch.no_grad():
        return inputs["input_ids"].tolist(), model(**inputs).logits


def check_files(stage):
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


def looks_pickled(path):
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


def check_safety(folder):
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


def config_differences(intended, staged, path=""):
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


def short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_config(stage):
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


def validate(stages):
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


# ---------------------------------------------------------------------------------------------- pushing


def staged_files(folder):
    """The staged files' paths in the repository (.eval_results/glue.yaml included)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def remote_files(api, repo_id, revision):
    """{path: RepoFile} of a revision on the Hub ({} if it does not exist), without .gitattributes."""
    try:
        tree = api.list_repo_tree(repo_id, revision=revision, recursive=True)
        return {f.path: f for f in tree if isinstance(f, RepoFile) and f.path != ".gitattributes"}
    except RevisionNotFoundError:
        return {}


def remote_state(api, stage):
    """The stage's revision on the Hub: empty, the same files (by git or LFS hash) as staged, or different."""
    remote = remote_files(api, stage.repo_id, stage.revision)
    if not remote:
        return "empty"
    local = staged_files(stage.folder)
    if sorted(remote) != local:
        return "different"
    for name in local:
        path, file = stage.folder / name, remote[name]
        if (file.lfs.sha256 != sha256(path)) if file.lfs else (file.blob_id != git_hash(path.read_bytes())):
            return "different"
    return "same"


def hub_errors():
    """What huggingface_hub raises when the Hub cannot be reached or refuses a request: OfflineModeIsEnabled (a
    ConnectionError), HfHubHTTPError, and the transport errors of the HTTP library it has imported: requests'
    (huggingface_hub 0.x), httpx's (1.x) or httpx2's (2.x). Nothing is imported here that it did not import."""
    errors = [ConnectionError, TimeoutError, HfHubHTTPError]
    for library, names in (
        ("requests", ("ConnectionError", "Timeout")),
        ("httpx", ("TransportError",)),
        ("httpx2", ("TransportError",)),
    ):
        if library in sys.modules:
            errors += [getattr(sys.modules[library], name) for name in names]
    return tuple(errors)


def push_or_explain(stages, api, args):
    """`push`, with a Hub that cannot be reached (or refuses a request) reported in one line saying what was pushed."""
    pushed = []
    try:
        push(stages, api, args, pushed)
    except hub_errors() as error:
        problem = (
            "the Hugging Face Hub refused a request"
            if isinstance(error, HfHubHTTPError)
            else "cannot reach the Hugging Face Hub"
        )
        done = f"pushed before it stopped: {'; '.join(pushed)}" if pushed else "nothing was pushed"
        raise UserError(f"{problem} ({constants.ENDPOINT}: {type(error).__name__}: {error}): {done}.") from None


def push(stages, api, args, pushed):
    """Create, upload (one commit per revision), tag, branch and collect, listing what is done in `pushed`; every
    repository is checked first, so a conflict stops the release before anything is written."""
    repos = {}
    for stage in stages:
        repos.setdefault(stage.repo_id, []).append(stage)
    to_push, conflicts = {}, []
    for repo_id, repo_stages in repos.items():
        exists = api.repo_exists(repo_id)
        states = {remote_state(api, stage) for stage in repo_stages} if exists else {"empty"}
        if states == {"same"}:
            print(f"{repo_id}: already holds exactly these files; nothing to upload")
            continue
        if "different" in states and not args.force:
            conflicts.append(repo_id)
        elif exists and args.tag in {t.name for t in api.list_repo_refs(repo_id).tags}:
            raise UserError(
                f"{repo_id} already has the tag {args.tag!r}; pass a new --tag for this release. Nothing was pushed."
            )
        to_push[repo_id] = (repo_stages, exists)
    if conflicts:
        raise UserError(
            f"These repositories exist with different content: {', '.join(conflicts)}. Pass --force to replace their "
            "content (a new commit; the history stays), or choose another --namespace/--name_template. Nothing was pushed."
        )

    for repo_id, (repo_stages, existed) in to_push.items():
        main, branches = repo_stages[0], repo_stages[1:]
        api.create_repo(repo_id, repo_type="model", private=args.private, exist_ok=True)
        pushed.append(f"created {repo_id}")
        stale = set(remote_files(api, repo_id, "main")) - set(staged_files(main.folder)) if existed else set()
        commit = api.create_commit(
            repo_id,
            operations=operations(main.folder, delete=stale),
            revision="main",
            commit_message=f"Release {repo_id.split('/')[1]} ({args.tag})",
        )
        pushed.append(f"{repo_id} main")
        api.create_tag(repo_id, tag=args.tag, revision=commit.oid)
        pushed.append(f"{repo_id} tag {args.tag}")
        print(f"{repo_id}: pushed main ({commit.oid[:10]}), tagged {args.tag}")
        existing_branches = {b.name for b in api.list_repo_refs(repo_id).branches} if existed else set()
        for stage in branches:
            if stage.revision in existing_branches:
                api.delete_branch(repo_id, branch=stage.revision)
            api.create_branch(repo_id, branch=stage.revision, revision=commit.oid)
            stale = set(staged_files(main.folder)) - set(staged_files(stage.folder))
            api.create_commit(
                repo_id,
                operations=operations(stage.folder, delete=stale),
                revision=stage.revision,
                commit_message=f"Checkpoint {stage.revision}",
            )
            pushed.append(f"{repo_id} branch {stage.revision}")
            print(f"{repo_id}: pushed branch {stage.revision}")

    if args.collection:
        collection = api.create_collection(args.collection, namespace=args.namespace, exists_ok=True)
        for repo_id in repos:
            api.add_collection_item(collection.slug, repo_id, "model", exists_ok=True)
            pushed.append(f"{repo_id} in collection {collection.slug}")
        print(f"collection {collection.slug}: {len(repos)} models")


def operations(folder, delete=()):
    adds = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in staged_files(folder)]
    return adds + [CommitOperationDelete(path_in_repo=name) for name in sorted(delete)]


def show(stages, args):
    """What --push would do."""
    for stage in stages:
        files = staged_files(stage.folder)
        size = sum((stage.folder / n).stat().st_size for n in files)
        where = f"tag {args.tag}" if stage.revision == "main" else "a branch from main's commit"
        print(
            f"\n{stage.repo_id} @ {stage.revision} ({where}): {len(files)} files, {size / 1e6:.1f} MB, staged in {stage.folder}"
        )
        for name in files:
            print(f"    {name:<28} {(stage.folder / name).stat().st_size:>12,} bytes")
    if args.collection:
        print(f"\ncollection {args.collection!r} in {args.namespace}: {len({s.repo_id for s in stages})} models")


# ---------------------------------------------------------------------------------------------- command line


def parse_arguments(argv):
    parser = command_parser(__doc__)  # parser.error raises a one-line UserError
    parser.add_argument("models", nargs="*", help="symbert-pretrain output folders, or folders holding them")
    parser.add_argument("--namespace", required=True, help="Hub user or organisation that will own the repositories")
    parser.add_argument(
        "--results", nargs="*", default=[], help="glue_results.json files, or folders searched for them"
    )
    parser.add_argument(
        "--dataset",
        help="pre-training data, a Hub dataset id or a description (default: as recorded by symbert-pretrain)",
    )
    parser.add_argument(
        "--hardware", help='what it was trained on, e.g. "NVIDIA H200" (default: as recorded by symbert-pretrain)'
    )
    parser.add_argument("--checkpoints", help="comma-separated steps whose checkpoint-N folders become branches step-N")
    parser.add_argument(
        "--glue_vs_step", help=f"GLUE-along-pre-training plot (default: {GLUE_PLOT} next to the results file)"
    )
    parser.add_argument("--name_template", default="symbert-{size}-{attention_type}", help="repository name")
    parser.add_argument("--tag", default=f"v{version('symbert')}", help="tag of the release commit; the card pins it")
    parser.add_argument("--collection", help='Hub collection title (default: "SymBERT", or "SymBERT tiny random")')
    parser.add_argument("--output_dir", default="release", help="where the repositories are staged")
    parser.add_argument("--tiny_random", action="store_true", help="stage one tiny random model per attention type")
    parser.add_argument("--private", action="store_true", help="create the repositories private")
    parser.add_argument("--force", action="store_true", help="replace the content of existing repositories that differ")
    parser.add_argument("--push", action="store_true", help="upload; without it, a dry run")
    args = parser.parse_args(argv)
    if args.tiny_random == bool(args.models):
        parser.error("give model folders, or --tiny_random (not both)")
    if args.checkpoints and not all(s.strip().isdigit() for s in args.checkpoints.split(",")):
        parser.error(f"--checkpoints {args.checkpoints!r} must be comma-separated step numbers, e.g. 20000,100000")
    if args.collection is None:
        args.collection = "SymBERT tiny random" if args.tiny_random else "SymBERT"
    try:
        validate_repo_id(f"{args.namespace}/{args.name_template.format(size='small', attention_type='mhe_add')}")
    except (KeyError, IndexError, ValueError) as error:
        parser.error(
            f"--namespace {args.namespace!r} / --name_template {args.name_template!r} do not make a repository "
            f"id ({error}); the template may use {{size}} and {{attention_type}}"
        )
    return args


def release(args):
    """Stage and validate every model, then show (dry run) or push; returns the `Stage`s."""
    token = None
    if args.push:
        if constants.HF_HUB_OFFLINE:
            raise UserError(
                "--push needs the Hugging Face Hub, but offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is "
                "set): unset it to push. Nothing was staged."
            )
        token = get_token()  # HF_TOKEN, else the `hf auth login` token; handed to HfApi, never shown
        if not token:
            raise UserError(
                "--push needs a Hugging Face token: set HF_TOKEN or run `hf auth login`. Nothing was staged."
            )
    if not args.tiny_random and cards.EvalResultEntry is None:
        print(cards.EVAL_RESULTS_NOTICE, file=sys.stderr)
    with tempfile.TemporaryDirectory() as workdir:
        if args.tiny_random:
            stages = stage_tiny_random(args, workdir)
        else:
            staging = Staging(args.output_dir, args.name_template)
            options = dict(staging=staging, tag=args.tag, dataset=args.dataset, hardware=args.hardware, workdir=workdir)
            stages = [stage for plan in plan_models(args) for stage in stage_model(*plan, **options)]
        validate(stages)
        print(
            f"Validated {len(stages)} staged folders in {args.output_dir}: each loads in a fresh process with "
            "trust_remote_code=True and reproduces its source model; cards, GLUE results and provenance check out; "
            "the code files are the project's and no file is a pickle."
        )
        if args.push:
            push_or_explain(stages, HfApi(token=token), args)
        else:
            show(stages, args)
            print("\nDry run: nothing pushed. Run again with --push to upload.")
    return stages


def release_command(argv):
    return release(parse_arguments(argv))


def main(argv=None):
    run_command(release_command, argv)


if __name__ == "__main__":
    main()
