"""The run folder of symbert-pretrain, its writer beside its reader: its lock, the atomic checkpoints and final model
(written into staging folders, then moved into place, so each appears complete or not at all), which checkpoint a
rerun resumes from (damaged ones skipped), what --overwrite_output_dir deletes, what a failed run leaves, and whether a
folder holds a finished run to reuse (its training summary: training/summary.py)."""

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch
from filelock import FileLock, Timeout
from transformers import Trainer, TrainerCallback, TrainerState, TrainingArguments
from transformers.trainer import (
    TRAINER_STATE_NAME,  # defined there in 4.x, re-exported there in 5.x
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_NAME

from ..cli import UserError
from ..files import write_error, write_failure
from ..json_files import load_json
from ..loading_symbert import BUNDLE_FILES
from ..tools import move_entries, move_into
from .arguments import RunArguments
from .checkpoint_checks import checkpoint_problem
from .compat import overwrite_requested, rotate_checkpoints_in
from .reporting import plot_losses, write_metrics
from .summary import TrainingSummary

STAGING_DIR = ".checkpoint-in-progress"  # not "checkpoint-*": neither resume nor save_total_limit counts it


FINAL_STAGING_DIR = ".final-model-in-progress"  # the final model, before it is moved into the output folder


KEPT = " and the checkpoints are kept"  # what a failed write of the run folder leaves as it was
LOCK_FILE = ".pretrain.lock"

_T = TypeVar("_T")


def resume_checkpoint(run_args: RunArguments, training_args: TrainingArguments) -> str | None:
    """The checkpoint to resume from, or None for a fresh run; raises (and writes nothing) if the output folder
    holds a finished run and neither resume nor overwrite was asked, or if the checkpoint asked for is damaged."""
    if training_args.resume_from_checkpoint:
        checkpoint = Path(training_args.resume_from_checkpoint)
        if not (checkpoint / TRAINER_STATE_NAME).is_file():
            raise UserError(f"resume_from_checkpoint={str(checkpoint)!r} is not a Trainer checkpoint folder.")
        if problem := checkpoint_problem(checkpoint):
            raise UserError(f"resume_from_checkpoint={str(checkpoint)!r} cannot be resumed from: {problem}.")
        return str(checkpoint)
    output_dir = Path(training_args.output_dir)
    if overwrite_requested(run_args, training_args) or not output_dir.is_dir():
        return None
    if (output_dir / TrainingSummary.FILE_NAME).is_file():
        raise UserError(
            f"output_dir={str(output_dir)!r} already holds a finished run; pass --overwrite_output_dir true to train "
            "again from scratch there, --resume_from_checkpoint DIR to continue one, or choose another folder."
        )
    return last_complete_checkpoint(output_dir)  # an interrupted run resumes by itself


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The newest checkpoint-N folder of `output_dir` that can be resumed from, saying which newer ones it skips."""
    checkpoints = [
        path for path in Path(output_dir).iterdir() if re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", path.name)
    ]
    for checkpoint in sorted(checkpoints, key=lambda path: int(path.name.split("-")[1]), reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return str(checkpoint)
        print(f"Skipping {checkpoint}: {problem} (a run killed while saving it, a damaged file, or a diverged run).")
    return None


# What a run writes into its output folder, besides checkpoint-N folders: --overwrite_output_dir deletes these and
# nothing else (a user's notes.txt or checkpoint-backup/ stays).
RUN_FILES = (
    TrainingSummary.FILE_NAME,
    "metrics.csv",
    "metrics.json",
    "loss.png",
    TRAINER_STATE_NAME,
    # the final model: weights, config, code, tokenizer (transformers 4.x adds special_tokens_map.json and vocab.txt)
    SAFE_WEIGHTS_NAME,
    CONFIG_NAME,
    *BUNDLE_FILES,
    "training_args.bin",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
)


def run_file_names() -> set[str]:
    """The files and folders a run writes into its output folder, its temporary files and staging folder
    included."""
    return {*RUN_FILES, *(f".{name}.tmp" for name in RUN_FILES), STAGING_DIR, FINAL_STAGING_DIR}


def remove_stale_checkpoints(output_dir: str | Path) -> list[str]:
    """With --overwrite_output_dir, the old run's files must go: its checkpoints, or a later automatic resume would
    pick them up; its summary, which marks the folder as holding a finished run; its metrics, plot and final model.
    Only what a run writes goes (folders named checkpoint-<digits>, the files of RUN_FILES); returns their names."""
    deleted = []
    names = run_file_names()
    for path in sorted(Path(output_dir).iterdir()):
        ours = path.name in names or re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", path.name)
        if ours:
            remove_path(path)
            deleted.append(path.name)
    return deleted


@contextmanager
def output_folder_lock(output_dir: str | Path) -> Iterator[None]:
    """Holds OUTPUT_DIR/.pretrain.lock while the run uses the folder, so that a second run into it is refused at
    once. It is an OS lock (flock): a killed run releases it. A run that fails leaves no lock file, and a folder it
    did not change, or in which it saved no checkpoint, as it found it (remove_failed_run_leftovers)."""
    output_dir = Path(output_dir)
    lock_path = output_dir / LOCK_FILE
    new_folder, new_lock = not output_dir.exists(), not lock_path.exists()
    output_dir.mkdir(parents=True, exist_ok=True)
    found = folder_state(output_dir)
    if lock_path.is_symlink():  # flock would follow it to another file (or fail on a link to nothing)
        raise UserError(
            f"{lock_path} is a symbolic link (to {os.readlink(lock_path)}), where the run keeps its lock file; remove "
            "the link (it is no run's) and run again."
        )
    if lock_path.is_dir():
        raise UserError(
            f"{lock_path} is a folder, where the run keeps its lock file; move it away (it is no run's) and run again."
        )
    lock = FileLock(lock_path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise UserError(
            f"output_dir={str(output_dir)!r} is in use by another run (it holds {lock_path}); wait for that run to "
            "end or choose another --output_dir."
        ) from None
    try:
        yield
    except BaseException:
        remove_failed_run_leftovers(output_dir, found, new_folder, new_lock)
        raise
    finally:
        lock.release()


def folder_state(folder: str | Path) -> dict[str, tuple[int, int]]:
    """{name: (modification time, size)} of what `folder` holds, its lock file aside: what a run changed there."""
    state = {}
    for name in os.listdir(folder):
        if name != LOCK_FILE:
            try:
                status = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            state[name] = (status.st_mtime_ns, status.st_size)
    return state


def remove_failed_run_leftovers(
    output_dir: Path, found: dict[str, tuple[int, int]], new_folder: bool, new_lock: bool
) -> None:
    """After a run that failed (a user error, a divergence, an interrupt): a folder it did not change (`found`: its
    folder_state before) stays as it was, lock file included; otherwise its lock file goes, and if no checkpoint is
    left to resume from, so does every file of a run that it added there (metrics, TensorBoard logs...), and the
    folder itself if the run made it."""
    now = folder_state(output_dir)
    if now == found and not new_lock:
        return
    if not any(re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", name) for name in now):
        for name in (set(now) - set(found)) & (run_file_names() | {"runs"}):
            remove_path(output_dir / name)
    (output_dir / LOCK_FILE).unlink(missing_ok=True)
    if new_folder and not any(output_dir.iterdir()):
        output_dir.rmdir()


def remove_path(path: Path) -> None:
    """Remove a file, link or folder at `path`, if there is one (a staging folder a killed run left, or a file
    there in its place)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def training_finished_at(checkpoint: str | Path, training_args: TrainingArguments) -> bool:
    """Whether `checkpoint` is at the run's last step: max_steps, or (training by epochs) the step count the
    checkpoint's own state gives."""
    state = load_json(Path(checkpoint) / TRAINER_STATE_NAME)
    last_step = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return last_step > 0 and state["global_step"] >= last_step


def on_main_process(training_args: TrainingArguments, decide: Callable[[], _T]) -> _T:
    """`decide()` runs on the main process only; every process gets its result, or raises its UserError (any other
    error there ends the launch)."""
    outcome = [None, None]
    if training_args.process_index == 0:
        try:
            outcome = [decide(), None]
        except UserError as error:
            outcome = [None, error]
    if training_args.world_size > 1:
        torch.distributed.broadcast_object_list(outcome, src=0)
    result, error = outcome
    if error is not None:
        raise error
    return result


class AtomicCheckpoints:
    """A Trainer mixin (`class MyTrainer(AtomicCheckpoints, Trainer)`) whose checkpoints appear complete or not at
    all: each checkpoint-N is written into the staging folder, then renamed into the run folder."""

    staging = False  # while True, the Trainer's run folder is the staging folder: checkpoints are written there

    def save_checkpoint_extras(self, checkpoint: str) -> None:
        """Writes what a subclass keeps in every checkpoint besides the Trainer's parts, into the staged `checkpoint`
        folder (each process its own files)."""

    def _save(self, output_dir=None, state_dict=None):
        """The Trainer's save, without the Hub token in training_args.bin (a pickle of the arguments that the
        folder keeps in clear, whoever it is shared with); the run keeps its token for pushing."""
        token = self.args.hub_token
        self.args.hub_token = None
        try:
            return super()._save(output_dir, state_dict=state_dict)
        finally:
            self.args.hub_token = token

    def _get_output_dir(self, trial):
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, STAGING_DIR) if self.staging else run_dir

    def _save_checkpoint(self, model, trial):
        """The Trainer writes checkpoint-N into the staging folder; once every process has written its part (each
        its rng_state_K.pth), the main process renames it into the run folder. A checkpoint-N folder is therefore
        always complete: a run killed while saving leaves only the staging folder, which the next run removes."""
        run_dir = self._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staged, final = os.path.join(run_dir, STAGING_DIR, name), os.path.join(run_dir, name)
        self.staging = True
        try:
            super()._save_checkpoint(model, trial)
            os.makedirs(staged, exist_ok=True)
            self.save_checkpoint_extras(staged)
        except Exception as error:  # a full disk: the staged part goes, the checkpoints in place stay
            shutil.rmtree(os.path.join(run_dir, STAGING_DIR), ignore_errors=True)
            if (failed := write_failure(error)) is None:
                raise
            raise write_error(failed, Path(failed.filename or staged), f"checkpoint {name}", KEPT) from None
        finally:
            self.staging = False
        self.accelerator.wait_for_everyone()
        if self.state.best_model_checkpoint == staged:  # load_best_model_at_end: the path it will have
            self.state.best_model_checkpoint = final
            if self.args.should_save:
                self.state.save_to_json(os.path.join(staged, TRAINER_STATE_NAME))
        if self.args.should_save:
            move_into(Path(staged), Path(run_dir))  # replaces the same step of an earlier run resumed from before it
            os.rmdir(os.path.dirname(staged))
            rotate_checkpoints_in(self, run_dir)
        self.accelerator.wait_for_everyone()


class RemoveStaleCheckpoints(TrainerCallback):
    """--overwrite_output_dir: the old run's files go when training begins, that is once the Trainer has built its
    optimizer and scheduler from the arguments, so a value only they refuse leaves the old run untouched."""

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save:
            deleted = remove_stale_checkpoints(args.output_dir)
            if deleted:
                print(f"--overwrite_output_dir: deleted the earlier run's {', '.join(deleted)} from {args.output_dir}")


def save_final_model(trainer: Trainer, title: str, carried: dict[str, Path] | None = None) -> None:
    """The final model (weights, config, code, tokenizer, training arguments), the Trainer's state and the loss plot,
    written as a checkpoint is: into a staging folder of the output folder, then moved into place. A write that fails
    (a full disk) leaves the output folder as it was, and ends the run with one line naming the path and the free
    space; run again, the run then finishes from its last checkpoint."""
    output_dir = Path(trainer.args.output_dir)
    staging = output_dir / FINAL_STAGING_DIR
    failure = None
    try:
        if trainer.is_world_process_zero():
            remove_path(staging)
        trainer.save_model(str(staging), _internal_call=True)  # every process: sharded models gather there
    except Exception as error:  # a full disk, as each writer reports it (write_failure)
        failure = error

    def install():
        try:
            if failure is not None:
                raise failure
            trainer.state.save_to_json(str(staging / TRAINER_STATE_NAME))
            plot_losses(trainer.state.log_history, staging / "loss.png", title=title)
            for name, source in (carried or {}).items():  # {name: file} kept from the model it started from
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, staging / name)
            move_entries(staging, output_dir)  # a folder of an earlier finish (1_Pooling) is replaced whole
        except Exception as error:
            shutil.rmtree(staging, ignore_errors=True)  # what was staged: the space it takes is given back
            if (failed := write_failure(error)) is None:
                raise
            raise write_error(failed, Path(failed.filename or staging), "the final model", KEPT) from None

    on_main_process(trainer.args, install)
    if trainer.args.push_to_hub:  # as the Trainer's save_model() does
        trainer.push_to_hub(commit_message="Model save")


def restore_finished_training(trainer: Trainer, checkpoint: str) -> None:
    """The Trainer as training left it at `checkpoint`: its weights, and its state (step, log history); the metrics
    files rewritten from that history, as a resumed run's start rewrites them."""
    trainer._load_from_checkpoint(checkpoint)
    state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
    state.is_local_process_zero = trainer.is_local_process_zero()
    state.is_world_process_zero = trainer.is_world_process_zero()
    trainer.state = state
    if trainer.is_world_process_zero():
        write_metrics(state.log_history, trainer.args.output_dir)


def write_summary(summary: TrainingSummary, output_dir: str | Path) -> None:
    """The training summary, written last and atomically: its presence marks the folder as holding a finished run. A
    failed write is one line naming the path and the free space."""
    try:
        summary.write(output_dir)
    except OSError as error:
        raise write_error(error, Path(output_dir) / TrainingSummary.FILE_NAME, "the training summary", KEPT) from None
