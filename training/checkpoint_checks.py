"""Whether a checkpoint can be resumed from: every part a resume loads read as the Trainer (or FSDP, or DeepSpeed)
will read it, without unpickling anything, its weights finite, its trainer state and data positions at its own step;
and whether it holds the model this run trains."""

import pickletools
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import safetensors
import safetensors.torch
import torch
from accelerate.utils.constants import FSDP_MODEL_NAME
from accelerate.utils.constants import OPTIMIZER_NAME as FSDP_OPTIMIZER_NAME  # optimizer.bin, optimizer_0/
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
from ..json_files import load_json
from .data.blocks import load_position
from .reporting import LogHistoryError, checked_log_history


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
        TRAINER_STATE_NAME: load_json,
        CONFIG_NAME: load_json,
        **checkpoint_parts(checkpoint),
        **{name: load_state for name in rng_states},  # rng_state.pth, or one rng_state_K.pth per process
        **{name: load_position for name in positions},  # where each process's data stands (training/data/blocks.py)
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
    state = load_json(checkpoint / TRAINER_STATE_NAME)
    named = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", checkpoint.name)
    step = state.get("global_step") if isinstance(state, dict) else None
    # a resume would go on from another step's state with these weights; a step of 8.0 fails every resume later
    if named and (type(step) is not int or step != int(named.group(1))):
        return f"{TRAINER_STATE_NAME} says global_step {step!r}, not {named.group(1)} (an integer)"
    try:
        # what the resumed run writes to metrics.csv and reports: numbers (an eval loss turned NaN stops the run
        # before its checkpoint is saved, so no checkpoint holds one)
        checked_log_history(checkpoint / TRAINER_STATE_NAME, state)
    except LogHistoryError as error:
        if error.index is None:
            return f"{TRAINER_STATE_NAME} holds no log_history (a list of objects)"
        shown = repr(error.value) if error.field is None else f"{error.field} {error.value!r}"
        return f"{TRAINER_STATE_NAME} says log_history[{error.index}] {shown}, not {error.expected}"
    for name in positions:  # (a position of an older version names no step)
        if (saved := load_position(checkpoint / name).get("step", step)) != step:
            return f"{name} is at step {saved}, not {step}"
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
