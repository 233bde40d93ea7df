"""training_summary.json: what a finished pre-training run records about itself. It is written last into the run's
output folder (its presence marks the run as finished) and read back by a rerun of a comparison, the end-of-run
report of a run finished earlier, the convergence study and the release. Every value is checked on read: a bad one is
one line naming the file, the field and what is allowed."""

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from ..cli import UserError
from ..files import write_atomically
from ..json_files import boolean, load_json, mapping, number, text

FILE_NAME = "training_summary.json"
# The layout of the file. One without "summary_version" was written before the version was recorded, in layout 1.
VERSION = 1

# (key, minimum) of the counts every summary holds: what the card renders
REQUIRED_INTEGERS = (
    ("steps", 1),
    ("global_batch_size", 1),
    ("max_seq_length", 1),
    ("per_device_train_batch_size", 1),
    ("gradient_accumulation_steps", 1),
)
OPTIONAL_INTEGERS = (("world_size", 1), ("parameters", 1))  # checked where present (older runs lack them)
REQUIRED_KEYS = (*(key for key, _ in REQUIRED_INTEGERS), "final_eval_loss", "training_arguments")
# What the release needs of "training_arguments" (TrainingArguments.to_dict()), with the ranges of its numbers
TRAINING_ARGUMENT_KEYS = (
    "learning_rate",
    "warmup_steps",
    "lr_scheduler_type",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "bf16",
    "fp16",
    "seed",
    "use_cpu",
)
TRAINING_ARGUMENT_RANGES = (
    ("learning_rate", 0.0, math.inf),
    ("weight_decay", 0.0, math.inf),
    ("adam_beta1", 0.0, 1.0),
    ("adam_beta2", 0.0, 1.0),
    ("adam_epsilon", 0.0, math.inf),
    ("warmup_steps", 0.0, math.inf),
)


@dataclass(frozen=True, kw_only=True)
class TrainingSummary:
    """The record of a finished run, field for field as training_summary.json holds it (in this order). The fields
    with a default are those that summaries of older runs may lack."""

    FILE_NAME: ClassVar[str] = FILE_NAME
    VERSION: ClassVar[int] = VERSION

    recipe: str | None = None
    attention_type: str | None = None  # the type trained (--config_overrides may not differ)
    size: str | None = None
    parameters: int | None = None
    world_size: int = 1
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    global_batch_size: int
    max_seq_length: int
    steps: int
    passes: float | None = None  # over the training blocks (a stream: whole passes until one is done)
    final_eval_loss: float
    precision: str | None = None  # what the forward and backward ran in, as accelerate applied it
    # what symbert-release reads (it unpickles nothing): the data, the machine, every training argument
    run_arguments: dict | None = None
    model_arguments: dict | None = None
    data_arguments: dict | None = None
    # --init_from / --teacher: the model started from (with symbert-convert's record) and the teacher distilled toward
    made_from: dict | None = None
    hardware: str | None = None
    training_arguments: dict
    train_runtime: float | None = None  # seconds, of this run (after a resume: since it; 0 when only finishing)
    summary_version: int = VERSION

    def to_json(self) -> dict:
        """The file's JSON object: the version first, then the fields in order."""
        values = asdict(self)
        return {"summary_version": values.pop("summary_version"), **values}

    def write(self, folder: str | Path) -> Path:
        """Writes FOLDER/training_summary.json atomically (a killed run never leaves half of it); returns its path.
        A failed write raises its OSError."""
        path = Path(folder) / FILE_NAME
        content = json.dumps(self.to_json(), indent=2) + "\n"
        write_atomically(path, lambda file: file.write(content))
        return path

    @classmethod
    def read(cls, folder: str | Path) -> "TrainingSummary":
        """FOLDER/training_summary.json, every value checked (`from_json`); a file that is missing, not a regular
        file, not JSON or not a summary is a UserError naming it."""
        path = Path(folder) / FILE_NAME
        if not path.is_file():  # a named pipe is refused, never opened
            reason = "is not a regular file (a named pipe, device or folder)" if path.exists() else "does not exist"
            raise UserError(f"{path} {reason}.")
        try:
            data = load_json(path)
        except (OSError, ValueError, RecursionError) as error:  # unreadable, not UTF-8, not strict JSON, too deep
            raise UserError(f"{path} is not a training summary ({type(error).__name__}: {error}).") from None
        return cls.from_json(path, data)

    @classmethod
    def from_json(cls, path: Path, data: Any) -> "TrainingSummary":
        """The summary `data` read from `path`, refused unless it holds every required field, each of its type and
        range, and is of a layout this version reads."""
        if not isinstance(data, dict) or not isinstance(data.get("training_arguments", {}), dict):
            raise UserError(f'{path} is not a training summary: a JSON object whose "training_arguments" is an object.')
        version = number(path, "summary_version", data.get("summary_version", VERSION), 1, integer=True)
        if version > VERSION:
            raise UserError(
                f"{path} is a training summary of version {version}, newer than this symbert reads (up to {VERSION}); "
                "update symbert to read it."
            )
        missing = [key for key in REQUIRED_KEYS if key not in data]
        if not missing:
            arguments = data["training_arguments"]
            missing = [f"training_arguments.{key}" for key in TRAINING_ARGUMENT_KEYS if key not in arguments]
        if missing:
            raise UserError(
                f"{path} lacks {', '.join(map(repr, missing))}: it is the output of an older symbert-pretrain (the "
                "release reads the training arguments from this JSON file, never from the training_args.bin pickle); "
                'add the run\'s TrainingArguments.to_dict() under "training_arguments" or pre-train again.'
            )
        check_values(path, data)
        names = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


def check_values(path: Path, summary: dict) -> None:
    """Refuse a summary whose values could not be shown as measured: counts that are not positive integers, a size
    that is not a name, losses, runtimes and training arguments of the wrong type or range."""
    if summary.get("size") is not None:  # None: no preset (a model of --init_from's shape)
        text(path, "size", summary["size"])
    for key, low in REQUIRED_INTEGERS:
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
    for key in ("train_runtime", "passes"):
        if summary.get(key) is not None:
            number(path, key, summary[key], 0.0)
    for key in ("hardware", "attention_type", "recipe", "precision"):
        if summary.get(key) is not None:
            text(path, key, summary[key])
    arguments = summary["training_arguments"]
    for key, low, high in TRAINING_ARGUMENT_RANGES:
        number(path, f"training_arguments.{key}", arguments[key], low, high)
    number(path, "training_arguments.seed", arguments["seed"], 0, integer=True)
    text(path, "training_arguments.lr_scheduler_type", arguments["lr_scheduler_type"])
    for key in ("bf16", "fp16", "use_cpu"):
        boolean(path, f"training_arguments.{key}", arguments[key])
    for key in ("run_arguments", "model_arguments", "data_arguments", "made_from"):
        if summary.get(key) is not None:
            mapping(path, key, summary[key])
    if (teacher := (summary.get("made_from") or {}).get("teacher")) is not None:
        text(path, "made_from.teacher.name", mapping(path, "made_from.teacher", teacher).get("name"))
