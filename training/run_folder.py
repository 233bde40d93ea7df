"""The run folder of symbert-pretrain, its writer beside its reader: its lock, the atomic checkpoints and final model
(written into staging folders, then moved into place, so each appears complete or not at all), which checkpoint a
rerun resumes from (damaged ones skipped), what --overwrite_output_dir deletes, what a failed run leaves, and whether a
folder holds a finished run to reuse (its training summary: training/summary.py)."""

import json
import os
import pickletools
import re
import shutil
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

import safetensors
import safetensors.torch
import torch
from accelerate.utils.constants import FSDP_MODEL_NAME
from accelerate.utils.constants import OPTIMIZER_NAME as FSDP_OPTIMIZER_NAME  # optimizer.bin, optimizer_0/
from filelock import FileLock, Timeout
from transformers import Trainer, TrainerCallback, TrainerState, TrainingArguments
from transformers.trainer import (
    OPTIMIZER_NAME,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    safe_globals,  # defined there in 4.x, re-exported there in 5.x
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_NAME

from .. import SymBertConfig
from ..cli import UserError
from ..files import write_failure
from ..loading_symbert import BUNDLE_FILES
from .arguments import DataArguments, ModelArguments, RunArguments
from .blocks import load_position
from .compat import overwrite_requested, rotate_checkpoints_in
from .reporting import plot_losses, write_metrics
from .summary import TrainingSummary

STAGING_DIR = ".checkpoint-in-progress"  # not "checkpoint-*": neither resume nor save_total_limit counts it


FINAL_STAGING_DIR = ".final-model-in-progress"  # the final model, before it is moved into the output folder


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


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (a part missing or unreadable, weights with a NaN or inf), or None when every part loads as the
    Trainer will load it: JSON, safetensors, and torch.load(weights_only=True), so nothing unpickles code. The model
    and optimizer parts are those of the engine that wrote it (checkpoint_parts): the Trainer's own, FSDP's or
    DeepSpeed's; the parts that only torch's or DeepSpeed's own loaders read (which unpickle objects) are checked as
    far as can be without unpickling them."""
    checkpoint = Path(checkpoint)
    rng_states = sorted(path.name for path in checkpoint.glob("rng_state*.pth")) or ["rng_state.pth"]
    positions = sorted(path.name for path in checkpoint.glob("data_position_rank*.json"))  # none before they existed
    parts = {
        TRAINER_STATE_NAME: read_json,
        CONFIG_NAME: read_json,
        **checkpoint_parts(checkpoint),
        **{name: load_state for name in rng_states},  # rng_state.pth, or one rng_state_K.pth per process
        **{name: load_position for name in positions},  # where each process's data stands (training/blocks.py)
    }
    for name, load in parts.items():
        path = checkpoint / name
        if not (path.is_dir() if name.endswith("/") else path.is_file()):
            return f"{name} is missing"
        try:
            load(path)
        except NonFiniteWeight as error:
            return f"{name} holds {error}"
        except Exception as error:  # whatever a damaged file raises: name the file and say why
            reason = " ".join(str(error).split())[:200]
            return f"{name} is unreadable ({type(error).__name__}: {reason})"
    state = read_json(checkpoint / TRAINER_STATE_NAME)
    named = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", checkpoint.name)
    step = state.get("global_step") if isinstance(state, dict) else None
    if named and step != int(named.group(1)):  # a resume would go on from another step's state with these weights
        return f"{TRAINER_STATE_NAME} says global_step {step!r}, not {named.group(1)}"
    for name in positions:  # (a position of an older version names no step)
        if load_position(checkpoint / name).get("step", step) != step:
            return f"{name} is at step {load_position(checkpoint / name)['step']}, not {step}"
    return None


def checkpoint_parts(checkpoint: Path) -> dict[str, Callable[[Path], object]]:
    """{name: check} of the weights, optimizer and scheduler of `checkpoint` (a folder's name ends with /), as the
    engine that saved it writes them:

    - the Trainer (DDP or one process): model.safetensors, optimizer.pt, scheduler.pt;
    - FSDP with full state dicts: pytorch_model_fsdp.bin (what a resume loads) and optimizer.bin, both written by
      the first process, with model.safetensors and scheduler.pt;
    - FSDP with sharded state dicts: the folders pytorch_model_fsdp_0/ and optimizer_0/ of torch's distributed
      checkpoint (DCP), with scheduler.pt; no model.safetensors;
    - DeepSpeed: global_stepN/ (its model, optimizer and scheduler states, one optimizer file per process) named by
      the file `latest`; model.safetensors except under ZeRO-3 without gathered weights, and scheduler.pt only when
      DeepSpeed does not hold the scheduler, so each is checked when it is there."""
    if (checkpoint / "latest").exists() or any(checkpoint.glob("global_step*")):
        optional = [name for name in (SAFE_WEIGHTS_NAME, SCHEDULER_NAME) if (checkpoint / name).exists()]
        return {"latest": check_deepspeed_checkpoint, **{name: TRAINER_PARTS[name] for name in optional}}
    if any(checkpoint.glob(f"{FSDP_MODEL_NAME}*")):
        if (checkpoint / f"{FSDP_MODEL_NAME}_0").is_dir():
            folders = (f"{FSDP_MODEL_NAME}_0/", f"{FSDP_OPTIMIZER_NAME}_0/")
            return {**dict.fromkeys(folders, check_distributed_checkpoint), SCHEDULER_NAME: load_state}
        return {
            SAFE_WEIGHTS_NAME: load_finite_weights,
            f"{FSDP_MODEL_NAME}.bin": load_state,
            f"{FSDP_OPTIMIZER_NAME}.bin": load_state,
            SCHEDULER_NAME: load_state,
        }
    return dict(TRAINER_PARTS)


class NonFiniteWeight(ValueError):
    """A weights file that reads, but holds a NaN or infinite value: a run resumed from it trains NaNs."""


def load_finite_weights(path: Path) -> None:
    """Load a safetensors weights file; raises NonFiniteWeight naming the first tensor with a NaN or inf."""
    for name, tensor in safetensors.torch.load_file(path).items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            kind = "NaN" if torch.isnan(tensor).any() else "infinite"
            raise NonFiniteWeight(f"a {kind} value in {name}")


def read_json(path: Path) -> object:
    return json.loads(path.read_text())


def load_state(path: Path) -> None:
    with safe_globals():  # RNG states hold numpy arrays, which the Trainer allows the same way
        torch.load(path, map_location="cpu", weights_only=True)


TRAINER_PARTS = {SAFE_WEIGHTS_NAME: load_finite_weights, OPTIMIZER_NAME: load_state, SCHEDULER_NAME: load_state}


def check_distributed_checkpoint(folder: Path) -> None:
    """A folder of torch.distributed.checkpoint: its .metadata is a pickle that torch loads with plain pickle.load,
    so it is only parsed here (pickletools reads its opcodes, it executes none): it must be whole, and every data
    file it names (__R_K.distcp, written by process R) must be there and not empty."""
    metadata = folder / ".metadata"
    if not metadata.is_file():
        raise FileNotFoundError(".metadata is missing")
    try:
        strings = [arg for _, arg, _ in pickletools.genops(metadata.read_bytes()) if isinstance(arg, str)]
    except ValueError as error:  # a truncated file ends before its STOP opcode
        raise ValueError(f".metadata is not a whole pickle ({error})") from None
    data_files = {name for name in strings if re.fullmatch(r"__\d+_\d+\.distcp", name)}
    if not data_files:
        raise ValueError(".metadata names no data file")
    for name in sorted(data_files):
        if not (folder / name).is_file() or (folder / name).stat().st_size == 0:
            raise FileNotFoundError(f"{name} is missing or empty")


def check_deepspeed_checkpoint(latest: Path) -> None:
    """DeepSpeed's `latest` names the folder of its states (global_stepN); that folder holds its model states and one
    optimizer-state file per process (zero_pp_rank_R_...optim_states.pt, R from 0). DeepSpeed loads them with
    weights_only=False, so they are not unpickled here: each must be a whole torch.save archive (a zip whose every
    member passes its CRC check)."""
    tag = latest.read_text().strip()
    folder = latest.parent / tag
    if not tag or not folder.is_dir():
        raise FileNotFoundError(f"it names {tag!r}, which is not a folder of the checkpoint")
    states = sorted(folder.glob("*.pt"))
    if not any(path.name.endswith("model_states.pt") for path in states):
        raise FileNotFoundError(f"{tag}/ holds no model states (*model_states.pt)")
    ranks = sorted(
        int(match.group(1))
        for path in states
        if path.name.endswith("optim_states.pt") and (match := re.search(r"zero_pp_rank_(\d+)_", path.name))
    )
    if not ranks or ranks != list(range(len(ranks))):
        raise FileNotFoundError(f"{tag}/ holds optimizer states of processes {ranks}, not of 0 to N-1")
    for path in states:
        with zipfile.ZipFile(path) as archive:
            if (damaged := archive.testzip()) is not None:
                raise ValueError(f"{tag}/{path.name}: {damaged} fails its CRC check")


# Config fields that say how a config was saved, not what model it describes (use_cache: a decoder's runtime flag,
# which the Trainer turns off while it trains): a resumed run may differ in these only
BOOKKEEPING_CONFIG_FIELDS = frozenset(
    {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "model_type"}
    | {"use_cache"}
)


def check_checkpoint_matches(checkpoint: str | Path, config: SymBertConfig) -> None:
    """A resumed run must train the same model as the checkpoint: every field of its config but the bookkeeping ones
    (activation, sizes, dropout, attention type, initialisation, ...) as this run's; each that differs is named, with
    both values, before anything is trained."""
    try:
        saved = SymBertConfig.from_pretrained(checkpoint).to_dict()
    except (OSError, ValueError) as error:  # a config this version cannot read, or one its checks refuse
        raise UserError(f"Cannot resume from {checkpoint}: its {CONFIG_NAME} cannot be read ({error}).") from None
    ours = config.to_dict()
    differences = [
        f"its {name} is {saved.get(name)!r} but this run's is {ours.get(name)!r}"
        for name in sorted(set(saved) | set(ours), key=lambda name: (name != "attention_type", name))
        if name not in BOOKKEEPING_CONFIG_FIELDS and saved.get(name) != ours.get(name)
    ]
    if differences:
        raise UserError(
            f"Cannot resume from {checkpoint}: {'; '.join(differences)}. Use the same arguments as the interrupted "
            "run, or another output_dir."
        )


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


def write_error(error: OSError, path: Path, what: str) -> UserError:
    """A write that failed (OSError: a full disk, a read-only folder...), as one line naming the path, the error and the
    free space on its disk."""
    folder = next((parent for parent in [path, *path.parents] if parent.is_dir()), Path("."))
    try:
        free = f"{shutil.disk_usage(folder).free / 2**30:.2f} GiB free on its disk"
    except OSError:
        free = "free space unknown"
    reason = error.strerror or str(error) or type(error).__name__
    return UserError(
        f"Cannot write {what}: {path}: {reason} ({free}); nothing in place was replaced and the checkpoints are kept: "
        "free some space (or fix the cause) and run the same command again to finish."
    )


def training_finished_at(checkpoint: str | Path, training_args: TrainingArguments) -> bool:
    """Whether `checkpoint` is at the run's last step: max_steps, or (training by epochs) the step count the
    checkpoint's own state gives."""
    state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text())
    last_step = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return last_step > 0 and state["global_step"] >= last_step


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
            raise write_error(failed, Path(failed.filename or staged), f"checkpoint {name}") from None
        finally:
            self.staging = False
        self.accelerator.wait_for_everyone()
        if self.state.best_model_checkpoint == staged:  # load_best_model_at_end: the path it will have
            self.state.best_model_checkpoint = final
            if self.args.should_save:
                self.state.save_to_json(os.path.join(staged, TRAINER_STATE_NAME))
        if self.args.should_save:
            if os.path.isdir(final):  # the same step of an earlier run that resumed from an older checkpoint
                shutil.rmtree(final)
            os.replace(staged, final)
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
            for path in sorted(staging.iterdir()):
                if path.is_dir() and (output_dir / path.name).is_dir():  # a folder of an earlier finish (1_Pooling)
                    shutil.rmtree(output_dir / path.name)
                os.replace(path, output_dir / path.name)
            staging.rmdir()
        except Exception as error:
            shutil.rmtree(staging, ignore_errors=True)  # what was staged: the space it takes is given back
            if (failed := write_failure(error)) is None:
                raise
            raise write_error(failed, Path(failed.filename or staging), "the final model") from None

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
        raise write_error(error, Path(output_dir) / TrainingSummary.FILE_NAME, "the training summary") from None
