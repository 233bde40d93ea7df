"""glue_results.json: what symbert-glue measured of one model on GLUE (schema: docs/glue-results.md). symbert-glue
builds it from the finished pairs and writes it (with glue_results.md) after every pair; the release reads it back,
every value checked, and publishes it. A bad value is one line naming the file, the field and what is allowed. Here
too: the paper's GLUE protocol, which symbert-glue's defaults are and the card compares a run's protocol with."""

import json
import math
import re
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, ClassVar

from transformers import TrainingArguments

from ...cli import UserError
from ...files import write_atomically
from ...json_files import NAME, boolean, is_integer, is_number, mapping, number, plain_text, read_json, text
from .data import (
    TASKS,
    benchmark_name,
    glue_mean_tasks,
    hub_datasets,
    reported_scores,
    score_names,
    score_task,
)
from .scoring import (
    CORRELATIONS,
    DEV_EXAMPLES_MAX,
    NOISE_STANDARD_ERRORS,
    aggregate,
    learning_verdict,
    possible_baseline,
    table,
    task_scores,
)

FILE_NAME = "glue_results.json"
SCHEMA_VERSION = 1

# The paper's protocol: symbert-glue's defaults (training/glue/command.py), and what the card names a run's deviations from
PAPER_TASKS = glue_mean_tasks()  # the tasks of the GLUE score: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte
PAPER_SEEDS = (1, 2, 3, 4, 5)
PAPER_MAX_LENGTH = 128  # tokens per example
PAPER_PROTOCOL = {  # in TrainingArguments' names
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


def paper_protocol() -> dict:
    """The paper's GLUE protocol in the names of a results file's "protocol" (training/glue/sweep.py's `pair_protocol`):
    PAPER_PROTOCOL over TrainingArguments' defaults, symbert-glue's own defaults, one process, the Hub's GLUE data."""
    settings = {**{f.name: f.default for f in fields(TrainingArguments)}, **PAPER_PROTOCOL}
    return {
        "epochs": settings["num_train_epochs"],
        "max_steps": settings["max_steps"],
        "learning_rate": settings["learning_rate"],
        "lr_scheduler_type": settings["lr_scheduler_type"],
        "warmup_ratio": PAPER_PROTOCOL["warmup_steps"],  # below 1: a ratio
        "warmup_steps": None,
        "per_device_train_batch_size": settings["per_device_train_batch_size"],
        "gradient_accumulation_steps": settings["gradient_accumulation_steps"],
        "world_size": 1,
        "max_length": PAPER_MAX_LENGTH,
        "weight_decay": settings["weight_decay"],
        "data": hub_datasets(PAPER_TASKS),
        "seeds": list(PAPER_SEEDS),
        "tasks": list(PAPER_TASKS),
    }


# what a baseline's protocol may differ in from the model's: where its data were read from
BASELINE_FREE_PROTOCOL_KEYS = ("data",)


def protocol_differences(protocol: dict, other: dict) -> list[str]:
    """The protocol keys (`key=other's value`) on which two GLUE results were not fine-tuned alike; where their data
    were read from and which tasks they list are no difference."""
    keys = sorted({*protocol, *other} - {*BASELINE_FREE_PROTOCOL_KEYS, "tasks"})
    return [f"{key}={other.get(key)!r}" for key in keys if protocol.get(key) != other.get(key)]


@dataclass(frozen=True, kw_only=True)
class GlueResults:
    """The results of one model, field for field as glue_results.json holds them (in this order). The fields with a
    default are those that older or hand-made files may lack."""

    FILE_NAME: ClassVar[str] = FILE_NAME
    VERSION: ClassVar[int] = SCHEMA_VERSION

    schema_version: int = SCHEMA_VERSION
    model: dict  # name_or_path, revision, weights_sha256, attention_type, num_parameters
    protocol: dict  # what every pair was fine-tuned with, its seeds and tasks (pair_protocol)
    data_sha256: dict | None = None  # task -> the sha256 of the data its pairs were scored on
    runs: dict | None = None  # task -> seed -> raw metrics
    scores: dict  # score name -> seed -> percent
    aggregates: dict  # {"tasks": score name -> mean, std, n, baseline; "glue": the GLUE score over seeds}
    created: str | None = None
    library_versions: dict | None = None

    @classmethod
    def build(
        cls, model: dict, protocol: dict, runs: dict[tuple[str, int], dict], tasks: list[str], seeds: list[int]
    ) -> "GlueResults":
        """The results of the finished pairs ({(task, seed): run file record}: this command's and earlier ones' in
        the same folder)."""
        tasks = list(dict.fromkeys([*tasks, *(task for task, _ in runs)]))
        seeds = sorted({*seeds, *(seed for _, seed in runs)})
        metrics, scores, baselines = {}, {}, {}
        for (task, seed), record in sorted(runs.items(), key=lambda item: (tasks.index(item[0][0]), item[0][1])):
            metrics.setdefault(task, {})[str(seed)] = record["metrics"]
            baselines.update(record.get("baselines") or {})  # the same dev set (data_sha256) for every seed
            for name, value in task_scores(task, record["metrics"]).items():
                scores.setdefault(name, {})[str(seed)] = value
        return cls(
            model=model,
            protocol={**protocol, "seeds": seeds, "tasks": tasks},
            data_sha256={task: record.get("data_sha256") for (task, _), record in runs.items()},
            runs=metrics,
            scores=scores,
            aggregates=aggregate(scores, seeds, baselines),
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            library_versions={package: package_version(package) for package in ("symbert", "transformers", "torch")},
        )

    @classmethod
    def from_dict(cls, data: dict) -> "GlueResults":
        """`data`, a glue_results.json's object or the part of one its reader needs, unchecked (the fields it lacks
        empty): for results read as they are, e.g. a benchmark table's rows. The release reads with `read`."""
        names = {field.name for field in fields(cls)}
        empty = {key: {} for key in ("model", "protocol", "scores", "aggregates")}
        return cls(**{**empty, **{key: value for key, value in data.items() if key in names}})

    def to_json(self) -> dict:
        """The file's JSON object."""
        return asdict(self)

    def write(self, folder: str | Path) -> Path:
        """Writes FOLDER/glue_results.json atomically; returns its path."""
        path = Path(folder) / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        content = json.dumps(self.to_json(), indent=2) + "\n"
        write_atomically(path, lambda file: file.write(content))
        return path

    @classmethod
    def read(cls, path: str | Path, skip_unmatchable: bool = False) -> "GlueResults | None":
        """The results file at `path`, every value checked (`from_json`); a file that is not a regular file, not
        JSON (or gives a key twice in one object) or not GLUE results is a UserError naming it."""
        return cls.from_json(Path(path), read_json(path), skip_unmatchable)

    @classmethod
    def from_json(cls, path: Path, data: Any, skip_unmatchable: bool = False) -> "GlueResults | None":
        """The results `data` read from `path`, refused unless of this schema with a sha256 of the weights, and every
        value one a card can show as measured (`check_values`). With `skip_unmatchable`, results measured on weights
        no model.safetensors can match (sharded or .bin: weights_sha256 null) are None instead of refused."""
        sha = results_structure(path, data)["model"]["weights_sha256"]
        if sha is None and skip_unmatchable:
            return None
        if not isinstance(sha, str) or len(sha) != 64:
            raise UserError(f"{path}: model.weights_sha256={sha!r} is not a sha256 hex digest.")
        check_values(path, data)
        return cls.from_dict(data)

    @classmethod
    def read_scores(cls, path: str | Path) -> "GlueResults":
        """The results file at `path` with every value checked as `read` checks them (its scores, aggregates,
        baselines, protocol and data hashes), whatever weights it was measured on: for a table of scores beside
        others, where the weights are not published."""
        data = read_json(path)
        check_values(Path(path), results_structure(Path(path), data))
        return cls.from_dict(data)

    def score_data_sha256(self, name: str) -> str | None:
        """The sha256 of the data the score `name` was scored on: its task's "data_sha256" entry (mnli-m: mnli's)."""
        return (self.data_sha256 or {}).get(score_task(name))

    @property
    def task_aggregates(self) -> dict:
        """{score name: {"mean", "std", "n", "baseline"}}: each score over its seeds."""
        return self.aggregates["tasks"]

    @property
    def glue(self) -> dict:
        """The GLUE score over seeds: "mean", "std", "per_seed", "n_seeds", "complete"."""
        return self.aggregates["glue"]

    @property
    def seeds(self) -> list[int]:
        return self.protocol.get("seeds", [])

    @property
    def data(self) -> str | None:
        """Where the tasks' data were read from: the Hub's datasets, or a local folder's absolute path."""
        return self.protocol.get("data")

    @property
    def weights_sha256(self) -> str | None:
        return self.model["weights_sha256"]

    @property
    def run_count(self) -> int:
        """How many (score, seed) the file holds."""
        return sum(len(by_seed) for by_seed in self.scores.values())

    def markdown(self) -> str:
        """glue_results.md: the paper's Table 3 layout (mean (sample std) over seeds), then every seed's scores."""
        scores, aggregates, seeds = self.scores, self.aggregates, self.protocol["seeds"]
        glue = aggregates["glue"]
        names = [name for name in score_names(glue_mean_only=True) if name in scores]
        extra = [name for name in score_names() if name in scores and name not in names]  # wnli: never in GLUE
        benchmark = benchmark_name()
        header = [*names, benchmark, *(f"{name} (not in {benchmark})" for name in extra)]

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
                    f"# {benchmark}: {self.model['name_or_path']}",
                    "",
                    f"Dev-set scores in percent, mean (sample std) over seeds {', '.join(map(str, seeds))}. {benchmark} is the mean of "
                    f"the {len(score_names(glue_mean_only=True))} scores {', '.join(score_names(glue_mean_only=True))}; its std is the sample std of the per-seed "
                    f"{benchmark} scores.",
                    "",
                    table(
                        ["model", *header],
                        [[self.model["name_or_path"], *map(summary, names), glue_cell, *map(summary, extra)]],
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


def results_structure(path: Path, data: Any) -> dict:
    """`data`, refused in one line unless a results file of this schema: the keys every reader reads (the model's
    weights hash, the scores, the aggregates of the tasks and of the GLUE score)."""
    try:
        data["model"]["weights_sha256"], data["scores"], data["aggregates"]["tasks"], data["aggregates"]["glue"]  # noqa: B018
    except (KeyError, TypeError) as error:
        raise UserError(f"{path} is not a GLUE results file ({type(error).__name__}: {error}).") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(
            f"{path} has schema_version={data.get('schema_version')!r}; this release tool reads {SCHEMA_VERSION}."
        )
    return data


def package_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


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
        "Baselines on the same dev sets: the majority class (the best constant prediction: for accuracy the most frequent label) and chance "
        "(the expected score of uniformly random predictions; 0 for correlations). A score is flagged **did not "
        f"learn** when its mean is at most the margin above the better baseline: {NOISE_STANDARD_ERRORS} standard "
        "errors, the larger of the dev-set measurement's (a proportion's for accuracy and F1, 1/√n for a "
        "correlation) and the seeds' std.",
        "",
        table(["score", "mean", "majority", "chance", "margin", "dev examples", "verdict"], rows),
    ]


# The checks on read: every value a card shows, of its type and in its range, and the aggregates the scores give


def check_values(path: Path, results: dict) -> None:
    """Refuse results a card could not show as measured, in one line naming the field and what is allowed: a seed
    or task listed twice (first: a seed run twice would make the aggregates look wrong instead), then the scores and
    aggregates (`check_scores`), then the rest a card shows (`check_shown`)."""
    check_listed_once(path, results)
    check_scores(path, results)
    check_shown(path, results)


def score_ranges() -> dict[str, tuple[float, float]]:
    """{score name: (low, high)} in percent for every score of the task table (read when a file is checked, so a row
    added to the table is checked too): accuracy and F1 in [0, 100], Matthews and Pearson/Spearman in [-100, 100]."""
    return {
        score.name: (-100.0, 100.0) if set(task.metric.names) <= set(CORRELATIONS) else (0.0, 100.0)
        for _, task, score in reported_scores()
    }


GLUE_RANGE = (-100.0, 100.0)  # a mean of scores, one of them (CoLA's) a correlation
TOLERANCE = 1e-6  # percent: how far a stored aggregate may be from the one its scores give (float rounding)


def check_scores(path: Path, results: dict) -> None:
    """Refuse a glue_results.json whose scores, aggregates or protocol seeds the card could not show as measured:
    scores that are not finite numbers in their metric's range, per seed; aggregates other than those the scores give
    (training/glue/scoring.py's `aggregate`)."""
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


HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
# protocol.data as symbert-glue records it (training/glue/sweep.py): the Hub datasets read ("nyu-mll/glue"), or a
# --data_dir's absolute path, which a release stages as its last part; never a URL or a relative path
HUB_ID = r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*"
DATA_SOURCE = re.compile(rf"{HUB_ID}(, {HUB_ID})*|(/[\w .,;+=@~()'-]+)+/?|\w[\w .,;+=@~()'-]*")
# The ranges of the protocol's numbers the card shows (symbert-glue's pair_protocol): (low, high, low excluded,
# integer); None is a value the protocol may record (max_steps -1: none; warmup_steps None: a ratio)
PROTOCOL_RANGES = {
    "epochs": (0.0, math.inf, True, False),
    "max_steps": (-1, math.inf, False, True),
    "learning_rate": (0.0, math.inf, True, False),
    "warmup_ratio": (0.0, 1.0, False, False),
    "warmup_steps": (0, math.inf, False, True),
    "per_device_train_batch_size": (1, math.inf, False, True),
    "gradient_accumulation_steps": (1, math.inf, False, True),
    "world_size": (1, math.inf, False, True),
    "max_length": (1, math.inf, False, True),
    "weight_decay": (0.0, math.inf, False, False),
}
PROTOCOL_NAMES = ("lr_scheduler_type", "precision")


def in_range(path: Path, field: str, value: Any, low: float, high: float, low_excluded: bool, integer: bool) -> None:
    """Refuse `value` unless a finite number (an integer with `integer`) in its range, the range named."""
    kind = "an integer" if integer else "a finite number"
    bounds = f"> {low:g}" if low_excluded else f">= {low:g}"
    bounds += f" and <= {high:g}" if high != math.inf else ""
    ok = (is_integer(value) if integer else is_number(value)) and math.isfinite(value) and low <= value <= high
    if not ok or (low_excluded and value == low):
        raise UserError(f"{path}: {field}={value!r} is not {kind} {bounds}.")


def check_listed_once(path: Path, results: dict) -> None:
    """Refuse a protocol listing a seed or a task twice, or a task outside the task table, before the aggregates are
    checked (a seed run twice would make them look wrong instead)."""
    protocol = mapping(path, "protocol", results.get("protocol"))
    seeds = protocol.get("seeds")
    if isinstance(seeds, list) and all(map(is_integer, seeds)) and len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: protocol.seeds={seeds!r} lists a seed twice; each seed is run once.")
    tasks = protocol.get("tasks", [])
    if not isinstance(tasks, list) or any(not isinstance(task, str) or task not in TASKS for task in tasks):
        raise UserError(
            f"{path}: protocol.tasks={tasks!r} is not a list of tasks of the task table ({', '.join(TASKS)})."
        )
    if len(set(tasks)) != len(tasks):
        twice = next(task for task in tasks if tasks.count(task) > 1)
        raise UserError(f"{path}: protocol.tasks={tasks!r} lists {twice!r} twice; each task is listed once.")


def check_shown(path: Path, results: dict) -> None:
    """What `check_scores` leaves to check of what a card shows, refused in one line naming the field and what is
    allowed: the protocol's numbers out of their range (a learning rate <= 0, a batch of 0, ...), its names and texts
    that are not plain (HTML or Markdown would reach the card), scores of seeds the protocol does not list, per-run
    metrics out of their range or other than the scores (`runs`), baselines and per-seed GLUE scores other than the
    scores give, and data hashes that are not sha256 digests."""
    protocol, scores = results["protocol"], results["scores"]
    for key, value in protocol.items():
        if not NAME.fullmatch(key):
            raise UserError(f"{path}: protocol has the key {key!r}, which is not a name: letters, digits, _ . - only.")
        if key in PROTOCOL_RANGES and value is not None:
            in_range(path, f"protocol.{key}", value, *PROTOCOL_RANGES[key])
        elif key in PROTOCOL_NAMES and value is not None:
            plain_text(path, f"protocol.{key}", value, NAME, "a name of letters, digits, _ . -")
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            where = f"protocol.{key}" + (f"[{i}]" if isinstance(value, list) else "")
            if isinstance(item, str):
                plain_text(path, where, item)
            elif item is not None and not isinstance(item, (bool, int, float)):
                raise UserError(f"{path}: {where}={item!r} is not a number, name or list of them.")
    if protocol.get("learning_rate") is None:
        raise UserError(f"{path}: protocol.learning_rate is missing: the card shows the learning rate it ran with.")
    if protocol.get("data") is not None and not DATA_SOURCE.fullmatch(protocol["data"]):
        raise UserError(
            f"{path}: protocol.data={protocol['data']!r} is not where symbert-glue reads data from: Hub datasets "
            "(namespace/name, comma-separated), a local --data_dir's absolute path, or (staged) its name; no URL."
        )
    seeds = protocol["seeds"]
    names = {str(seed) for seed in seeds}
    check_runs(path, results)
    listed = [("scores", name, by_seed, score_task(name)) for name, by_seed in scores.items()]
    listed += [("runs", task, by_seed, task) for task, by_seed in (results.get("runs") or {}).items()]
    for key, name, by_seed, task in listed:
        if unknown := sorted(set(by_seed) - names):
            raise UserError(
                f"{path}: {key}.{name} has seed(s) {', '.join(map(repr, unknown))}, which protocol.seeds "
                f"({seeds!r}) does not list: the card says which seeds its scores are over."
            )
        if "tasks" in protocol and task not in protocol["tasks"]:
            raise UserError(
                f"{path}: {key} has {name!r}, of the task {task!r}, which protocol.tasks ({protocol['tasks']!r}) "
                "does not list: the card says which tasks were run."
            )
    expected = aggregate(scores, seeds)["glue"]
    stored = results["aggregates"]["glue"]
    if "per_seed" in stored:
        per_seed = mapping(path, "aggregates.glue.per_seed", stored["per_seed"])
        if per_seed.keys() != expected["per_seed"].keys():
            differs(path, "aggregates.glue.per_seed", per_seed, expected["per_seed"])
        for seed, value in expected["per_seed"].items():
            differs(path, f"aggregates.glue.per_seed.{seed}", per_seed[seed], value)
    ranges = score_ranges()
    for name, task in results["aggregates"]["tasks"].items():
        if task.get("baseline") is None:
            continue  # results of an older symbert-glue: the card says "not recorded"
        field = f"aggregates.tasks.{name}.baseline"
        baseline = mapping(path, field, task["baseline"])
        for key in ("majority", "chance"):  # what the card's columns show: numbers in the score's range
            number(path, f"{field}.{key}", baseline.get(key), *ranges[name])
        number(path, f"{field}.margin", baseline.get("margin"), 0.0)
        boolean(path, f"{field}.did_not_learn", baseline.get("did_not_learn"))
        check_dev_set_baseline(path, field, name, baseline)
        if "standard_error" in baseline:  # symbert-glue's record: the margin and verdict follow from it
            verdict = learning_verdict(task, baseline)
            for key in ("best", "margin", "did_not_learn"):
                if key in baseline:
                    differs(path, f"{field}.{key}", baseline[key], verdict[key])
        else:  # the verdict the card shows is the mean against the better baseline and the margin it shows
            best = max(baseline["majority"], baseline["chance"])
            differs(
                path, f"{field}.did_not_learn", baseline["did_not_learn"], task["mean"] <= best + baseline["margin"]
            )
    for task, digest in mapping(path, "data_sha256", results.get("data_sha256") or {}).items():
        if digest is not None and not (isinstance(digest, str) and HEX_DIGEST.fullmatch(digest)):
            raise UserError(f"{path}: data_sha256.{task}={digest!r} is not a sha256 hex digest (64 of 0-9a-f) or null.")


ROUNDED_TOLERANCE = 0.05  # percent: how far a baseline recorded without its dev set's size may be (table rounding)
ROUNDED_DEV_EXAMPLES = 100_000  # the dev set such a baseline is checked against (shares to 0.001 percent)


def check_dev_set_baseline(path: Path, field: str, name: str, baseline: dict) -> None:
    """Refuse a score's baselines that no dev set gives (`possible_baseline`: all zeros for an accuracy, a chance
    accuracy other than 1/k): with the dev set's size (symbert-glue's record) the majority, chance and standard error
    exactly, without it (an older or hand-made file) the majority and chance as rounded for a table."""
    recorded = "standard_error" in baseline and "n" in baseline
    if "standard_error" in baseline:
        number(path, f"{field}.standard_error", baseline["standard_error"], 0.0)
    if recorded:
        number(path, f"{field}.n", baseline["n"], 1, DEV_EXAMPLES_MAX, integer=True)
    size = baseline["n"] if recorded else ROUNDED_DEV_EXAMPLES
    possible = possible_baseline(score_task(name), name, {**baseline, "n": size})
    keys = ("majority", "chance", "standard_error") if recorded else ("majority", "chance")
    for key in keys:
        if not math.isclose(
            baseline[key], possible[key], rel_tol=0.0, abs_tol=TOLERANCE if recorded else ROUNDED_TOLERANCE
        ):
            dev_set = f"{size} labels" if recorded else "labels"
            raise UserError(
                f"{path}: {field}.{key}={baseline[key]!r} is no dev set's baseline: {dev_set} with its majority and "
                f"chance give {possible[key]:.6g} (a majority at least 1/k of an accuracy, chance 1/k, as symbert-glue "
                "computes them)."
            )


def check_runs(path: Path, results: dict) -> None:
    """The per-run metrics (`runs`: {task: {seed: metrics}}, fractions, as symbert-glue measured them): each in its
    metric's range (accuracy and F1 in [0, 1], correlations in [-1, 1]), and a run's `score` (percent) the score the
    file holds for that task and seed, where it holds one."""
    runs = mapping(path, "runs", results.get("runs") or {})
    scores = results["scores"]
    for task, by_seed in runs.items():
        if task not in TASKS:
            raise UserError(f"{path}: runs has {task!r}, which is not a task of the task table ({', '.join(TASKS)}).")
        spec = TASKS[task]
        for seed, metrics in mapping(path, f"runs.{task}", by_seed).items():
            for key, value in mapping(path, f"runs.{task}.{seed}", metrics).items():
                field = f"runs.{task}.{seed}.{key}"
                if key == "score":
                    number(path, field, value, *score_ranges()[spec.scores[0].name])
                    if seed in scores.get(spec.scores[0].name, {}):  # a run the file holds no score of is not shown
                        differs(path, field, value, scores[spec.scores[0].name][seed])
                elif key.startswith(CORRELATIONS):  # matthews_correlation, pearson, spearmanr
                    number(path, field, value, -1.0, 1.0)
                else:
                    number(path, field, value, 0.0, 1.0)
            try:  # the scores its metrics give (accuracy 0.10 is no score of 86.4)
                given = task_scores(task, metrics)
            except KeyError:  # a metric the score needs is not recorded: only what is recorded is checked
                continue
            for name, value in given.items():
                stored = scores.get(name, {}).get(seed)
                if stored is not None and not math.isclose(stored, value, rel_tol=0.0, abs_tol=TOLERANCE):
                    raise UserError(
                        f"{path}: scores.{name}.{seed}={stored!r} is not what runs.{task}.{seed}'s metrics give "
                        f"({value!r}, as symbert-glue computes it): a score is its run's."
                    )
