"""What the oldest supported transformers (4.54) lacks or names differently, in one place outside the remote-code
files (BUNDLE_FILES). Each item says which version lets it go: when pyproject.toml's lower bound passes it, delete the
item and keep its newer branch. (The huggingface_hub 0.x fallbacks, which only the release needs, are in
hub_cards/hub_compat.py.)"""

import math
from dataclasses import fields

from transformers import Trainer, TrainingArguments

__all__ = [
    "TRAINER_HAS_OVERWRITE",
    "overwrite_requested",
    "rotate_checkpoints_in",
    "trainer_argument_names",
    "warmup_ratio",
    "warmup_steps_counted",
]

# Goes with transformers 4.x: 5.x has the function, 4.x the Trainer's _rotate_checkpoints method.
try:
    from transformers.trainer_utils import rotate_checkpoints
except ImportError:
    rotate_checkpoints = None

TRAINING_ARGUMENT_FIELDS = {f.name: f for f in fields(TrainingArguments)}

# Goes with transformers 4.x: its TrainingArguments has --overwrite_output_dir, 5.x leaves it to scripts.
TRAINER_HAS_OVERWRITE = "overwrite_output_dir" in TRAINING_ARGUMENT_FIELDS


def overwrite_requested(run_args: object, training_args: TrainingArguments) -> bool:
    """--overwrite_output_dir, parsed into our arguments (transformers 5) or the Trainer's (4.x)."""
    return getattr(run_args, "overwrite_output_dir", False) or getattr(training_args, "overwrite_output_dir", False)


def rotate_checkpoints_in(trainer: Trainer, run_dir: str) -> None:
    """Delete the checkpoints beyond save_total_limit, as the Trainer does after a save."""
    if rotate_checkpoints is None:  # goes with transformers 4.x
        trainer._rotate_checkpoints(use_mtime=True, output_dir=run_dir)
    else:
        rotate_checkpoints(run_dir, trainer.args.save_total_limit, trainer.state.best_model_checkpoint, use_mtime=True)


def trainer_argument_names(settings: dict) -> dict:
    """Settings written in transformers 5's names, in this transformers' names. Goes with transformers 4.x, which has
    `warmup_ratio` (5.x: a ratio below 1 in `warmup_steps`) and `group_by_length` (5.x: `train_sampling_strategy`)."""
    settings = dict(settings)
    if "train_sampling_strategy" in settings and "train_sampling_strategy" not in TRAINING_ARGUMENT_FIELDS:
        settings["group_by_length"] = settings.pop("train_sampling_strategy") == "group_by_length"
    if "warmup_steps" in settings and TRAINING_ARGUMENT_FIELDS["warmup_steps"].type in (int, "int"):
        settings["warmup_ratio"] = settings.pop("warmup_steps")
    return settings


def warmup_ratio(training_args: TrainingArguments) -> float | None:
    """The warm-up as a share of the training steps, or None when it is given in steps. Goes with transformers 4.x's
    `warmup_ratio`."""
    warmup = training_args.warmup_steps
    return getattr(training_args, "warmup_ratio", None) or (warmup if warmup < 1 else None)


def warmup_steps_counted(training_arguments: dict, steps: int) -> int:
    """Warm-up steps as the Trainer counts them, from a run's saved training arguments: `warmup_steps` below 1 is a
    ratio in transformers 5; runs of 4.x saved `warmup_ratio`, which goes with it."""
    warmup, total = training_arguments["warmup_steps"] or 0, training_arguments.get("max_steps") or steps
    if warmup >= 1:
        return int(warmup)
    return math.ceil(total * (warmup or training_arguments.get("warmup_ratio") or 0))
