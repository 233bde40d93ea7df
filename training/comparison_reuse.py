"""Whether the folder of one type of a --compare holds a finished run of the same settings, to reuse on a rerun of
an interrupted comparison; a finished run of other settings is refused, naming each that differs."""

import json
import os
from dataclasses import asdict
from pathlib import Path, PurePath

import safetensors
import safetensors.torch
from transformers import TrainingArguments
from transformers.trainer import (
    TRAINER_STATE_NAME,  # defined there in 4.x, re-exported there in 5.x
)
from transformers.utils import SAFE_WEIGHTS_NAME

from ..cli import UserError
from ..json_files import load_json
from .arguments import DataArguments, ModelArguments, RunArguments
from .compat import overwrite_requested
from .reporting import LogHistoryError, read_log_history
from .summary import TrainingSummary

# Training arguments that change what a run trains: a finished run of a comparison is reused only if they are the same
COMPARED_TRAINING_ARGUMENTS = (
    "max_steps",
    "num_train_epochs",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "eval_steps",
    "seed",
    "data_seed",
    "bf16",
    "fp16",
)


# Run arguments that may change between the runs of one comparison: the list of types compared, the target, and
# whether the command trains or only summarises
NOT_COMPARED_RUN_ARGUMENTS = ("compare", "target_eval_loss", "summarize_only")

# Compared arguments that a version of transformers no longer has (5.x: warmup_ratio, a float --warmup_steps below 1
# now), with the value that changes nothing: a run of a version that lacks one counts as having that value
VANISHED_TRAINING_ARGUMENTS = {"warmup_ratio": 0.0}


# Recorded arguments that name paths: one inside the folder the comparison was in when it ran (its prepared blocks)
# also matches the same place in the comparison's folder now, so that a comparison copied or moved elsewhere is
# checked against its own files, never the original's
PATH_ARGUMENTS = (
    "run_arguments.recipe",
    "model_arguments.init_from",
    "model_arguments.teacher",
    "data_arguments.train_files",
    "data_arguments.tokenizer",
    "data_arguments.blocks_dir",
)


def recorded_root(recorded_output_dir: object, output_dir: Path, root: Path) -> PurePath | None:
    """The comparison's folder as it was when the run recorded `recorded_output_dir` (its training_arguments'
    output_dir): that path less this run's place in `root` (`output_dir` relative to it, e.g. `original`); None where
    the recorded path does not end with that place (nothing recorded can then be placed in this folder)."""
    place = output_dir.relative_to(root).parts
    if not isinstance(recorded_output_dir, str) or not recorded_output_dir:
        return None
    recorded = PurePath(os.path.normpath(recorded_output_dir)).parts
    if len(recorded) < len(place) or recorded[len(recorded) - len(place) :] != place:
        return None
    return PurePath(*recorded[: len(recorded) - len(place)])


def same_path(recorded: object, current: object, old_root: PurePath | None, root: Path) -> bool:
    """Whether the path (or list of paths) a run recorded names `current`: the same path, or the same place inside
    the comparison's folder, `old_root` when the run recorded it and `root` now."""
    if isinstance(recorded, list) and isinstance(current, (list, tuple)):
        return len(recorded) == len(current) and all(
            map(same_path, recorded, current, [old_root] * len(current), [root] * len(current))
        )
    if recorded == current:
        return True
    if old_root is None or not isinstance(recorded, str) or not isinstance(current, str) or not recorded:
        return False
    path = PurePath(os.path.normpath(recorded))
    if path.is_absolute() != old_root.is_absolute() or not path.is_relative_to(old_root):
        return False
    return PurePath(os.path.normpath(current)) == PurePath(os.path.normpath(root / path.relative_to(old_root)))


def compared_training_arguments(arguments: dict) -> dict:
    """The COMPARED_TRAINING_ARGUMENTS of `arguments` (a TrainingArguments' to_dict, or a summary's record of one);
    one that this or that version of transformers lacks has the value that changes nothing."""
    return {
        name: arguments[name] if name in arguments else VANISHED_TRAINING_ARGUMENTS.get(name)
        for name in COMPARED_TRAINING_ARGUMENTS
    }


def reused_run_problem(output_dir: Path) -> str | None:
    """Why the finished run in `output_dir` cannot be reused by a comparison (its weights or its log history missing
    or unreadable), or None."""
    state, weights = output_dir / TRAINER_STATE_NAME, output_dir / SAFE_WEIGHTS_NAME
    if not weights.is_file():
        return f"its weights ({SAFE_WEIGHTS_NAME}) are missing"
    try:
        with safetensors.safe_open(weights, framework="pt") as file:
            file.keys()
    except Exception as error:  # whatever a damaged file raises: name the file and say why
        return f"its {SAFE_WEIGHTS_NAME} is unreadable ({type(error).__name__}: {' '.join(str(error).split())[:200]})"
    try:
        read_log_history(state, load_json, finite_losses=False)  # a diverged run is reused as it ended
    except (OSError, ValueError, RecursionError, LogHistoryError) as error:
        return f"its {TRAINER_STATE_NAME} is missing or unreadable ({type(error).__name__}: {error})"
    return None


def finished_comparison_run(
    run_args: RunArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    root: str | Path | None = None,
) -> bool:
    """Whether the output folder of one type of a comparison holds a finished run of the same settings (to reuse);
    False with --overwrite_output_dir or without training_summary.json. A finished run of other settings is refused,
    naming each that differs with both values. `root`: the comparison's folder (default: the parent of the type's);
    a path the run recorded inside the folder the comparison was in then is compared by its place in it, so a
    comparison copied or moved to `root` is checked against its own files."""
    output_dir = Path(training_args.output_dir)
    root = output_dir.parent if root is None else Path(root)
    if overwrite_requested(run_args, training_args) or not (output_dir / TrainingSummary.FILE_NAME).is_file():
        return False
    try:
        summary = TrainingSummary.read(output_dir)
        recorded = {"model_arguments": summary.model_arguments, "data_arguments": summary.data_arguments}
        recorded["run_arguments"] = summary.run_arguments
        if missing := [name for name, value in recorded.items() if value is None]:
            raise UserError(f"{output_dir / TrainingSummary.FILE_NAME} lacks {', '.join(map(repr, missing))}.")
    except UserError as error:
        raise UserError(
            f"{error} Delete it, or pass --overwrite_output_dir true to train every type of the comparison again."
        ) from None
    saved = {
        **{f"{group}.{k}": v for group, arguments in recorded.items() for k, v in arguments.items()},
        **compared_training_arguments(summary.training_arguments),
    }
    old_root = recorded_root(summary.training_arguments.get("output_dir"), output_dir, root)
    arguments = json.loads(json.dumps(training_args.to_dict(), default=str))
    current = {
        **{f"model_arguments.{k}": v for k, v in asdict(model_args).items()},
        **{f"data_arguments.{k}": v for k, v in asdict(data_args).items()},
        # the list of types compared and the target may change between the runs of a comparison
        **{f"run_arguments.{k}": v for k, v in asdict(run_args).items() if k not in NOT_COMPARED_RUN_ARGUMENTS},
        **compared_training_arguments(arguments),
    }
    differences = [
        f"{name} is {saved.get(name)!r} there but {value!r} here"
        for name, value in current.items()
        if name != "run_arguments.overwrite_output_dir"
        and saved.get(name) != value
        and not (name in PATH_ARGUMENTS and same_path(saved.get(name), value, old_root, root))
    ]
    if differences:
        raise UserError(
            f"{training_args.output_dir} holds a finished run of other settings than this comparison: "
            f"{'; '.join(differences)}. Pass --overwrite_output_dir true to train every type again, or choose another "
            "--output_dir."
        )
    if problem := reused_run_problem(Path(training_args.output_dir)):
        raise UserError(
            f"{training_args.output_dir} holds a finished run of this comparison, but {problem}, so its results "
            "cannot be reused; pass --overwrite_output_dir true to train every type again, or move that folder away "
            "to train this type again."
        )
    return True
