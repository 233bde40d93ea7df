"""GLUE scoring: a pair's metrics and scores, the baselines of a predictor that learned nothing and the "did not
learn" flag, and the aggregates over seeds (the GLUE score) that the results file (training/glue/results.py) holds."""

import statistics
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from .data import TASKS, benchmark_name, score_names

# Scoring: the spec's formulas on scikit-learn's and scipy's metrics. Metrics are fractions, scores percent.


def correlation(function: Callable) -> Callable[[ArrayLike, ArrayLike], float]:
    """scipy's correlation as a metric(labels, predictions). Constant predictions have no correlation: 0, as
    scikit-learn's Matthews gives, instead of scipy's NaN."""
    return lambda labels, predictions: np.nan_to_num(function(predictions, labels)[0])


METRICS = {  # the raw metrics a task's Metric names (data.py) -> metric(labels, predictions)
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
    """{"majority": metrics, "chance": metrics} on one dev split's gold labels: the task's metrics of the best
    constant prediction (always the class that scores best: for accuracy the most frequent one), and the expected metrics of predicting classes uniformly at random (accuracy
    1/k; F1 of the positive class 2·p·(1/k) / (p + 1/k), p its share of the labels; Matthews 0). For a regression
    (stsb) a constant prediction and a random one both have correlation 0."""
    spec = TASKS[task]
    names = spec.metric.names
    if spec.label_names is None:
        return {"majority": dict.fromkeys(names, 0.0), "chance": dict.fromkeys(names, 0.0)}
    labels = np.asarray(labels)
    # the best constant prediction: the majority class for accuracy, but for F1 of the positive class always
    # predicting it can beat the majority (SpamAssassin: always spam 56.75 against always ham 25.83)
    constants = [split_metrics(task, np.full(len(labels), value), labels) for value in range(spec.num_labels)]
    majority = max(constants, key=lambda metrics: statistics.fmean(metrics.values()))
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


DEV_EXAMPLES_MAX = 1_000_000  # the most dev examples a recorded baseline is checked for (GLUE's largest: 40,430)


def possible_baseline(task: str, name: str, baseline: dict) -> dict[str, float]:
    """The majority, chance and standard error (`baseline_scores`' entry) of the score `name` on a dev set of
    baseline["n"] labels that gives `baseline`'s numbers if any dev set does: the labels are rebuilt from what
    determines them (accuracy: the majority class's share; accuracy and F1: the positive class's share, from the
    chance F1; a correlation's baselines depend on no label). A recorded baseline other than these is no dev set's."""
    spec, n = TASKS[task], baseline["n"]
    if spec.label_names is None or set(spec.metric.names) <= set(CORRELATIONS):
        labels = np.arange(n) % 2
    else:
        uniform, share = 1 / spec.num_labels, baseline["majority"] / 100
        if "f1" in spec.metric.names:  # chance = mean(1/k, 2·p·(1/k) / (p + 1/k)): p from the chance F1
            f1 = 2 * baseline["chance"] / 100 - uniform
            share = min(max(f1 * uniform / (2 * uniform - f1), 0.0), 1.0) if f1 < 2 * uniform else 1.0
            labels = (np.arange(n) < round(share * n)).astype(int)
        else:  # the majority class 0, the rest spread over the others
            count = min(max(round(share * n), 0), n)
            labels = np.concatenate([np.zeros(count, int), 1 + np.arange(n - count) % (spec.num_labels - 1)])
    return baseline_scores(task, dict.fromkeys(spec.eval_splits, labels))[name]


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
        raise ValueError(f"The {benchmark_name()} score needs all {len(names)} scores; missing: {', '.join(missing)}.")
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


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the first column left-aligned, the numbers right-aligned."""
    alignment = ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join("| " + " | ".join(row) + " |" for row in [header, alignment, *rows])
