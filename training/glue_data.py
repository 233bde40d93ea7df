"""GLUE data: the nine tasks with nyu-mll/glue's column names, label ids and splits, from the Hub or from a local folder.

A local `--data_dir` holds either one `save_to_disk` DatasetDict per task (`DIR/rte/dataset_dict.json`, ...) or the
original GLUE TSV files in their official layout (`DIR/RTE/train.tsv`, `DIR/RTE/dev.tsv`, `DIR/MNLI/dev_matched.tsv`,
`DIR/CoLA/train.tsv` without a header, ...). Either way the splits come out as the Hub's: same columns, same label ids.
"""

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

HUB_DATASET = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    text_columns: tuple[str, ...]  # one sentence or a pair
    label_names: tuple[str, ...] | None  # None: regression (stsb, scores 0-5)
    tsv_folder: str
    tsv_columns: dict  # nyu-mll/glue column -> TSV header name (or index for CoLA, whose TSVs have no header)
    eval_splits: tuple[str, ...] = ("validation",)

    @property
    def num_labels(self):
        return 1 if self.label_names is None else len(self.label_names)


TASKS = {
    "cola": GlueTask(("sentence",), ("unacceptable", "acceptable"), "CoLA", {"sentence": 3, "label": 1}),
    "sst2": GlueTask(("sentence",), ("negative", "positive"), "SST-2", {"sentence": "sentence", "label": "label"}),
    "mrpc": GlueTask(
        ("sentence1", "sentence2"), ("not_equivalent", "equivalent"), "MRPC",
        {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"},
    ),
    "qqp": GlueTask(
        ("question1", "question2"), ("not_duplicate", "duplicate"), "QQP",
        {"question1": "question1", "question2": "question2", "label": "is_duplicate"},
    ),
    "stsb": GlueTask(
        ("sentence1", "sentence2"), None, "STS-B", {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score"}
    ),
    "mnli": GlueTask(
        ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"), "MNLI",
        {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label"},
        eval_splits=("validation_matched", "validation_mismatched"),
    ),
    "qnli": GlueTask(
        ("question", "sentence"), ("entailment", "not_entailment"), "QNLI",
        {"question": "question", "sentence": "sentence", "label": "label"},
    ),
    "rte": GlueTask(
        ("sentence1", "sentence2"), ("entailment", "not_entailment"), "RTE",
        {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
    ),
    "wnli": GlueTask(
        ("sentence1", "sentence2"), ("not_entailment", "entailment"), "WNLI",
        {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"},
    ),
}  # fmt: skip
STSB_RANGE = (0.0, 5.0)
TSV_FILES = {"train": "train.tsv", "validation": "dev.tsv",
             "validation_matched": "dev_matched.tsv", "validation_mismatched": "dev_mismatched.tsv"}  # fmt: skip


def load_task(task, data_dir=None):
    """The task's train and eval splits as a DatasetDict, checked (splits, columns, labels) before any training."""
    spec = TASKS[task]
    splits = ("train", *spec.eval_splits)
    if data_dir is None:
        data = load_dataset(HUB_DATASET, task)
    else:
        saved, tsv = Path(data_dir) / task, Path(data_dir) / spec.tsv_folder
        if (saved / "dataset_dict.json").is_file():
            data = load_from_disk(str(saved))
        elif tsv.is_dir():
            data = DatasetDict({split: read_tsv(task, tsv / TSV_FILES[split]) for split in splits})
        else:
            raise FileNotFoundError(
                f"No {task} data in {data_dir}: expected a save_to_disk DatasetDict in {saved} "
                f"or the GLUE TSV files in {tsv}."
            )
    if not isinstance(data, DatasetDict):
        raise ValueError(f"{task}: expected a DatasetDict with splits {', '.join(splits)}, got a {type(data).__name__}.")
    missing = [split for split in splits if split not in data]
    if missing:
        raise ValueError(f"{task}: split(s) {', '.join(missing)} missing; the data have {', '.join(data)}.")
    data = DatasetDict({split: data[split] for split in splits})
    for split, dataset in data.items():
        check_split(task, split, dataset)
    return data


def read_tsv(task, path):
    """One GLUE TSV file as a Dataset with nyu-mll/glue's columns; label strings become the Hub's label ids."""
    spec = TASKS[task]
    if not path.is_file():
        raise FileNotFoundError(f"{task}: {path} is missing (GLUE TSV layout: {', '.join(TSV_FILES.values())}).")
    with open(path, encoding="utf-8", newline="") as file:
        # GLUE's TSVs hold unbalanced quotes: no quoting at all, as the official loaders read them.
        rows = list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = None if task == "cola" else rows.pop(0)
    positions = {}
    for column, source in spec.tsv_columns.items():
        if header is None:
            positions[column] = source
        elif source in header:
            positions[column] = header.index(source)
        else:
            raise ValueError(f"{task}: column {source!r} missing from {path}; its header is {header}.")
    columns = {column: [] for column in spec.tsv_columns}
    for row in rows:
        if len(row) <= max(positions.values()):
            continue  # a corrupted row (a few in QQP's train.tsv): skipped, as nyu-mll/glue does
        for column, position in positions.items():
            columns[column].append(row[position])
    try:
        columns["label"] = [parse_label(spec, value) for value in columns["label"]]
    except ValueError as error:
        raise ValueError(f"{task}: {path}: {error}") from None
    columns["idx"] = list(range(len(columns["label"])))
    return Dataset.from_dict(columns)


def parse_label(spec, value):
    if spec.label_names is None:
        return float(value)
    if value in spec.label_names:
        return spec.label_names.index(value)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"label {value!r} is neither an id nor one of {', '.join(spec.label_names)}") from None


def check_split(task, split, dataset):
    """Columns present and every label in the task's range: classes 0..n-1, or stsb's 0-5 similarity."""
    spec = TASKS[task]
    missing = [column for column in (*spec.text_columns, "label") if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{task} {split}: column(s) {', '.join(missing)} missing; its columns are {dataset.column_names}."
        )
    if len(dataset) == 0:
        raise ValueError(f"{task} {split}: the split is empty.")
    labels = np.asarray(dataset["label"])
    if spec.label_names is None:
        if labels.dtype.kind not in "iuf":
            raise ValueError(f"{task} {split}: labels must be numbers, got {labels.dtype} values such as {labels[0]!r}.")
        low, high = STSB_RANGE
        labels = labels.astype(float)
        bad = ~np.isfinite(labels) | (labels < low) | (labels > high)
        allowed = f"a similarity in [{low:g}, {high:g}]"
    else:
        if labels.dtype.kind not in "iu":
            raise ValueError(f"{task} {split}: labels must be class ids, got {labels.dtype} values such as {labels[0]!r}.")
        bad = (labels < 0) | (labels >= spec.num_labels)
        allowed = f"0..{spec.num_labels - 1} ({', '.join(spec.label_names)})"
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = labels[row].item()
        raise ValueError(
            f"{task} {split}: label {value!r} at row {row} is outside the task's range; allowed: {allowed}"
            + (" (test splits have no labels)" if value == -1 else "")
            + f"; {int(bad.sum())} bad label(s) in all."
        )
