"""The GLUE results as the Hub reads them, written twice with huggingface_hub's own classes: as
`.eval_results/glue.yaml` (`EvalResultEntry`, the Hub's current format, shown on the model page and the benchmark's
leaderboard) and as the card's `model-index` (`EvalResult`, the legacy format older tools read). Both only for scores
on the Hub's GLUE datasets."""

import re
from pathlib import Path

import huggingface_hub
import yaml
from huggingface_hub import EvalResult
from huggingface_hub.utils import yaml_dump

from ..training.glue.data import benchmark_name, glue_mean_tasks, hub_config, hub_datasets, reported_scores, score_names
from ..training.glue.results import GlueResults
from .hub_compat import EvalResultEntry, eval_result_entries_to_yaml, parse_eval_result_entries

EVAL_RESULTS_FILE = ".eval_results/glue.yaml"
EVAL_RESULTS_NOTICE = (
    f"notice: huggingface_hub {huggingface_hub.__version__} has no EvalResultEntry, so GLUE results on the Hub's GLUE "
    "data are staged in the card's model-index only, without .eval_results/glue.yaml (a newer huggingface_hub writes both)."
)


def mean_score_id() -> str:
    """The .eval_results task id and model-index metric type of the mean score: "glue_score" for GLUE (no config of
    a benchmark's dataset is named so)."""
    return re.sub(r"\W+", "_", benchmark_name().lower()) + "_score"


def scored_on_hub(results: GlueResults) -> bool:
    """Whether a glue_results.json's scores are on the Hub's GLUE datasets: its protocol's `data` names them (symbert-glue
    records a local --data_dir as its absolute path). A file that records no data claims nothing."""
    return results.data == hub_datasets()


def glue_eval_results(results: GlueResults) -> list[EvalResult]:
    """`EvalResult`s for the model-index: each GLUE task score present in a glue_results.json (mean over seeds, in
    percent, on the task's Hub dataset's validation split) and, when all GLUE-mean scores are there for every seed, the
    GLUE score. None when the scores are not on the Hub's GLUE data (`scored_on_hub`): the model-index names a Hub
    dataset, and other data under its name would be a leaderboard entry for what was not measured."""
    if not scored_on_hub(results):
        return []
    eval_results = []
    for config, spec, score in reported_scores(glue_mean_only=True):  # the task table (training/glue/data.py)
        task = results.task_aggregates.get(score.name)
        if task is None or task.get("mean") is None:
            continue
        eval_results.append(
            EvalResult(
                task_type="text-classification",
                task_name=spec.benchmark,
                dataset_type=spec.hub_dataset,
                dataset_name=f"{spec.benchmark} {score.display}",
                dataset_config=hub_config(config),
                dataset_split=score.split,
                metric_type=spec.metric.hub_type,
                metric_name=f"{score.display} {spec.metric.description} (mean of {task['n']} seeds)",
                metric_value=round(task["mean"], 2),
            )
        )
    glue = results.glue
    if glue.get("complete") and glue.get("mean") is not None:
        eval_results.append(
            EvalResult(
                task_type="text-classification",
                task_name=benchmark_name(),
                dataset_type=hub_datasets(glue_mean_tasks()),
                dataset_name=benchmark_name(),
                dataset_split="validation",
                metric_type=mean_score_id(),
                metric_name=f"{benchmark_name()} score: mean of the {len(score_names(glue_mean_only=True))} task scores (mean of "
                f"{glue['n_seeds']} seeds)",
                metric_value=round(glue["mean"], 2),
            )
        )
    return eval_results


def task_id(config: str, split: str) -> str:
    """The .eval_results task id of a GLUE score: its nyu-mll/glue config (mnli_matched / mnli_mismatched for MNLI's
    two validation sets, which are configs of their own there)."""
    return f"{config}_{split.removeprefix('validation_')}" if split != "validation" else config


def glue_eval_entries(results: GlueResults) -> list:
    """`EvalResultEntry`s for .eval_results/glue.yaml: the same numbers as `glue_eval_results`, one entry per task
    score and one for the GLUE score (task id "glue_score"); the format has no metric field, so `notes` names it."""
    if EvalResultEntry is None or not scored_on_hub(results):  # see glue_eval_results
        return []
    date = results.created
    entries = []
    for config, spec, score in reported_scores(glue_mean_only=True):
        task = results.task_aggregates.get(score.name)
        if task is None or task.get("mean") is None:
            continue
        what = f"{score.display} {spec.metric.description}"
        notes = f"{what} in percent on the {score.split} split, mean of {task['n']} seeds"
        entries.append(
            EvalResultEntry(
                spec.hub_dataset,
                task_id(hub_config(config), score.split),
                round(task["mean"], 2),
                date=date,
                notes=notes,
            )
        )
    glue_score = results.glue
    if glue_score.get("complete") and glue_score.get("mean") is not None:
        notes = (
            f"{benchmark_name()} score: mean of the {len(score_names(glue_mean_only=True))} task scores in percent on the "
            "validation "
            f"splits, mean of {glue_score['n_seeds']} seeds"
        )
        entries.append(
            EvalResultEntry(
                hub_datasets(glue_mean_tasks()), mean_score_id(), round(glue_score["mean"], 2), date=date, notes=notes
            )
        )
    return entries


def eval_results_yaml(entries: list) -> str:
    """The text of an .eval_results/*.yaml file, serialised by huggingface_hub."""
    return yaml_dump(eval_result_entries_to_yaml(entries), sort_keys=False)


def read_eval_results(path: str | Path) -> list:
    """The `EvalResultEntry`s of an .eval_results/*.yaml file, parsed by huggingface_hub."""
    if parse_eval_result_entries is None:
        raise ValueError(f"huggingface_hub {huggingface_hub.__version__} cannot read {path} (no EvalResultEntry)")
    return parse_eval_result_entries(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
