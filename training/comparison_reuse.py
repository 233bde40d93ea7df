"""Whether the folder of one type of a --compare holds a finished run of the same settings, to reuse on a rerun of
an interrupted comparison; a finished run of other settings is refused, naming each that differs."""

import json
from dataclasses import asdict
from pathlib import Path

import safetensors
import safetensors.torch
from transformers import TrainingArguments
from transformers.trainer import (
    TRAINER_STATE_NAME,  # defined there in 4.x, re-exported there in 5.x
)
from transformers.utils import SAFE_WEIGHTS_NAME

from ..cli import UserError
from .arguments import DataArguments, ModelArguments, RunArguments
from .compat import overwrite_requested
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


# Compared arguments that a version of transformers no longer has (5.x: warmup_ratio, a float --warmup_steps below 1
# now), with the value that changes nothing: a run of a version that lacks one counts as having that value
VANISHED_TRAINING_ARGUMENTS = {"warmup_ratio": 0.0}


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
        history = json.loads(state.read_text())["log_history"]
        if not isinstance(history, list) or not all(isinstance(entry, dict) for entry in history):
            raise TypeError("log_history is not a list of records")
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"its {TRAINER_STATE_NAME} is missing or unreadable ({type(error).__name__}: {error})"
    return None


def finished_comparison_run(
    run_args: RunArguments, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments
) -> bool:
    """Whether the output folder of one type of a comparison holds a finished run of the same settings (to reuse);
    False with --overwrite_output_dir or without training_summary.json. A finished run of other settings is refused,
    naming each that differs with both values."""
    output_dir = Path(training_args.output_dir)
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
    arguments = json.loads(json.dumps(training_args.to_dict(), default=str))
    current = {
        **{f"model_arguments.{k}": v for k, v in asdict(model_args).items()},
        **{f"data_arguments.{k}": v for k, v in asdict(data_args).items()},
        # the list of types compared and the target may change between the runs of a comparison
        **{f"run_arguments.{k}": v for k, v in asdict(run_args).items() if k not in ("compare", "target_eval_loss")},
        **compared_training_arguments(arguments),
    }
    differences = [
        f"{name} is {saved.get(name)!r} there but {value!r} here"
        for name, value in current.items()
        if name != "run_arguments.overwrite_output_dir" and saved.get(name) != value
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
