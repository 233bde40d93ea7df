"""Fine-tune and score a model on GLUE by the paper's protocol, over seeds and along pre-training checkpoints.

    symbert-glue --model outputs/cpu-demo --tasks rte,mrpc --seeds 1,2 --output_dir glue/demo
    symbert-glue --model outputs/cpu-demo --data_dir glue_data --output_dir glue/demo      # offline: local GLUE data
    symbert-glue --pretraining_dirs runs/original runs/pairwise --steps 10000,30000,65000 --output_dir glue/sweep

Defaults are the paper's protocol (PAPER_PROTOCOL), as shown below: 5 epochs, lr 1e-5, linear schedule, warm-up
ratio 0.1, batch 16, max length 128, weight decay 0, seeds 1-5, the GLUE-score tasks (all but wnli); the final model
is scored on the dev sets. Any Trainer argument (listed last) can be overridden (e.g. `--max_steps 10`, `--bf16 true`).

Output folder: `runs/<task>/seed-<n>.json` (one per finished pair, written atomically; a rerun skips them while
the model's weights, the protocol and the task data's contents (sha256, whatever path names them) are the same),
`glue_results.json` (schema: docs/glue-results.md) and `glue_results.md`, rebuilt from the run files after
every pair. The sweep writes one such folder per checkpoint (`<model>/step-<N>/`) and `glue_vs_step.csv`,
`glue_vs_step.md`, `glue_vs_step.png`.
"""

import contextlib
import csv
import json
import logging
import statistics
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, DatasetDict
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.utils.sha import sha_fileobj
from numpy.typing import ArrayLike
from safetensors import safe_open
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    HfArgumentParser,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
    set_seed,
)

from .. import BERT_ATTENTION_TYPE
from ..cli import UserError, command_parser, group_arguments, missing_local_path, run_command
from .arguments import precision_for
from .compat import trainer_argument_names, warmup_ratio
from .glue_data import TASKS, data_sha256, glue_mean_tasks, hub_datasets, load_task, score_names
from .reporting import new_figure, save_figure, write_atomically

SCHEMA_VERSION = 1
PAPER_TASKS = glue_mean_tasks()  # the tasks of the GLUE score: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte
PAPER_PROTOCOL = {
    "num_train_epochs": 5,
    "learning_rate": 1e-5,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0.1,  # below 1: a ratio of the total steps
    "per_device_train_batch_size": 16,
    "weight_decay": 0.0,
    # not part of the paper's protocol: length-grouped batches (with dynamic padding, short GLUE sentences are not
    # padded to 128), no checkpoints per pair (disk), no evaluation during training (the final model is scored)
    "train_sampling_strategy": "group_by_length",
    "save_strategy": "no",
    "eval_strategy": "no",
    "per_device_eval_batch_size": 64,
    "logging_steps": 100,
    "report_to": "none",
}
SWEEP_FRACTION = 0.95


@dataclass
class GlueArguments:
    _argument_group_name = "GLUE arguments"

    model: str | None = field(default=None, metadata={"help": "model folder or Hub id to fine-tune"})
    revision: str | None = field(default=None, metadata={"help": "Hub revision of --model"})
    tasks: str = field(default=",".join(PAPER_TASKS), metadata={"help": f"comma-separated: {', '.join(TASKS)}"})
    seeds: str = field(default="1,2,3,4,5", metadata={"help": "comma-separated integers"})
    data_dir: str | None = field(
        default=None,
        metadata={"help": f"local GLUE data (TSV files or save_to_disk folders); default: the Hub's {hub_datasets()}"},
    )
    max_length: int = field(default=128, metadata={"help": "tokens per example (truncated beyond)"})
    pretraining_dirs: list[str] | None = field(
        default=None, metadata={"help": "pre-training output folders: score their checkpoint-N folders (the sweep)"}
    )
    steps: str | None = field(
        default=None, metadata={"help": "sweep steps, comma-separated; default: every checkpoint"}
    )
    skip_malformed_rows: bool = field(
        default=False,
        metadata={
            "help": "drop TSV rows with the wrong number of fields (with a notice naming their lines) instead of "
            "refusing the file; the official QQP train.tsv holds a few, which nyu-mll/glue drops"
        },
    )


def protocol_defaults() -> dict:
    """PAPER_PROTOCOL in this transformers' names (compat.trainer_argument_names)."""
    return trainer_argument_names(PAPER_PROTOCOL)


def task_list() -> str:
    """The tasks --tasks knows, for --help."""
    names = ", ".join(f"{name}\0({task.tsv_folder})" for name, task in TASKS.items())  # \0: a task is never split
    text = f"Tasks (--tasks; default: the paper's {len(PAPER_TASKS)}): {names}."
    return textwrap.fill(text, width=110).replace("\0", " ")


def argument_parser() -> HfArgumentParser:
    """Our arguments, then the Trainer's under their own heading, with the paper's protocol as their defaults."""
    parser = command_parser(
        f"{__doc__}\n{task_list()}", parser_class=HfArgumentParser, dataclass_types=(GlueArguments, TrainingArguments)
    )
    group_arguments(
        parser,
        TrainingArguments,
        "Trainer arguments (transformers.TrainingArguments; defaults: the paper's protocol where it sets them)",
    )
    # the protocol's values parsed as the command line would parse them, then made the defaults (so --help shows them)
    protocol = protocol_defaults()
    parsed, _ = parser.parse_known_args([item for key, value in protocol.items() for item in (f"--{key}", str(value))])
    parser.set_defaults(**{key: getattr(parsed, key) for key in protocol})
    return parser


def parse_arguments(argv: list[str]) -> tuple[GlueArguments, TrainingArguments, list[str], list[int]]:
    """The paper's protocol as defaults; the command line wins."""
    try:
        glue_args, training_args = argument_parser().parse_args_into_dataclasses(list(argv))
    except ValueError as error:  # TrainingArguments refusing a combination of settings, arguments left unparsed
        if isinstance(error, UserError):
            raise
        raise UserError(f"bad arguments: {' '.join(str(error).split())}") from None
    tasks, seeds = check_arguments(glue_args, training_args)
    if not has_accelerator():  # pinned memory speeds up copies to an accelerator; without one torch warns per run
        training_args = replace(training_args, dataloader_pin_memory=False)
    return glue_args, training_args, tasks, seeds


def has_accelerator() -> bool:
    """Whether torch sees an accelerator (CUDA, MPS, XPU, ...): where pinned memory means something."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6 and later
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def precision(training_args: TrainingArguments) -> str:
    """The precision the pairs train in, "bf16", "fp16" or "fp32" (--bf16, --fp16), refused in one line where it would
    be another one (fp16 on a CPU trains in fp32; arguments.precision_for)."""
    requested = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"
    device = training_args.device.type
    bf16_supported = {"cuda": torch.cuda.is_bf16_supported, "cpu": lambda: training_args.use_cpu}.get(
        device, lambda: True
    )()
    try:
        return precision_for(requested, device, bf16_supported)
    except UserError as error:  # in symbert-glue's terms: the Trainer's flags, not symbert-pretrain's --precision
        flag = f"--{requested} true"
        raise UserError(
            str(error)
            .replace(f"precision {requested!r}", flag)
            .replace("--precision fp32", f"--{requested} false")
            .replace(", or bf16.", ", or --bf16 true --use_cpu true.")
        ) from None


def check_arguments(glue_args: GlueArguments, training_args: TrainingArguments) -> tuple[list[str], list[int]]:
    tasks = [task.strip() for task in glue_args.tasks.split(",") if task.strip()]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown or not tasks:
        raise UserError(f"Unknown GLUE task(s) {', '.join(unknown) or '(none given)'}; allowed: {', '.join(TASKS)}.")
    try:
        seeds = [int(seed) for seed in glue_args.seeds.split(",")]
    except ValueError:
        raise UserError(f"--seeds {glue_args.seeds!r} must be comma-separated integers, e.g. 1,2,3,4,5.") from None
    if (glue_args.model is None) == (glue_args.pretraining_dirs is None):
        raise UserError("Pass exactly one of --model (one model) and --pretraining_dirs (the checkpoint sweep).")
    if glue_args.steps is not None and glue_args.pretraining_dirs is None:
        raise UserError("--steps selects checkpoints of --pretraining_dirs; it needs --pretraining_dirs.")
    if glue_args.max_length <= 0:
        raise UserError(f"max_length={glue_args.max_length} must be positive.")
    if training_args.output_dir is None:
        raise UserError("--output_dir is required.")
    precision(training_args)
    return list(dict.fromkeys(tasks)), list(dict.fromkeys(seeds))


# Scoring: the spec's formulas on scikit-learn's and scipy's metrics. Metrics are fractions, scores percent.


def correlation(function: Callable) -> Callable[[ArrayLike, ArrayLike], float]:
    """scipy's correlation as a metric(labels, predictions). Constant predictions have no correlation: 0, as
    scikit-learn's Matthews gives, instead of scipy's NaN."""
    return lambda labels, predictions: np.nan_to_num(function(predictions, labels)[0])


METRICS = {  # the raw metrics a task's Metric names (glue_data.py) -> metric(labels, predictions)
    "accuracy": accuracy_score,
    "f1": f1_score,
    "matthews_correlation": matthews_corrcoef,
    "pearson": correlation(pearsonr),
    "spearmanr": correlation(spearmanr),
}


def split_metrics(task: str, predictions: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """The task's metrics on one dev split, from predicted classes (or similarities, for stsb) and gold labels."""
    return {name: float(METRICS[name](labels, predictions)) for name in TASKS[task].metric.names}


def task_scores(task: str, metrics: dict[str, float]) -> dict[str, float]:
    """{score name: percent} for one (task, seed): per dev split, the mean of the task's metrics (mnli gives mnli-m
    and mnli-mm, every other task one score)."""
    spec = TASKS[task]
    scores = {}
    for score in spec.scores:
        values = [metrics[spec.metric_key(name, score.split)] for name in spec.metric.names]
        scores[score.name] = 100 * sum(values) / len(values)
    return scores


def run_metrics(task: str, per_split: dict[str, tuple[ArrayLike, ArrayLike]]) -> dict[str, float]:
    """A pair's raw metrics from {split: (predictions, labels)}; with several dev splits the keys name the split
    (mnli's accuracy_matched), with one the pair's `score` is added."""
    spec = TASKS[task]
    metrics = {
        spec.metric_key(name, split): value
        for split, (predictions, labels) in per_split.items()
        for name, value in split_metrics(task, predictions, labels).items()
    }
    if len(spec.scores) == 1:
        (metrics["score"],) = task_scores(task, metrics).values()
    return metrics


# Baselines: what a predictor that learned nothing scores on the same dev set. A score is flagged "did not learn"
# when its mean over seeds is at most NOISE_STANDARD_ERRORS standard errors above the better baseline, the standard
# error being the larger of the dev-set measurement's (sampling the dev set: a proportion's sqrt(b(1-b)/n) at the
# baseline's value b for accuracy and F1, 1/sqrt(n) for a correlation near 0) and the seeds' sample std.
NOISE_STANDARD_ERRORS = 2
CORRELATIONS = ("matthews_correlation", "pearson", "spearmanr")


def baseline_metrics(task: str, labels: ArrayLike) -> dict[str, dict[str, float]]:
    """{"majority": metrics, "chance": metrics} on one dev split's gold labels: the task's metrics of always
    predicting the most frequent class, and the expected metrics of predicting classes uniformly at random (accuracy
    1/k; F1 of the positive class 2·p·(1/k) / (p + 1/k), p its share of the labels; Matthews 0). For a regression
    (stsb) a constant prediction and a random one both have correlation 0."""
    spec = TASKS[task]
    names = spec.metric.names
    if spec.label_names is None:
        return {"majority": dict.fromkeys(names, 0.0), "chance": dict.fromkeys(names, 0.0)}
    labels = np.asarray(labels)
    values, counts = np.unique(labels, return_counts=True)
    majority = split_metrics(task, np.full(len(labels), values[counts.argmax()]), labels)
    uniform, positive = 1 / spec.num_labels, float(np.mean(labels == 1))
    f1 = 2 * positive * uniform / (positive + uniform)
    expected = {"accuracy": uniform, "f1": f1, "matthews_correlation": 0.0}
    return {"majority": majority, "chance": {name: expected[name] for name in names}}


def baseline_scores(task: str, dev_labels: dict[str, ArrayLike]) -> dict[str, dict[str, float]]:
    """{score name: {"majority", "chance", "standard_error" (percent), "n" (dev examples)}} from {dev split: labels}."""
    spec = TASKS[task]
    found = {}
    for score in spec.scores:
        labels = dev_labels[score.split]
        n = len(labels)
        metrics = baseline_metrics(task, labels)
        best = {name: max(metrics["majority"][name], metrics["chance"][name]) for name in spec.metric.names}
        errors = [
            1 / np.sqrt(n) if name in CORRELATIONS else np.sqrt(value * (1 - value) / n) for name, value in best.items()
        ]
        found[score.name] = {
            kind: 100 * statistics.fmean(metrics[kind].values()) for kind in ("majority", "chance")
        } | {"standard_error": 100 * float(statistics.fmean(errors)), "n": n}
    return found


def learning_verdict(aggregate: dict, baseline: dict) -> dict:
    """The `baseline` entry of a score's aggregate: its baselines, the better one, the noise margin (NOISE_STANDARD_ERRORS
    × the larger of the dev-set standard error and the seeds' std) and `did_not_learn`: the mean is within it."""
    best = max(baseline["majority"], baseline["chance"])
    margin = NOISE_STANDARD_ERRORS * max(baseline["standard_error"], aggregate["std"])
    return {**baseline, "best": best, "margin": margin, "did_not_learn": aggregate["mean"] <= best + margin}


def glue_score(scores: dict[str, float]) -> float:
    """One seed's GLUE score: the plain mean of the GLUE-mean scores (mnli counts twice; wnli never)."""
    names = score_names(glue_mean_only=True)
    missing = [name for name in names if name not in scores]
    if missing:
        raise ValueError(f"The GLUE score needs all {len(names)} scores; missing: {', '.join(missing)}.")
    return statistics.fmean(scores[name] for name in names)


def mean_and_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0.0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def aggregate(scores: dict[str, dict[str, float]], seeds: list[int], baselines: dict[str, dict] | None = None) -> dict:
    """`aggregates` of the results file from {score name: {seed: percent}}, the protocol's seeds and the scores'
    baselines ({score name: baseline_scores' entry}; a score without one gets no verdict)."""
    tasks = {}
    for name, by_seed in scores.items():
        mean, std = mean_and_std(list(by_seed.values()))
        tasks[name] = {"mean": mean, "std": std, "n": len(by_seed)}
        if (baselines or {}).get(name):
            tasks[name]["baseline"] = learning_verdict(tasks[name], baselines[name])
    names = score_names(glue_mean_only=True)
    per_seed = {
        str(seed): glue_score({name: scores[name][str(seed)] for name in names})
        for seed in seeds
        if all(str(seed) in scores.get(name, {}) for name in names)
    }
    complete = bool(seeds) and len(per_seed) == len(seeds)
    mean, std = mean_and_std(list(per_seed.values())) if complete else (None, None)
    glue = {"mean": mean, "std": std, "per_seed": per_seed, "n_seeds": len(per_seed), "complete": complete}
    return {"tasks": tasks, "glue": glue}


# Fine-tuning


def tokenize(task: str, data: DatasetDict, tokenizer: PreTrainedTokenizerBase, max_length: int) -> dict[str, Dataset]:
    text_columns = TASKS[task].text_columns

    def encode(batch):
        # token_type_ids asked for: under transformers 5.0-5.2 a tokenizer saved before model_input_names was pinned
        # loads as TokenizersBackend and would leave pairs with all-zero segments
        texts = (batch[column] for column in text_columns)
        return tokenizer(*texts, truncation=True, max_length=max_length, return_token_type_ids=True)

    # Unpadded: DataCollatorWithPadding pads each batch to its own longest example.
    return {
        split: dataset.map(encode, batched=True, remove_columns=[c for c in dataset.column_names if c != "label"])
        for split, dataset in data.items()
    }


def fine_tune(
    model_name: str,
    revision: str | None,
    task: str,
    tokenized: dict[str, Dataset],
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    training_args: TrainingArguments,
) -> dict[str, float]:
    """Fine-tune a fresh copy of the model on the task's train split with `seed`; the pair's metrics on its dev splits."""
    spec = TASKS[task]
    set_seed(seed)  # the classifier head is initialised here, before the Trainer seeds anything
    label_names = {} if spec.label_names is None else {"id2label": dict(enumerate(spec.label_names))}
    model = AutoModelForSequenceClassification.from_pretrained(
        model_name,
        revision=revision,
        trust_remote_code=True,
        num_labels=spec.num_labels,
        problem_type="regression" if spec.label_names is None else "single_label_classification",
        **label_names,
    )
    trainer = Trainer(
        model=model,
        args=replace(training_args, seed=seed),
        train_dataset=tokenized["train"],
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    per_split = {}
    for split in spec.eval_splits:
        output = trainer.predict(tokenized[split])
        logits = output.predictions
        predictions = logits.squeeze(-1) if spec.label_names is None else logits.argmax(-1)
        per_split[split] = (predictions, output.label_ids)
    return run_metrics(task, per_split)


# The suite: one model, tasks × seeds, restartable


def check_model(name: str, revision: str | None = None) -> PretrainedConfig:
    """The model's config, or a clear error when `name` is neither a local model folder nor a loadable Hub model."""
    path = Path(name)
    if path.exists() and not (path / "config.json").is_file():
        raise UserError(f"Model folder {name!r} has no config.json: not a saved model.")
    missing = missing_local_path(name)
    if missing:
        raise missing
    try:
        return AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=True)
    except (OSError, ValueError) as error:
        raise UserError(f"Model {name!r} not found: not a local folder nor a loadable Hub model ({error}).") from None


def model_info(name: str, revision: str | None, config: PretrainedConfig) -> dict:
    """The `model` entry of the results file: its weights file's sha256 identifies exactly what was scored."""
    if Path(name).is_dir():
        weights = Path(name) / "model.safetensors"
        weights = weights if weights.is_file() else None
    else:
        try:
            weights = Path(hf_hub_download(name, "model.safetensors", revision=revision))
            revision = weights.parent.name  # the cache's snapshots/<commit>/ folder: the exact revision
        except EntryNotFoundError:  # sharded or .bin weights: no single file to hash
            weights = None
    sha256 = num_parameters = None
    if weights is not None:
        with open(weights, "rb") as file:
            sha256 = sha_fileobj(file).hex()
        with safe_open(weights, framework="pt") as tensors:
            num_parameters = sum(int(np.prod(tensors.get_slice(key).get_shape())) for key in tensors.keys())
    return {
        "name_or_path": name,
        "revision": revision,
        "weights_sha256": sha256,
        "attention_type": getattr(config, "attention_type", BERT_ATTENTION_TYPE),  # a plain BERT's
        "num_parameters": num_parameters,
    }


def pair_protocol(glue_args: GlueArguments, training_args: TrainingArguments) -> dict:
    """Everything that makes one (task, seed) result: a finished pair is reused only when all of it matches."""
    warmup, ratio = training_args.warmup_steps, warmup_ratio(training_args)
    return {
        "epochs": training_args.num_train_epochs,
        "max_steps": training_args.max_steps,
        "learning_rate": training_args.learning_rate,
        "lr_scheduler_type": str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)),
        "warmup_ratio": ratio,
        "warmup_steps": int(warmup) if warmup >= 1 else None,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        "world_size": training_args.world_size,
        "max_length": glue_args.max_length,
        "weight_decay": training_args.weight_decay,
        "precision": precision(training_args),
        # for the reader (a local folder as its absolute path, never mistaken for a Hub id); pairs are matched on the
        # data's contents
        "data": str(Path(glue_args.data_dir).resolve()) if glue_args.data_dir else hub_datasets(),
    }


def write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda file: file.write(json.dumps(value, indent=2) + "\n"))


def identity(model: dict) -> str:
    """The weights' sha256 (the same weights moved to another folder are the same model), else the name."""
    return model["weights_sha256"] or model["name_or_path"]


def read_runs(output_dir: Path, model: dict, protocol: dict) -> dict[tuple[str, int], dict]:
    """The finished pairs under `output_dir/runs`: {(task, seed): record}; all must be of this model and protocol."""
    runs = {}
    for path in sorted((output_dir / "runs").glob("*/seed-*.json")):
        try:
            record = json.loads(path.read_text())
            differences = mismatches(record["model"], record["protocol"], model, protocol)
            key = record["task"], record["seed"]
        except (ValueError, KeyError, TypeError) as error:
            message = f"{path} is not a symbert-glue run file ({error!r}); remove it to rerun its pair."
            raise UserError(message) from None
        if differences:
            raise UserError(
                f"{path} was made with another model or protocol than this run: {'; '.join(differences)}. "
                f"Use another --output_dir or remove {output_dir / 'runs'}."
            )
        runs[key] = record
    return runs


def mismatches(saved_model: dict, saved_protocol: dict, model: dict, protocol: dict) -> list[str]:
    """'field: saved value vs this run's value' for each way a saved pair differs from this run. The data are
    compared by their contents (data_sha256), not by the `data` path that names them."""
    found = []
    if identity(saved_model) != identity(model):
        found.append(
            f"model: {identity(saved_model)} ({saved_model['name_or_path']}) saved vs {identity(model)} "
            f"({model['name_or_path']}) in this run"
        )
    for name in dict.fromkeys([*saved_protocol, *protocol]):
        saved, current = saved_protocol.get(name, "(absent)"), protocol.get(name, "(absent)")
        if name != "data" and saved != current:
            found.append(f"{name}: {saved} saved vs {current} in this run")
    return found


def drop_stale(runs: dict[tuple[str, int], dict], task: str, seeds: list[int], sha256: str, source: str) -> None:
    """Forget the task's pairs scored on other data than `source` holds now (a file edited in place): the requested
    ones are recomputed, the others left out of the results."""
    stale = [key for key, record in runs.items() if key[0] == task and record.get("data_sha256") != sha256]
    if not stale:
        return
    for key in stale:
        del runs[key]
    stale_seeds = sorted(seed for _, seed in stale)
    rerun = ", ".join(str(seed) for seed in stale_seeds if seed in seeds)
    left_out = ", ".join(str(seed) for seed in stale_seeds if seed not in seeds)
    print(
        f"{task}: seed(s) {', '.join(map(str, stale_seeds))} were scored on other data than {source} holds now"
        + (f"; recomputing {rerun}" if rerun else "")
        + (f"; {left_out} not requested: left out of the results" if left_out else "")
    )


class LoadReportOnce:
    """A context for loading the model once per pair: the first load shows transformers' load report (the classifier
    head newly initialised, the MLM head unused), later ones keep it to themselves (the same report each time), while
    errors still show. One per suite: one report per model."""

    def __init__(self):
        self.shown = False

    @contextlib.contextmanager
    def __call__(self):
        logger = logging.getLogger("transformers.modeling_utils")  # where both 4.x and 5.x report the load
        level = logger.level
        if self.shown:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            logger.setLevel(level)
            self.shown = True


def run_suite(
    model_name: str,
    glue_args: GlueArguments,
    training_args: TrainingArguments,
    tasks: list[str],
    seeds: list[int],
    output_dir: str | Path,
) -> dict:
    """Fine-tune and score `model_name` on tasks × seeds into `output_dir`; returns the results (glue_results.json)."""
    output_dir = Path(output_dir)
    config = check_model(model_name, glue_args.revision)
    if glue_args.max_length > config.max_position_embeddings:
        raise UserError(
            f"max_length={glue_args.max_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}."
        )
    tokenizer = AutoTokenizer.from_pretrained(model_name, revision=glue_args.revision, trust_remote_code=True)
    model = model_info(model_name, glue_args.revision, config)
    protocol = pair_protocol(glue_args, training_args)
    runs = read_runs(output_dir, model, protocol)
    load_report_once = LoadReportOnce()
    sha256 = {task: data_sha256(task, glue_args.data_dir) for task in tasks}
    for task in tasks:
        drop_stale(runs, task, seeds, sha256[task], protocol["data"])
    todo = {task: [seed for seed in seeds if (task, seed) not in runs] for task in tasks}
    data = {
        task: load_task(task, glue_args.data_dir, glue_args.skip_malformed_rows) for task, left in todo.items() if left
    }  # all checked first
    baselines = {
        task: baseline_scores(task, {split: dataset["label"] for split, dataset in splits.items() if split != "train"})
        for task, splits in data.items()
    }

    for task, left in todo.items():
        done = [seed for seed in seeds if seed not in left]
        if done:
            print(f"{task}: seed(s) {', '.join(map(str, done))} already done in {output_dir}, skipped")
        if not left:
            continue
        tokenized = tokenize(task, data[task], tokenizer, glue_args.max_length)
        for seed in left:
            work_dir = output_dir / "runs" / task / f"seed-{seed}"
            with load_report_once():
                metrics = fine_tune(
                    model_name,
                    model["revision"],
                    task,
                    tokenized,
                    tokenizer,
                    seed,  # the commit the sha256 is of
                    replace(training_args, output_dir=str(work_dir)),
                )
            runs[task, seed] = {
                "task": task,
                "seed": seed,
                "metrics": metrics,
                "model": model,
                "protocol": protocol,
                "data_sha256": sha256[task],
                "baselines": baselines[task],
            }
            if training_args.process_index == 0:
                write_json(work_dir.with_suffix(".json"), runs[task, seed])
                if work_dir.is_dir() and not any(work_dir.iterdir()):
                    work_dir.rmdir()  # the Trainer's output_dir; kept only if it holds something (--save_strategy)
                scores = ", ".join(
                    f"{name} {value:.2f} (majority {baselines[task][name]['majority']:.2f}, chance "
                    f"{baselines[task][name]['chance']:.2f})"
                    for name, value in task_scores(task, metrics).items()
                )
                print(f"{task} seed {seed}: {scores}")
                write_results(output_dir, build_results(model, protocol, runs, tasks, seeds))
    results = build_results(model, protocol, runs, tasks, seeds)
    if training_args.process_index == 0:
        write_results(output_dir, results)
    return results


def build_results(
    model: dict, protocol: dict, runs: dict[tuple[str, int], dict], tasks: list[str], seeds: list[int]
) -> dict:
    """The results file from the finished pairs (this command's and earlier ones' in the same folder)."""
    tasks = list(dict.fromkeys([*tasks, *(task for task, _ in runs)]))
    seeds = sorted({*seeds, *(seed for _, seed in runs)})
    metrics, scores, baselines = {}, {}, {}
    for (task, seed), record in sorted(runs.items(), key=lambda item: (tasks.index(item[0][0]), item[0][1])):
        metrics.setdefault(task, {})[str(seed)] = record["metrics"]
        baselines.update(record.get("baselines") or {})  # the same dev set (data_sha256) for every seed
        for name, value in task_scores(task, record["metrics"]).items():
            scores.setdefault(name, {})[str(seed)] = value
    return {
        "schema_version": SCHEMA_VERSION,
        "model": model,
        "protocol": {**protocol, "seeds": seeds, "tasks": tasks},
        "data_sha256": {task: record.get("data_sha256") for (task, _), record in runs.items()},
        "runs": metrics,
        "scores": scores,
        "aggregates": aggregate(scores, seeds, baselines),
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "library_versions": {package: package_version(package) for package in ("symbert", "transformers", "torch")},
    }


def package_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def results_markdown(results: dict) -> str:
    """glue_results.md: the paper's Table 3 layout (mean (sample std) over seeds), then every seed's scores."""
    scores, aggregates, seeds = results["scores"], results["aggregates"], results["protocol"]["seeds"]
    glue = aggregates["glue"]
    names = [name for name in score_names(glue_mean_only=True) if name in scores]
    extra = [name for name in score_names() if name in scores and name not in names]  # wnli: after GLUE, never in it
    header = [*names, "GLUE", *(f"{name} (not in GLUE)" for name in extra)]

    def summary(name):
        return f"{aggregates['tasks'][name]['mean']:.2f} ({aggregates['tasks'][name]['std']:.2f})"

    def score(name, seed):
        return f"{scores[name][seed]:.2f}" if seed in scores[name] else "-"

    glue_cell = f"{glue['mean']:.2f} ({glue['std']:.2f})" if glue["complete"] else "incomplete"
    seed_rows = [
        [
            seed,
            *(score(n, seed) for n in names),
            f"{glue['per_seed'][seed]:.2f}" if seed in glue["per_seed"] else "-",
            *(score(n, seed) for n in extra),
        ]
        for seed in map(str, seeds)
    ]
    return (
        "\n".join(
            [
                f"# GLUE: {results['model']['name_or_path']}",
                "",
                f"Dev-set scores in percent, mean (sample std) over seeds {', '.join(map(str, seeds))}. GLUE is the mean of "
                f"the {len(score_names(glue_mean_only=True))} scores {', '.join(score_names(glue_mean_only=True))}; its std is the sample std of the per-seed "
                "GLUE scores.",
                "",
                table(
                    ["model", *header],
                    [[results["model"]["name_or_path"], *map(summary, names), glue_cell, *map(summary, extra)]],
                ),
                "",
                "Per seed:",
                "",
                table(["seed", *header], seed_rows),
                *baselines_markdown(aggregates["tasks"]),
            ]
        )
        + "\n"
    )


def verdict(baseline: dict) -> str:
    return "**did not learn**" if baseline["did_not_learn"] else "above the baselines"


def baselines_markdown(tasks: dict) -> list[str]:
    """The baselines section of glue_results.md (empty when no score has baselines: results of an older version)."""
    names = [name for name in score_names() if "baseline" in tasks.get(name, {})]
    if not names:
        return []
    rows = [
        [
            name,
            f"{tasks[name]['mean']:.2f}",
            f"{tasks[name]['baseline']['majority']:.2f}",
            f"{tasks[name]['baseline']['chance']:.2f}",
            f"{tasks[name]['baseline']['margin']:.2f}",
            str(tasks[name]["baseline"]["n"]),
            verdict(tasks[name]["baseline"]),
        ]
        for name in names
    ]
    return [
        "",
        "Baselines on the same dev sets: the majority class (always predicting the most frequent label) and chance "
        "(the expected score of uniformly random predictions; 0 for correlations). A score is flagged **did not "
        f"learn** when its mean is at most the margin above the better baseline: {NOISE_STANDARD_ERRORS} standard "
        "errors, the larger of the dev-set measurement's (a proportion's for accuracy and F1, 1/√n for a "
        "correlation) and the seeds' std.",
        "",
        table(["score", "mean", "majority", "chance", "margin", "dev examples", "verdict"], rows),
    ]


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the first column left-aligned, the numbers right-aligned."""
    alignment = ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join("| " + " | ".join(row) + " |" for row in [header, alignment, *rows])


def write_results(output_dir: Path, results: dict) -> None:
    write_json(output_dir / "glue_results.json", results)
    write_atomically(output_dir / "glue_results.md", lambda file: file.write(results_markdown(results)))


# The sweep: the suite on checkpoints along pre-training (the paper's Figure 3)


def sweep_checkpoints(pretraining_dirs: list[str], steps: str | None) -> dict[str, dict[int, Path]]:
    """{model name: {step: checkpoint folder}}, every folder checked before any training."""
    names = [Path(folder).name for folder in pretraining_dirs]
    if len(set(names)) != len(names):
        raise UserError(f"--pretraining_dirs must have distinct folder names (they name the models): {names}.")
    try:
        wanted = None if steps is None else [int(step) for step in steps.split(",")]
    except ValueError:
        raise UserError(f"--steps {steps!r} must be comma-separated integers, e.g. 1000,5000,10000.") from None
    checkpoints = {}
    for name, folder in zip(names, map(Path, pretraining_dirs)):
        found = {int(p.name.split("-")[1]): p for p in folder.glob("checkpoint-*") if p.name.split("-")[1].isdigit()}
        if not found:
            raise UserError(f"No checkpoint-N folders in {folder}.")
        missing = [step for step in wanted or [] if step not in found]
        if missing:
            raise UserError(
                f"{folder}: no checkpoint for step(s) {', '.join(map(str, missing))}; it has {', '.join(map(str, sorted(found)))}."
            )
        checkpoints[name] = {step: found[step] for step in sorted(wanted or found)}
        for path in checkpoints[name].values():
            check_model(str(path))
    return checkpoints


def seed_averaged_score(results: dict) -> float:
    """The sweep's score of one checkpoint: the GLUE mean when all its scores are there, otherwise the same mean
    (over seeds of the per-seed mean) over the scores that are (e.g. rte alone)."""
    glue_mean = score_names(glue_mean_only=True)
    scores = {name: by_seed for name, by_seed in results["scores"].items() if name in glue_mean}
    seeds = sorted({seed for by_seed in scores.values() for seed in by_seed})
    return statistics.fmean(statistics.fmean(s[seed] for s in scores.values() if seed in s) for seed in seeds)


def crossing_step(steps: list[int], scores: list[float], fraction: float = SWEEP_FRACTION) -> float | None:
    """The step, linearly interpolated, at which `scores` first reaches `fraction` of its last value; None if never."""
    target = fraction * scores[-1]
    first = next((i for i, score in enumerate(scores) if score >= target), None)
    if first is None or first == 0:
        return None if first is None else float(steps[0])
    return float(np.interp(target, scores[first - 1 : first + 1], steps[first - 1 : first + 1]))


def run_sweep(
    glue_args: GlueArguments, training_args: TrainingArguments, tasks: list[str], seeds: list[int]
) -> list[dict]:
    output_dir = Path(training_args.output_dir)
    checkpoints = sweep_checkpoints(glue_args.pretraining_dirs, glue_args.steps)
    rows = []
    for name, by_step in checkpoints.items():
        for step, folder in by_step.items():
            print(f"\n{name} step {step}: {folder}")
            suite_dir = output_dir / name / f"step-{step}"
            results = run_suite(str(folder), glue_args, training_args, tasks, seeds, suite_dir)
            means = {score: aggregate["mean"] for score, aggregate in results["aggregates"]["tasks"].items()}
            rows.append({"model": name, "step": step, "glue": seed_averaged_score(results), **means})
    if training_args.process_index != 0:
        return rows
    columns = ["model", "step", "glue", *(name for name in score_names() if name in rows[0])]

    def write_csv(file):
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

    write_atomically(output_dir / "glue_vs_step.csv", write_csv)
    curves = {
        name: ([r["step"] for r in rows if r["model"] == name], [r["glue"] for r in rows if r["model"] == name])
        for name in checkpoints
    }
    summary = sweep_markdown(curves, tasks)
    write_atomically(output_dir / "glue_vs_step.md", lambda file: file.write(summary))
    all_paper_tasks = set(PAPER_TASKS) <= set(tasks)
    plot_sweep(
        curves,
        output_dir / "glue_vs_step.png",
        "GLUE score" if all_paper_tasks else f"mean score of {', '.join(tasks)}",
    )
    print(f"\n{summary}\nSweep in {output_dir}: glue_vs_step.csv, glue_vs_step.md, glue_vs_step.png")
    return rows


def sweep_markdown(curves: dict[str, tuple[list[int], list[float]]], tasks: list[str]) -> str:
    percent = f"{SWEEP_FRACTION:.0%}"
    header = ["model", "final step", "final score", f"{percent} of final", f"step reaching {percent} (interpolated)"]
    rows = []
    for name, (steps, scores) in curves.items():
        crossing = crossing_step(steps, scores)
        target = SWEEP_FRACTION * scores[-1]
        rows.append(
            [
                name,
                str(steps[-1]),
                f"{scores[-1]:.2f}",
                f"{target:.2f}",
                "not reached" if crossing is None else f"{crossing:.1f}",
            ]
        )
    return (
        f"Score along pre-training (tasks {', '.join(tasks)}; GLUE when all {len(PAPER_TASKS)} paper tasks are run, "
        "otherwise the "
        "mean of the scores run), mean over seeds.\n\n" + table(header, rows) + "\n"
    )


def plot_sweep(
    curves: dict[str, tuple[list[int], list[float]]], path: str | Path, score_name: str = "GLUE score"
) -> Path:
    """GLUE score against pre-training step, one line per model, with its 95%-of-final line and crossing step."""
    fig, ax = new_figure(f"{score_name} (dev, %)", "GLUE along pre-training")
    for name, (steps, scores) in curves.items():
        (line,) = ax.plot(steps, scores, marker="o", label=name)
        target = SWEEP_FRACTION * scores[-1]
        ax.axhline(target, color=line.get_color(), linestyle="--", linewidth=1, label=f"{SWEEP_FRACTION:.0%} of {name}")
        crossing = crossing_step(steps, scores)
        if crossing is not None:
            ax.axvline(crossing, color=line.get_color(), linestyle=":", linewidth=1)
    ax.legend()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


def run(argv: list[str]) -> None:
    glue_args, training_args, tasks, seeds = parse_arguments(argv)
    if glue_args.pretraining_dirs:
        run_sweep(glue_args, training_args, tasks, seeds)
        return
    output_dir = Path(training_args.output_dir)
    results = run_suite(glue_args.model, glue_args, training_args, tasks, seeds, output_dir)
    print(f"\n{results_markdown(results)}\nResults in {output_dir}: glue_results.json, glue_results.md, runs/")


if __name__ == "__main__":
    main()
