"""The values a release renders into cards, checked before anything is staged: every number of a glue_results.json
and of a training_summary.json has its type and its range (finite, and a score within its metric's), and the GLUE
aggregates are the ones its scores give. A bad value is one line naming the file, the field and what is allowed."""

import math
from pathlib import Path
from typing import Any

from ..cli import UserError
from ..training.glue_data import reported_scores
from ..training.glue_scoring import aggregate
from .card import paper_protocol

CORRELATIONS = {"matthews_correlation", "pearson", "spearmanr"}  # in [-1, 1]; every other metric in [0, 1]


def score_ranges() -> dict[str, tuple[float, float]]:
    """{score name: (low, high)} in percent for every score of the task table (read when a file is checked, so a row
    added to the table is checked too): accuracy and F1 in [0, 100], Matthews and Pearson/Spearman in [-100, 100]."""
    return {
        score.name: (-100.0, 100.0) if set(task.metric.names) <= CORRELATIONS else (0.0, 100.0)
        for _, task, score in reported_scores()
    }


GLUE_RANGE = (-100.0, 100.0)  # a mean of scores, one of them (CoLA's) a correlation
TOLERANCE = 1e-6  # percent: how far a stored aggregate may be from the one its scores give (float rounding)


def is_number(value: Any) -> bool:
    """A JSON number: an int or a float, never a bool (True is an int in Python) nor a string."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(path: Path, field: str, value: Any, low: float, high: float = math.inf, integer: bool = False) -> Any:
    """`value`, refused unless it is a finite number (an integer with `integer`) in [low, high]."""
    kind = "an integer" if integer else "a finite number"
    bounds = f"in [{low:g}, {high:g}]" if high != math.inf else f">= {low:g}"
    ok = (is_integer(value) if integer else is_number(value)) and math.isfinite(value) and low <= value <= high
    if not ok:
        raise UserError(f"{path}: {field}={value!r} is not {kind} {bounds}.")
    return value


def text(path: Path, field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{path}: {field}={value!r} is not a non-empty string.")
    return value


def boolean(path: Path, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{path}: {field}={value!r} is not true or false.")
    return value


def mapping(path: Path, field: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{path}: {field} is a JSON {type(value).__name__}, not an object.")
    return value


def check_results(path: Path, results: dict) -> None:
    """Refuse a glue_results.json whose scores, aggregates or protocol seeds the card could not show as measured:
    scores that are not finite numbers in their metric's range, per seed; aggregates other than those the scores give
    (training/glue_scoring.py's `aggregate`)."""
    scores = mapping(path, "scores", results["scores"])
    ranges = score_ranges()
    protocol = mapping(path, "protocol", results.get("protocol"))
    seeds = protocol.get("seeds")
    if not isinstance(seeds, list) or not all(is_integer(seed) for seed in seeds):
        raise UserError(f"{path}: protocol.seeds={seeds!r} is not a list of integers.")
    for name, by_seed in scores.items():
        if name not in ranges:
            raise UserError(
                f"{path}: scores has {name!r}, which is not a score of the task table ({', '.join(ranges)})."
            )
        for seed, value in mapping(path, f"scores.{name}", by_seed).items():
            number(path, f"scores.{name}.{seed}", value, *ranges[name])
    tasks = mapping(path, "aggregates.tasks", results["aggregates"]["tasks"])
    glue = mapping(path, "aggregates.glue", results["aggregates"]["glue"])
    for name, task in tasks.items():
        if name not in scores:
            raise UserError(f"{path}: aggregates.tasks has {name!r}, which has no scores.")
        mapping(path, f"aggregates.tasks.{name}", task)
        number(path, f"aggregates.tasks.{name}.mean", task.get("mean"), *ranges[name])
        number(path, f"aggregates.tasks.{name}.std", task.get("std"), 0.0)
        number(path, f"aggregates.tasks.{name}.n", task.get("n"), 1, integer=True)
    boolean(path, "aggregates.glue.complete", glue.get("complete"))
    number(path, "aggregates.glue.n_seeds", glue.get("n_seeds"), 0, integer=True)
    if glue["complete"]:
        number(path, "aggregates.glue.mean", glue.get("mean"), *GLUE_RANGE)
        number(path, "aggregates.glue.std", glue.get("std"), 0.0)
    for key, paper in paper_protocol().items():  # the numbers the card's protocol line compares with the paper's
        value = protocol.get(key)
        if value is None or key == "seeds":
            continue
        if is_number(paper) and not (is_number(value) and math.isfinite(value)):
            raise UserError(f"{path}: protocol.{key}={value!r} is not a finite number (the paper's: {paper!r}).")
    created = results.get("created")
    if created is not None:
        text(path, "created", created)
    expected = aggregate({name: {str(s): v for s, v in by_seed.items()} for name, by_seed in scores.items()}, seeds)
    for name, task in expected["tasks"].items():
        for key in ("mean", "std", "n"):
            differs(path, f"aggregates.tasks.{name}.{key}", tasks.get(name, {}).get(key), task[key])
    for key in ("complete", "n_seeds", "mean", "std"):
        differs(path, f"aggregates.glue.{key}", glue.get(key), expected["glue"][key])


def differs(path: Path, field: str, stored: Any, expected: Any) -> None:
    """Refuse a stored aggregate other than the one the scores give."""
    same = (
        math.isclose(stored, expected, rel_tol=0.0, abs_tol=TOLERANCE)
        if is_number(stored) and is_number(expected)
        else stored == expected and type(stored) is type(expected)
    )
    if not same:
        raise UserError(
            f"{path}: {field}={stored!r} is not what its scores give ({expected!r}, as symbert-glue computes it)."
        )


SUMMARY_INTEGERS = (  # (key, minimum): counts the card renders
    ("steps", 1),
    ("global_batch_size", 1),
    ("max_seq_length", 1),
    ("per_device_train_batch_size", 1),
    ("gradient_accumulation_steps", 1),
)
OPTIONAL_INTEGERS = (("world_size", 1), ("parameters", 1))


def check_log_history(path: Path, log_history: Any) -> list:
    """The Trainer's log of a trainer_state.json, refused unless a list of objects whose steps, eval losses and
    runtimes (what cards show) are numbers in range."""
    if not isinstance(log_history, list) or not all(isinstance(entry, dict) for entry in log_history):
        raise UserError(f"{path}: log_history is not a list of objects.")
    for i, entry in enumerate(log_history):
        if "step" in entry:
            number(path, f"log_history[{i}].step", entry["step"], 0, integer=True)
        for key in ("eval_loss", "train_runtime"):
            if key in entry:
                number(path, f"log_history[{i}].{key}", entry[key], 0.0)
    return log_history


def check_summary(path: Path, summary: dict) -> None:
    """Refuse a training_summary.json whose values the card could not show as measured: counts that are not positive
    integers, a size that is not a name, losses, runtimes and training arguments of the wrong type or range."""
    if "size" in summary:
        text(path, "size", summary["size"])
    for key, low in SUMMARY_INTEGERS:
        number(path, key, summary[key], low, integer=True)
    for key, low in OPTIONAL_INTEGERS:
        if key in summary:
            number(path, key, summary[key], low, integer=True)
    expected = summary["per_device_train_batch_size"] * summary["gradient_accumulation_steps"]
    expected *= summary.get("world_size", 1)
    if summary["global_batch_size"] != expected:
        raise UserError(
            f"{path}: global_batch_size={summary['global_batch_size']!r} is not per_device_train_batch_size × "
            f"gradient_accumulation_steps × world_size ({expected})."
        )
    number(path, "final_eval_loss", summary["final_eval_loss"], 0.0)
    if summary.get("train_runtime") is not None:
        number(path, "train_runtime", summary["train_runtime"], 0.0)
    for key in ("hardware", "attention_type"):
        if summary.get(key) is not None:
            text(path, key, summary[key])
    arguments = summary["training_arguments"]
    for key, low, high in (
        ("learning_rate", 0.0, math.inf),
        ("weight_decay", 0.0, math.inf),
        ("adam_beta1", 0.0, 1.0),
        ("adam_beta2", 0.0, 1.0),
        ("adam_epsilon", 0.0, math.inf),
        ("warmup_steps", 0.0, math.inf),
    ):
        number(path, f"training_arguments.{key}", arguments[key], low, high)
    number(path, "training_arguments.seed", arguments["seed"], 0, integer=True)
    text(path, "training_arguments.lr_scheduler_type", arguments["lr_scheduler_type"])
    for key in ("bf16", "fp16", "use_cpu"):
        boolean(path, f"training_arguments.{key}", arguments[key])
    if summary.get("data_arguments") is not None:
        mapping(path, "data_arguments", summary["data_arguments"])
