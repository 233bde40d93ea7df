"""What a release publishes: the models found under the given folders, each with its training summary, GLUE
results (matched by the sha256 of its weights), checkpoints and repository id, checked before anything is staged."""

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub.utils import validate_repo_id

from .. import SymBertConfig
from ..cli import UserError
from ..files import file_sha256 as sha256
from ..files import sentence_transformers_files, write_atomically
from ..json_files import NAME, is_number, load_json, plain_text, read_json, regular_file
from ..tools import written_folder
from ..tools.conversion_record import ConversionRecord
from ..training.compat import warmup_steps_counted
from ..training.glue.results import GlueResults, in_range, protocol_differences
from ..training.made_from import MadeFromRecord
from ..training.reporting import read_log_history
from ..training.summary import TrainingSummary
from . import card as cards
from .options import ReleaseOptions

RESULTS_FILE = GlueResults.FILE_NAME
GLUE_PLOT = "glue_vs_step.png"
MODEL_FILES = ("config.json", "model.safetensors")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
)
TRAINING_FILES = ("trainer_state.json", TrainingSummary.FILE_NAME, "metrics.csv", "metrics.json")  # JSON and CSV only
REQUIRED_TRAINING_FILES = ("trainer_state.json", TrainingSummary.FILE_NAME)
LOSS_PLOT = "loss.png"
# What staging copies from a model folder and from a checkpoint folder (besides the project's code).
STAGED_FROM_MODEL = [*MODEL_FILES, *TOKENIZER_FILES, *TRAINING_FILES, LOSS_PLOT, RESULTS_FILE, GLUE_PLOT]
STAGED_FROM_CHECKPOINT = [*MODEL_FILES, *TOKENIZER_FILES, "trainer_state.json"]
# Names that torch.save / pickle files go by (training_args.bin, optimizer.pt, rng_state.pth, pytorch_model.bin, ...).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
LIBRARIES = ("symbert", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "datasets")
# Sentences the staged and the source model must give the same logits for ({mask} is the tokenizer's mask token).
CHECK_TEXTS = ["The old man walked slowly along the {mask} of the river.", "She {mask} the letter twice before night."]
# The branch holding each model's plain BERT export (symbert-to-bert), which loads without remote code.
BERT_REVISION = "bert"


@dataclass
class Stage:
    """One revision (`main`, `step-N` or `bert`, the plain BERT export of main) of one repository, staged in
    `folder`."""

    repo_id: str
    revision: str
    folder: Path
    source: Path  # the model folder whose outputs the staged one must reproduce
    eval_results: list = field(default_factory=list)  # what the card's model-index must parse back into
    eval_entries: list = field(default_factory=list)  # what .eval_results/glue.yaml must parse back into
    config: dict | None = None  # what staging wrote as config.json; None: the source's config.json, as copied
    files: frozenset[str] | None = None  # the manifest: every file staging wrote (relative names); None: not known

    @property
    def bert_export(self) -> bool:
        """Whether the folder is main's plain BERT export: transformers' own classes, no code."""
        return self.revision == BERT_REVISION

    def intended_config(self) -> dict:
        """The config.json staging means the folder to hold (staging copies the source's, unchanged)."""
        return self.config if self.config is not None else read_json(self.source / "config.json")


def eval_losses(log_history: list[dict]) -> dict[int, float]:
    """{step: eval loss} of a Trainer's log history."""
    return {entry["step"]: entry["eval_loss"] for entry in log_history if "eval_loss" in entry and "step" in entry}


def logged_eval_losses(folder: str | Path) -> dict[int, float] | None:
    """{step: eval loss} of the Trainer's log in folder/trainer_state.json; None when there is none."""
    state = Path(folder) / "trainer_state.json"
    return eval_losses(read_log_history(state)) if state.is_file() else None


@dataclass(frozen=True)
class PretrainingRun:
    """A symbert-pretrain output folder as the release reads it, once: training_summary.json (the run's
    TrainingArguments.to_dict() under "training_arguments", its DataArguments under "data_arguments") and the
    Trainer's log in trainer_state.json. Nothing is unpickled."""

    folder: Path
    summary: TrainingSummary
    log_history: list

    @classmethod
    def read(cls, folder: Path) -> "PretrainingRun":
        for name in REQUIRED_TRAINING_FILES:
            if not os.path.lexists(folder / name):
                raise UserError(f"{folder} lacks {name}: is it a symbert-pretrain output folder?")
        summary = TrainingSummary.read(folder)
        check_training_arguments(folder / TrainingSummary.FILE_NAME, summary.training_arguments)
        return cls(folder, summary, read_log_history(folder / "trainer_state.json"))

    @property
    def training_arguments(self) -> dict:
        return self.summary.training_arguments

    @property
    def steps(self) -> int:
        return self.summary.steps

    @property
    def size(self) -> str | None:
        return self.summary.size

    @property
    def carried_files(self) -> dict[str, Path]:
        """{name: file} of what the model keeps of the model it was made from (symbert-pretrain --init_from): its
        conversion record and its sentence-transformers configuration."""
        files = sentence_transformers_files(self.folder)
        if (self.folder / ConversionRecord.FILE_NAME).is_file():
            files[ConversionRecord.FILE_NAME] = self.folder / ConversionRecord.FILE_NAME
        return files

    def made_from(self, base_model: str | None = None) -> cards.MadeFrom | None:
        """How it was made from a pretrained BERT, for the card (None for a model pre-trained from scratch), its
        record checked against what the folder proves (`check_made_from`)."""
        if not self.summary.made_from:
            return None
        record = MadeFromRecord.from_json(self.folder / TrainingSummary.FILE_NAME, self.summary.made_from)
        check_made_from(self.folder, self.summary, record, base_model)
        has_modules = "modules.json" in self.carried_files
        return cards.MadeFrom.read(record, base_model, has_modules)

    @property
    def eval_losses(self) -> dict[int, float]:
        """{step: eval loss} as the Trainer logged them."""
        return eval_losses(self.log_history)

    @property
    def runtime(self) -> float | None:
        """Seconds of training: symbert-pretrain's record, else the Trainer's own; None if neither has it."""
        runtime = self.summary.train_runtime
        if runtime is None:
            runtime = next((e["train_runtime"] for e in reversed(self.log_history) if "train_runtime" in e), None)
        return runtime

    def data(self, dataset: str | None = None) -> tuple[str, str | None]:
        """(description, Hub dataset id or None) of the pre-training data: `dataset` (--dataset), else as recorded."""
        if dataset:
            return dataset, dataset if "/" in dataset and cards.is_repo_id(
                dataset
            ) else None  # Hub ids have a namespace
        if self.summary.data_arguments is None:
            raise UserError(
                f"{self.folder}/{TrainingSummary.FILE_NAME} does not record the pre-training data (an older output); "
                "pass --dataset."
            )
        return cards.dataset_text(self.summary.data_arguments)

    def training(self, dataset: str | None = None, hardware: str | None = None) -> cards.Training:
        """The card's `Training` facts; `dataset` and `hardware` (--dataset, --hardware) override what was recorded."""
        summary, arguments = self.summary, self.training_arguments
        machine = hardware or summary.hardware or ("CPU" if arguments["use_cpu"] else "GPU (model not recorded)")
        return cards.Training(
            dataset=self.data(dataset)[0],
            steps=summary.steps,
            global_batch_size=summary.global_batch_size,
            max_seq_length=summary.max_seq_length,
            per_device_train_batch_size=summary.per_device_train_batch_size,
            gradient_accumulation_steps=summary.gradient_accumulation_steps,
            world_size=summary.world_size,
            learning_rate=arguments["learning_rate"],
            warmup_steps=warmup_steps_counted(arguments, summary.steps),
            lr_scheduler_type=arguments["lr_scheduler_type"],
            weight_decay=arguments["weight_decay"],
            adam_beta1=arguments["adam_beta1"],
            adam_beta2=arguments["adam_beta2"],
            adam_epsilon=arguments["adam_epsilon"],
            precision="bf16" if arguments["bf16"] else "fp16" if arguments["fp16"] else "fp32",
            seed=arguments["seed"],
            machine=machine,
            train_runtime=self.runtime,
            final_eval_loss=summary.final_eval_loss,
        )


# The training arguments the card's training table shows, where TrainingSummary's checks (training/summary.py) allow
# more than a run can have trained with: (low, high, low excluded, integer), as `in_range` reads them
TRAINING_ARGUMENT_RANGES = {
    "learning_rate": (0.0, math.inf, True, False),  # 0 never trains; AdamW refuses a negative rate
    "adam_epsilon": (0.0, math.inf, True, False),
}


def check_made_from(folder: Path, summary: TrainingSummary, record: MadeFromRecord, base_model: str | None) -> None:
    """Refuse a "made_from" record (training_summary.json, read and checked as `MadeFromRecord`) whose facts the
    folder does not bear out, in one line naming the field: its teacher and --init_from other than the run's own
    arguments (model_arguments), its conversion other than the folder's conversion.json, and a --base_model other
    than the Hub id the record names."""
    path = folder / TrainingSummary.FILE_NAME
    teacher_name = record.teacher and record.teacher.name
    arguments = summary.model_arguments or {}
    for key, named in (("teacher", teacher_name), ("init_from", record.init_from)):
        given = arguments.get(key)
        if named is not None and (not isinstance(given, str) or named not in (given, Path(given).name)):
            raise UserError(
                f"{path}: made_from names {key} {named!r}, but the run's model_arguments.{key} is {given!r}: the "
                "record of what a model was made from must be its run's own."
            )
    conversion = record.conversion
    if conversion is not None:
        own = folder / ConversionRecord.FILE_NAME
        if not own.is_file() or ConversionRecord.read(folder) != conversion:
            raise UserError(
                f"{path}: made_from.conversion is not {own} ({'absent' if not own.is_file() else 'another record'}): "
                "a conversion is shown as the folder's own record of it."
            )
    named = {name for name in (teacher_name, conversion and conversion.bert) if cards.is_hub_id(name)}
    if base_model is not None and named and base_model not in named:
        raise UserError(
            f"--base_model {base_model!r} is not the model {folder} was made from ({', '.join(sorted(named))}, as "
            "its training summary and conversion.json name it)."
        )


def check_training_arguments(path: Path, arguments: dict) -> None:
    """Refuse training arguments the card would show though no run trained with them: a learning rate or epsilon
    <= 0, an Adam beta of 1 or more (AdamW refuses them), a scheduler that is not a name."""
    for key, bounds in TRAINING_ARGUMENT_RANGES.items():
        in_range(path, f"training_arguments.{key}", arguments[key], *bounds)
    for key in ("adam_beta1", "adam_beta2"):
        if not (is_number(arguments[key]) and 0.0 <= arguments[key] < 1.0):
            raise UserError(f"{path}: training_arguments.{key}={arguments[key]!r} is not a number >= 0 and < 1.")
    plain_text(
        path,
        "training_arguments.lr_scheduler_type",
        arguments["lr_scheduler_type"],
        NAME,
        "a name of letters, digits, _ . -",
    )


def checkpoint_eval_loss(checkpoint: Path, step: int) -> str:
    """The card's eval loss of checkpoint-`step`, from its own trainer_state.json."""
    return cards.checkpoint_eval_loss(logged_eval_losses(checkpoint), step, checkpoint.name)


def find_models(paths: list[str | Path], staging_dir: str | Path) -> list[Path]:
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
            for p in path.rglob(TrainingSummary.FILE_NAME)
            if not p.parent.name.startswith("checkpoint-") and staging_dir not in p.resolve().parents
        )
        if not found:
            raise UserError(
                f"{str(path)!r} is neither a model folder (no config.json) nor holds any symbert-pretrain output "
                f"(no {TrainingSummary.FILE_NAME} below it)."
            )
        models += found
    return models


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` (resolved) is `folder` (resolved) or lies below it."""
    return path.resolve().is_relative_to(folder.resolve())


def read_results_files(paths: list[str | Path], staging_dir: str | Path) -> dict[Path, GlueResults]:
    """{path: results} for every glue_results.json given or below the given folders (never one inside the staging
    folder, --output_dir: the release's own output is no input), checked against the schema and for values the card
    can show (`GlueResults.read`)."""
    files, given, staging_dir = [], set(), Path(staging_dir)
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob(RESULTS_FILE) if not inside(p, staging_dir))
            for p in found:
                refuse_links(p.parent, [p.name])
            files += [p.resolve() for p in found]
        elif os.path.lexists(path):
            refuse_links(path.parent, [path.name])
            given.add(regular_file(path).resolve())  # a named pipe is refused, never opened
            files.append(path.resolve())
        else:
            raise UserError(f"results path {str(path)!r} does not exist.")
    results = {}
    for path in files:
        # one found in a folder that was measured on sharded or .bin weights matches no model.safetensors: skipped
        if (read := GlueResults.read(path, skip_unmatchable=path not in given)) is not None:
            results[path] = read
    return results


def read_baselines(baselines: tuple[tuple[str, str], ...], staging_dir: str | Path) -> list[tuple[str, GlueResults]]:
    """[(label, results)] of --baselines, each a glue_results.json checked as the model's are."""
    read = []
    for label, path in baselines:
        if not os.path.lexists(path):
            raise UserError(f"--baselines {label}={path}: {path!r} does not exist.")
        if Path(path).is_dir():
            raise UserError(f"--baselines {label}={path}: {path!r} is a folder; name its glue_results.json.")
        (results,) = read_results_files([path], staging_dir).values()
        read.append((label, results))
    return read


def check_baselines(results_path: Path, results: GlueResults, baselines: list[tuple[str, GlueResults]]) -> None:
    """Refuse a baseline that was not scored as the model was: another protocol (seeds, epochs, learning rate, ...),
    a task of the model's it lacks, or other data (by their contents' sha256)."""
    for label, baseline in baselines:
        if differing := protocol_differences(results.protocol, baseline.protocol):
            key = differing[0].split("=")[0]
            raise UserError(
                f"--baselines {label!r} was scored with protocol.{differing[0]}, {results_path} with "
                f"{results.protocol.get(key)!r}: a baseline must be fine-tuned identically."
            )
        for task in results.task_aggregates:
            if task not in baseline.task_aggregates:
                raise UserError(f"--baselines {label!r} has no {task} scores; {results_path} has.")
            mine, theirs = (r.score_data_sha256(task) for r in (results, baseline))  # mnli-m: mnli's data
            if mine != theirs or mine is None:
                raise UserError(
                    f"--baselines {label!r} scored {task} on other data than {results_path} (data_sha256 "
                    f"{str(theirs)[:16]}… against {str(mine)[:16]}…): a baseline must be scored on the same data."
                )


RESULTS_RULE = (
    "a model's GLUE results file is the glue_results.json (under the model folder or --results) whose "
    "model.weights_sha256 is the sha256 of its model.safetensors; of several, the one with the most runs (seeds × "
    "scores); a tie is refused (pass the one to release with --results)"
)


def match_results(model: Path, weights_sha256: str, candidates: dict[Path, GlueResults]) -> tuple[Path, str]:
    """(the results file measured on these weights, why it was chosen), else a clear error: RESULTS_RULE."""
    matching = [path for path, data in candidates.items() if data.weights_sha256 == weights_sha256]
    if matching:  # e.g. a sweep that ended on the final checkpoint next to the full suite: take the fuller one
        runs = {path: candidates[path].run_count for path in matching}
        fullest = [path for path in matching if runs[path] == max(runs.values())]
        if len(fullest) == 1:
            why = f"its weights_sha256 is that of {model}/model.safetensors"
            if len(matching) > 1:
                others = ", ".join(f"{path} ({runs[path]})" for path in matching if path != fullest[0])
                why += f"; it has the most runs ({runs[fullest[0]]}) of the {len(matching)} that match: also {others}"
            return fullest[0], why
        raise UserError(
            f"Several GLUE results files with as many runs are for the weights of {model}: "
            f"{', '.join(map(str, fullest))}; pass the one to release with --results."
        )
    others = "".join(
        f"\n  {path}: weights_sha256 {data.weights_sha256[:16]}… ({data.model.get('name_or_path')})"
        for path, data in candidates.items()
    )
    raise UserError(
        f"No GLUE results file for {model} (its model.safetensors has sha256 {weights_sha256[:16]}…). Run "
        f"`symbert-glue --model {model}` and pass its output with --results."
        + (f" Results files found are for other weights:{others}" if others else "")
    )


def refuse_links(folder: Path, names: list[str]) -> None:
    """Refuse a symbolic link among the files of `folder` that would be staged (or the folder itself, a checkpoint):
    staging copies files, never what a link points to."""
    for path in [folder, *(folder / name for name in names)]:
        if path.is_symlink():
            raise UserError(
                f"{path} is a symbolic link (to {os.readlink(path)!r}); a release stages no link target: replace it "
                "with the file itself."
            )
        if path != folder and os.path.lexists(path) and not path.is_file():  # never opened: a pipe would block
            raise UserError(
                f"{path} is not a regular file (a named pipe, device or folder); a release stages regular files only."
            )


def check_model_folder(folder: Path) -> SymBertConfig:
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


@dataclass(frozen=True, kw_only=True)
class ModelPlan:
    """What the release stages of one model, every input checked: its run and config, the repository, its GLUE
    results (None: released with --without_results), the checkpoints that become `step-N` branches, the GLUE sweep's
    plot and the baselines its card compares with."""

    run: PretrainingRun
    config: SymBertConfig
    repo_id: str
    results_path: Path | None
    results: GlueResults | None
    checkpoints: list[Path]
    glue_plot: Path | None
    baselines: list[tuple[str, GlueResults]]


def plan_models(options: ReleaseOptions) -> list[ModelPlan]:
    """The plan of every model to release; every input is checked before any work is done."""
    staging = Staging(options.output_dir, options.name_template)
    models = find_models(list(options.models), options.output_dir)
    extra_files = [Path(p).resolve() for p in options.results if Path(p).is_file()]
    candidates = read_results_files([*options.results, *models], options.output_dir)
    baselines = read_baselines(options.baselines, options.output_dir)
    without = {}  # the models no results file is for: {model: why}
    for model in models:
        try:
            match_results(model, sha256(model / "model.safetensors"), candidates)
        except UserError as error:
            without[model] = str(error)
    if without and not options.without_results:
        if len(models) == 1:
            raise UserError(f"{next(iter(without.values()))} Or release it with --without_results.")
        raise UserError(
            f"{len(without)} of the {len(models)} models have no GLUE results file: "
            f"{', '.join(map(str, without))}. Run symbert-glue on each and pass its output with --results, or release "
            "them with --without_results (their cards then say that no downstream score was measured)."
        )
    plans, repos, used = [], {}, set()
    for model in models:
        if model.resolve() == Path(options.output_dir).resolve():  # staging would write among the model's own files
            raise UserError(
                f"--output_dir {options.output_dir!r} is the model folder {model}: give a folder of its own (e.g. "
                f"{model / 'release'})."
            )
        config = check_model_folder(model)
        run = PretrainingRun.read(model)
        refuse_links(model, STAGED_FROM_MODEL)
        if model in without:
            print(f"{model}: no GLUE results (--without_results): its card says no downstream score was measured.")
            results = None
        else:
            results, why = match_results(model, sha256(model / "model.safetensors"), candidates)
            print(f"{model}: GLUE results from {results} ({why}).")
        if results is not None and candidates[results].model.get("attention_type") not in (
            None,
            config.attention_type,
        ):
            raise UserError(
                f"{results} says attention_type={candidates[results].model['attention_type']!r} but {model} is "
                f"{config.attention_type!r}."
            )
        used.add(results)
        if results is not None:
            check_baselines(results, candidates[results], baselines)
        run.data(options.dataset)  # recorded, or given
        run.made_from(options.base_model)  # what it was made from, checked before anything is staged
        size = "custom" if run.size is None else run.size
        repo_id = release_repo_id(options.namespace, options.name_template, model, size, config.attention_type)
        if repo_id in repos:
            raise UserError(
                f"{model} and {repos[repo_id]} would both be released as {repo_id}; change --name_template."
            )
        repos[repo_id] = model
        staging.folder(repo_id, "main")
        staging.folder(repo_id, BERT_REVISION)
        checkpoints = []
        for step in options.checkpoints:
            staging.folder(repo_id, f"step-{step}")
            checkpoint = model / f"checkpoint-{step}"
            if not checkpoint.is_dir():
                available = sorted(
                    int(p.name.split("-")[1]) for p in model.glob("checkpoint-*") if p.name[11:].isdigit()
                )
                raise UserError(f"{model} has no checkpoint-{step}; its checkpoints: {available or 'none'}.")
            refuse_links(checkpoint, STAGED_FROM_CHECKPOINT)
            check_model_folder(checkpoint)
            logged_eval_losses(checkpoint)  # its card's eval loss: checked before anything is staged
            checkpoints.append(checkpoint)
        glue_plot = None
        if results is not None:
            glue_plot = find_glue_plot(options.glue_vs_step, list(options.results), results, model, options.output_dir)
            for path in (results, results.with_suffix(".md"), glue_plot):
                if path is not None:
                    refuse_links(path.parent, [path.name])
        plans.append(
            ModelPlan(
                run=run,
                config=config,
                repo_id=repo_id,
                results_path=results,
                results=candidates.get(results),
                checkpoints=checkpoints,
                glue_plot=glue_plot,
                baselines=baselines if results else [],
            )
        )
    for path in extra_files:
        if path not in used:
            data = candidates[path].model
            raise UserError(
                f"{path} is the GLUE result of other weights (weights_sha256 {data['weights_sha256'][:16]}…, model "
                f"{data.get('name_or_path')!r}) than any model being released."
            )
    return plans


def checked_repo_id(repo_id: str, origin: str) -> str:
    """`repo_id`, refused (naming `origin`, where its parts come from) unless the Hub accepts it as a repository id:
    a value such as ".." or "a/../b" never becomes a repository or a folder name."""
    try:
        validate_repo_id(repo_id)
    except ValueError as error:  # huggingface_hub's HFValidationError
        raise UserError(
            f"{origin} gives the repository id {repo_id!r}, which the Hub does not accept: {error}"
        ) from None
    return repo_id


def release_repo_id(namespace: str, name_template: str, model: Path, size: str | None, attention_type: str) -> str:
    """`--namespace`/`--name_template` filled in with the model's size (from training_summary.json) and type."""
    name = name_template.format(size=str(size), attention_type=attention_type)  # as parse_arguments checked it
    origin = (
        f"size={size!r} (from {model}/{TrainingSummary.FILE_NAME}) with --name_template {name_template!r} and "
        f"--namespace {namespace!r}"
    )
    return checked_repo_id(f"{namespace}/{name}", origin)


@dataclass(frozen=True)
class Staging:
    """Where revisions are staged: --output_dir/<repo name>/<revision> (`name_template` names the repositories'
    origin in errors)."""

    output_dir: str
    name_template: str

    def folder(self, repo_id: str, revision: str) -> Path:
        """output_dir/<repo name>/<revision>, where staging replaces whatever is there: refused unless it resolves to
        a folder two levels inside output_dir (no "..", no link out) that is either absent or staged before."""
        root, folder = Path(self.output_dir).resolve(), Path(self.output_dir) / repo_id.split("/")[-1] / revision
        resolved = folder.resolve()
        if not resolved.is_relative_to(root) or len(resolved.relative_to(root).parts) != 2:
            raise UserError(
                f"{repo_id!r} (from --name_template {self.name_template!r}) would be staged in {str(resolved)!r}, which "
                f"is not a folder inside --output_dir {str(root)!r}; nothing was written."
            )
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise UserError(
                f"{str(folder)!r} is a symbolic link or not a folder, so it is not replaced: remove it or choose "
                "another --output_dir; nothing was written."
            )
        if folder.exists():
            if (changed := self.changed_since_staged(folder)) is None:
                raise UserError(
                    f"{str(folder)!r} exists and was not staged by symbert-release (no record of what it staged "
                    "there), so it is not replaced: move it or choose another --output_dir; nothing was written."
                )
            if changed:
                raise UserError(
                    f"{str(folder)!r} holds files changed or added since it was staged ({', '.join(changed[:5])}), "
                    "which a new staging would delete: move them out, or delete the folder; nothing was written."
                )
        return folder

    @staticmethod
    def record_path(folder: Path) -> Path:
        """Beside the staged folder (never inside it, which is uploaded): the sha256 of every file staged there."""
        return folder.parent / f".{folder.name}.staged.json"

    def changed_since_staged(self, folder: Path) -> list[str] | None:
        """The files of `folder` that differ from, or were not among, what staging wrote there; None without a
        record of it."""
        try:
            staged = load_json(self.record_path(folder))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(staged, dict):
            return None
        found = {
            path.relative_to(folder).as_posix(): path
            for path in sorted(folder.rglob("*"))
            if path.is_file() or path.is_symlink()
        }
        changed = [name for name, path in found.items() if path.is_symlink() or staged.get(name) != sha256(path)]
        return changed  # (a staged file deleted since is not lost: staging writes it again)

    def write(self, repo_id: str, revision: str, copies: dict[str, Path], texts: dict[str, str]) -> Path:
        """Stage a revision: build its folder (checked by `folder`) from copied files ({name: source path}) and
        written ones ({name: str}) next to it, then move it into place: an interrupted staging never leaves a
        half-written folder."""
        folder = self.folder(repo_id, revision)
        for name, source in copies.items():  # what plan_models refused already, checked where it is copied
            if Path(source).is_symlink() or not Path(source).is_file():
                raise UserError(
                    f"{source} (staged as {name}) is a symbolic link or not a regular file; a release copies only "
                    "regular files, never a link's target: nothing was written."
                )
        with written_folder(
            folder, ".stage.tmp", f"the staged {revision} of {repo_id}", "staging", "replace"
        ) as building:
            for name, source in copies.items():
                (building / name).parent.mkdir(parents=True, exist_ok=True)  # 1_Pooling/config.json
                shutil.copyfile(source, building / name, follow_symlinks=False)
            for name, text in texts.items():
                (building / name).parent.mkdir(parents=True, exist_ok=True)
                (building / name).write_text(text, encoding="utf-8")
            record = {
                path.relative_to(building).as_posix(): sha256(path)
                for path in sorted(building.rglob("*"))
                if path.is_file()
            }
            self.record_path(folder).unlink(missing_ok=True)  # from here until the new record, no staging is recorded
        write_atomically(self.record_path(folder), lambda file: file.write(json.dumps(record, indent=1) + "\n"))
        return folder


def find_glue_plot(
    glue_vs_step: str | None, results_paths: list[str | Path], results_path: Path, model: Path, staging_dir: str | Path
) -> Path | None:
    """`glue_vs_step` (--glue_vs_step), else the sweep plot next to the results file, in the model folder, or under
    the `results_paths` folders (--results), never inside the staging folder."""
    if glue_vs_step:
        if not Path(glue_vs_step).is_file():
            raise UserError(f"--glue_vs_step {glue_vs_step!r} does not exist.")
        return Path(glue_vs_step)
    nearby = [results_path.parent / GLUE_PLOT, model / GLUE_PLOT]
    under_results = [
        p
        for folder in map(Path, results_paths)
        if folder.is_dir()
        for p in sorted(folder.rglob(GLUE_PLOT))
        if not inside(p, Path(staging_dir))
    ]
    return next((p for p in [*nearby, *under_results] if p.is_file()), None)
