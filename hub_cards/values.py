"""The values a release renders into cards, checked before anything is staged: every number of a glue_results.json
and of a trainer_state.json's log has its type and its range (finite, and a score within its metric's), and the GLUE
aggregates are the ones its scores give (a training_summary.json is checked as it is read: training/summary.py). A
bad value is one line naming the file, the field and what is allowed."""

import math
from pathlib import Path
from typing import Any

from ..cli import UserError
from ..training.glue_data import reported_scores
from ..training.glue_scoring import aggregate
from ..training.summary import boolean, is_integer, is_number, mapping, number, text
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
