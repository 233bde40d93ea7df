"""The GLUE sweep: one model fine-tuned and scored on tasks × seeds, restartable (a finished pair is reused while
the model, the protocol and the task data are the same), and the same suite on checkpoints along pre-training."""

import contextlib
import csv
import json
import logging
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, DatasetDict
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.utils.sha import sha_fileobj
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
    set_seed,
)

from ... import BERT_ATTENTION_TYPE
from ...cli import UserError, missing_local_path
from ...files import write_atomically
from ...json_files import load_json
from ..compat import warmup_ratio
from ..figures import new_figure, save_figure
from ..precision import precision_for
from .arguments import GlueArguments
from .data import TASKS, benchmark_name, data_sha256, glue_mean_tasks, hub_datasets, load_task, score_names
from .results import GlueResults
from .scoring import CORRELATIONS, baseline_scores, run_metrics, table, task_scores

SWEEP_FRACTION = 0.95


def precision(training_args: TrainingArguments) -> str:
    """The precision the pairs train in, "bf16", "fp16" or "fp32" (--bf16, --fp16), refused in one line where it would
    be another one (fp16 on a CPU trains in fp32; precision.precision_for)."""
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
    trust_remote_code: bool = False,
) -> dict[str, float]:
    """Fine-tune a fresh copy of the model on the task's train split with `seed`; the pair's metrics on its dev splits."""
    trainer = fine_tuned(model_name, revision, task, tokenized, tokenizer, seed, training_args, trust_remote_code)
    return dev_metrics(trainer, task, tokenized)


def fine_tuned(
    model_name: str,
    revision: str | None,
    task: str,
    tokenized: dict[str, Dataset],
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    training_args: TrainingArguments,
    trust_remote_code: bool = False,
) -> Trainer:
    """The Trainer of a fresh copy of the model fine-tuned on the task's train split with `seed`."""
    spec = TASKS[task]
    set_seed(seed)  # the classifier head is initialised here, before the Trainer seeds anything
    label_names = {} if spec.label_names is None else {"id2label": dict(enumerate(spec.label_names))}
    model = AutoModelForSequenceClassification.from_pretrained(
        model_name,
        revision=revision,
        trust_remote_code=trust_remote_code,  # SymBERT's classes are registered: its folders need no remote code
        num_labels=spec.num_labels,
        problem_type="regression" if spec.label_names is None else "single_label_classification",
        **label_names,
    ).float()  # the protocol's float32 weights (--bf16 autocasts), whatever dtype the checkpoint stores
    trainer = Trainer(
        model=model,
        args=replace(training_args, seed=seed),
        train_dataset=tokenized["train"],
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def dev_metrics(trainer: Trainer, task: str, tokenized: dict[str, Dataset]) -> dict[str, float]:
    """The task's metrics of the trainer's model on its dev splits."""
    spec = TASKS[task]
    per_split = {}
    for split in spec.eval_splits:
        output = trainer.predict(tokenized[split])
        logits = output.predictions
        predictions = logits.squeeze(-1) if spec.label_names is None else logits.argmax(-1)
        per_split[split] = (predictions, output.label_ids)
    return run_metrics(task, per_split)


# The suite: one model, tasks × seeds, restartable


def check_model(name: str, revision: str | None = None, trust_remote_code: bool = False) -> PretrainedConfig:
    """The model's config, or a clear error when `name` is neither a local model folder nor a loadable Hub model."""
    path = Path(name)
    if path.exists() and not (path / "config.json").is_file():
        raise UserError(f"Model folder {name!r} has no config.json: not a saved model.")
    missing = missing_local_path(name)
    if missing:
        raise missing
    try:
        return AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise UserError(
                f"Model {name!r} not found: not a local folder nor a loadable Hub model ({error})."
            ) from None
        raise UserError(
            f"Model {name!r} needs code of its own to load (its config maps its classes to code files, and its "
            "model_type is neither transformers' nor SymBERT's); nothing of it was run. Pass --trust_remote_code to "
            "run that code if you trust it."
        ) from None
    except OSError as error:
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


def run_file_problem(record: dict) -> str | None:
    """Why a finished pair's record cannot be reused (a hand-edited or damaged file): a task not in the table, a
    seed that is not an integer, or a metric that is not a finite number in its range."""
    task, seed, metrics = record["task"], record["seed"], record["metrics"]
    if task not in TASKS:
        return f"names task {task!r}, which is not in the task table"
    if not isinstance(seed, int) or isinstance(seed, bool):
        return f"has seed {seed!r}, not an integer"
    if not isinstance(metrics, dict):
        return "holds no metrics"
    for name, value in metrics.items():
        correlation = name.startswith(CORRELATIONS)  # mnli's keys name their split: accuracy_matched
        low, high = (-1.0 if correlation else 0.0), 1.0
        if name == "score":  # the pair's score, in percent
            low, high = -100.0, 100.0
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return f"has {name}={value!r}, not a finite number"
        if not low <= value <= high:
            return f"has {name}={value!r}, outside [{low:g}, {high:g}]"
    return None


def read_runs(output_dir: Path, model: dict, protocol: dict) -> dict[tuple[str, int], dict]:
    """The finished pairs under `output_dir/runs`: {(task, seed): record}; all must be of this model and protocol."""
    runs = {}
    for path in sorted((output_dir / "runs").glob("*/seed-*.json")):
        try:
            record = load_json(path)
            differences = mismatches(record["model"], record["protocol"], model, protocol)
            key = record["task"], record["seed"]
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as error:
            message = f"{path} is not a symbert-glue run file ({error!r}); remove it to rerun its pair."
            raise UserError(message) from None
        if problem := run_file_problem(record):
            raise UserError(f"{path} {problem}; remove it to rerun its pair.")
        if path.name != f"seed-{key[1]}.json" or path.parent.name != key[0]:  # a copy would count as another seed
            raise UserError(
                f"{path} records task {key[0]!r} seed {key[1]}, not the pair its name says (runs/<task>/seed-<seed>"
                ".json); remove it to rerun its pair."
            )
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
        # A filter, not the logger's level: transformers 5 runs its tensor-parallel plan check (and prints "The
        # following layers were not sharded: ...", over a thousand characters) whenever this logger's own level
        # is WARNING or above
        errors_only = logging.Filter()
        errors_only.filter = lambda record: record.levelno >= logging.ERROR
        if self.shown:
            logger.addFilter(errors_only)
        try:
            yield
        finally:
            logger.removeFilter(errors_only)
            self.shown = True


def trained_length(model_name: str) -> int | None:
    """The block length a local symbert-pretrain model (or a checkpoint of one) was trained on, from its
    training_summary.json; None where none is recorded."""
    for folder in (Path(model_name), Path(model_name).parent):
        try:
            length = json.loads((folder / "training_summary.json").read_text(encoding="utf-8")).get("max_seq_length")
        except (OSError, ValueError, AttributeError):
            continue
        return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None
    return None


def length_notice(model_name: str, task: str, tokenized: dict[str, Dataset], max_length: int) -> str | None:
    """One line, before training, where the task's examples reach positions the model was never trained on."""
    trained = trained_length(model_name)
    if trained is None or trained >= max_length:
        return None
    lengths = [len(ids) for split in tokenized.values() for ids in split["input_ids"]]
    longer = sum(length > trained for length in lengths) / max(1, len(lengths))
    if longer < 0.01:
        return None
    return (
        f"notice: {task}: {100 * longer:.0f}% of its examples are longer than the {trained}-token blocks "
        f"{Path(model_name).name} was pre-trained on, so they use position embeddings it never trained; "
        f"--max_length {trained} matches its training (now {max_length})."
    )


def run_suite(
    model_name: str,
    glue_args: GlueArguments,
    training_args: TrainingArguments,
    tasks: list[str],
    seeds: list[int],
    output_dir: str | Path,
) -> GlueResults:
    """Fine-tune and score `model_name` on tasks × seeds into `output_dir`; returns the results (glue_results.json)."""
    output_dir = Path(output_dir)
    config = check_model(model_name, glue_args.revision, glue_args.trust_remote_code)
    if glue_args.max_length > config.max_position_embeddings:
        raise UserError(
            f"max_length={glue_args.max_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}."
        )
    tokenizer = AutoTokenizer.from_pretrained(
        model_name, revision=glue_args.revision, trust_remote_code=glue_args.trust_remote_code
    )
    model = model_info(model_name, glue_args.revision, config)
    protocol = pair_protocol(glue_args, training_args)
    runs = read_runs(output_dir, model, protocol)
    load_report_once = LoadReportOnce()
    sha256 = {task: data_sha256(task, glue_args.data_dir) for task in tasks}
    for task in tasks:
        drop_stale(runs, task, seeds, sha256[task], protocol["data"])
    todo = {task: [seed for seed in seeds if (task, seed) not in runs] for task in tasks}
    data = {
        task: load_task(task, glue_args.data_dir, glue_args.skip_malformed_rows, max_length=glue_args.max_length)
        for task, left in todo.items()
        if left
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
        if notice := length_notice(model_name, task, tokenized, glue_args.max_length):
            print(notice)
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
                    glue_args.trust_remote_code,
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
                write_results(output_dir, GlueResults.build(model, protocol, runs, tasks, seeds))
    results = GlueResults.build(model, protocol, runs, tasks, seeds)
    if training_args.process_index == 0:
        write_results(output_dir, results)
    return results


def write_results(output_dir: Path, results: GlueResults) -> None:
    results.write(output_dir)
    write_atomically(output_dir / "glue_results.md", lambda file: file.write(results.markdown()))


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


def seed_averaged_score(results: GlueResults) -> float:
    """The sweep's score of one checkpoint: the GLUE mean when all its scores are there, otherwise the same mean
    (over seeds of the per-seed mean) over the scores that are (e.g. rte alone)."""
    glue_mean = score_names(glue_mean_only=True)
    scores = {name: by_seed for name, by_seed in results.scores.items() if name in glue_mean}
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
            means = {score: aggregate["mean"] for score, aggregate in results.task_aggregates.items()}
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
    all_paper_tasks = set(glue_mean_tasks()) <= set(tasks)
    plot_sweep(
        curves,
        output_dir / "glue_vs_step.png",
        f"{benchmark_name()} score" if all_paper_tasks else f"mean score of {', '.join(tasks)}",
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
        f"Score along pre-training (tasks {', '.join(tasks)}; {benchmark_name()} when all {len(glue_mean_tasks())} paper tasks are run, "
        "otherwise the "
        "mean of the scores run), mean over seeds.\n\n" + table(header, rows) + "\n"
    )


def plot_sweep(
    curves: dict[str, tuple[list[int], list[float]]], path: str | Path, score_name: str | None = None
) -> Path:
    """GLUE score against pre-training step, one line per model, with its 95%-of-final line and crossing step."""
    score_name = score_name or f"{benchmark_name()} score"
    fig, ax = new_figure(f"{score_name} (dev, %)", f"{benchmark_name()} along pre-training")
    for name, (steps, scores) in curves.items():
        (line,) = ax.plot(steps, scores, marker="o", label=name)
        target = SWEEP_FRACTION * scores[-1]
        ax.axhline(target, color=line.get_color(), linestyle="--", linewidth=1, label=f"{SWEEP_FRACTION:.0%} of {name}")
        crossing = crossing_step(steps, scores)
        if crossing is not None:
            ax.axvline(crossing, color=line.get_color(), linestyle=":", linewidth=1)
    ax.legend()
    return save_figure(fig, path)
