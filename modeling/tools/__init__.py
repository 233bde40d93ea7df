"""The `symbert-*` commands that work on saved models (parameter table, symmetry analysis, ONNX and BERT exports) and
the fresh-process loader. They sit beside the model, not in the folder that save_pretrained copies.

Below: what the commands that read a saved folder (`symbert-to-bert`, `symbert-onnx`, `symbert-symmetry`) share, so
that each refuses a bad folder or output path in the same one line before anything is built or written: the output
path's checks, the weights files' headers against config.json (read, not loaded: a config asking for 100,000 layers
is refused in milliseconds, not built for minutes), and the loading of the model itself."""

import glob
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, PretrainedConfig

from ..cli import UserError, missing_local_path
from ..files import model_card_license, write_failure
from ..json_files import load_json
from ..loading_symbert import INTEGER_DTYPES

# ------------------------------------------------------------------------------------------------ output paths


ALLOWED_OUTPUTS = {
    "file": "the path of a file (an existing file is replaced)",
    "folder": "a folder (made if missing)",
    "new folder": "a new or empty folder",
}


def check_output(path: str | Path, argument: str, kind: str) -> Path:
    """Refuse, before anything is read or written, an output path that cannot be one: a symbolic link (a write there
    would go through it, or replace it), a path inside a file (or inside a broken link), or an existing path of the
    other kind. `kind`: "file" (an existing file is replaced), "folder" (files are written into it) or "new folder"
    (must not exist, or be an empty folder). A missing parent is no error: `created_parents` makes it."""
    path = Path(path)
    shown = f"{argument}={str(path)!r}"
    if path.is_symlink():
        raise UserError(f"{shown} is a symbolic link; allowed: {ALLOWED_OUTPUTS[kind]}, not a link.")
    if blocked := next((p for p in path.absolute().parents if os.path.lexists(p) and not p.is_dir()), None):
        what = "a broken symbolic link" if is_broken_link(blocked) else "a file"
        raise UserError(f"{shown} lies inside {str(blocked)!r}, which is {what}; choose a new path.")
    if kind == "new folder" and path.exists() and not (path.is_dir() and not any(path.iterdir())):
        raise UserError(f"{shown} exists and is not an empty folder; choose a new path.")
    if kind == "folder" and path.exists() and not path.is_dir():
        raise UserError(f"{shown} is a file, not a folder; choose a folder.")
    if kind == "file" and path.exists() and not path.is_file():
        raise UserError(f"{shown} is a folder (or another non-file); give the path of a file.")
    return path


def staging_folder(output: Path, suffix: str) -> Path:
    """A new hidden sibling of `output` to write it in before the rename that makes it appear complete:
    `.NAME.PID-XXXXXXXX<suffix>`, PID this process's, with the mode a new folder gets (mkdtemp's 0700 would become
    the output's). Staging folders of the same naming left beside it by a process that is gone (a killed run) are
    removed first, each named in a notice; one whose process still runs is left to it; one without a process id (of
    an older version) is named for the user to remove."""
    pattern = re.compile(rf"\.{re.escape(output.name)}\.(?:(\d+)-)?[A-Za-z0-9_]+{re.escape(suffix)}")
    for path in sorted(output.parent.glob(f".{glob.escape(output.name)}.*{suffix}")):
        if not (match := pattern.fullmatch(path.name)) or not path.is_dir() or path.is_symlink():
            continue
        if match.group(1) is None:
            print(f"notice: {path} was left by an earlier, stopped run (it is not complete); remove it.")
        elif not process_exists(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            print(f"notice: removed {path}, left incomplete by a stopped run (process {match.group(1)}).")
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.{os.getpid()}-", suffix=suffix, dir=output.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)
    return staging


def move_into_place(staging: Path, output: Path, doing: str) -> None:
    """Rename the complete `staging` folder to `output` (atomic: it replaces an empty folder); an output that appeared
    meanwhile with something in it is a UserError, `doing` saying what ("converting")."""
    try:
        os.rename(staging, output)
    except OSError as error:
        raise UserError(f"output={str(output)!r} appeared while {doing}; nothing was written.") from error


def move_into(path: Path, folder: Path) -> None:
    """Rename `path` into `folder` under its own name; a folder there of that name (an earlier run's, or one a
    stopped move left) is replaced whole."""
    target = folder / path.name
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    os.replace(path, target)


def move_entries(staging: Path, folder: Path) -> None:
    """Each entry of the complete `staging` folder moved into the existing `folder` (`move_into`), then `staging`
    removed: each entry appears complete, and a move that stopped halfway is finished by the next, whose entries
    replace the ones it moved."""
    for path in sorted(staging.iterdir()):
        move_into(path, folder)
    staging.rmdir()


def first_non_finite(tensors) -> str | None:
    """The name of the first floating-point tensor of (name, tensor) pairs that holds NaN or an infinity, or None."""
    return next((name for name, tensor in tensors if tensor.is_floating_point() and not tensor.isfinite().all()), None)


def process_exists(pid: int) -> bool:
    """Whether a process of that id runs (one of another user's counts: it may be the writer)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # past the system's process ids: not one of its processes
        return False
    return True


def is_broken_link(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


@contextmanager
def created_parents(folder: str | Path) -> Iterator[Path]:
    """`folder` made with its missing parents for the block, and those it made removed again (when empty) if the
    block raises: a refused or failed command leaves no folder behind."""
    folder = Path(folder).absolute()
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a read-only or full disk, no permission
        raise UserError(f"Cannot make the folder {str(folder)!r}: {error.strerror or error}.") from None
    try:
        yield folder
    except BaseException:
        for made in missing:  # deepest first
            try:
                made.rmdir()
            except OSError:  # not empty (something else wrote there) or already gone
                break
        raise


def replace_folder(staging: Path, output: Path, suffix: str, doing: str) -> None:
    """The existing folder `output` replaced by the complete `staging`: renamed aside under a staging name (one that
    `staging_folder` clears once this process is gone), the new one renamed in, the old removed. Killed in between,
    `output` is missing and the next run writes it again; at no moment is it half-written."""
    aside = output.with_name(f".{output.name}.{os.getpid()}-replaced{suffix}")
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(output, aside)
    try:
        move_into_place(staging, output, doing)
    except BaseException:
        if not os.path.lexists(output):
            os.rename(aside, output)  # the old folder back in place
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def written_folder(output: Path, suffix: str, what: str, doing: str, existing: str | None = None) -> Iterator[Path]:
    """A hidden staging folder to write the folder `output` in (`staging_folder`, with `output`'s missing parents
    made: `created_parents`), renamed to `output` when the block ends and removed if it raises: `output` appears
    only complete. A write that fails for a full disk or a file-size limit is one line naming `what` was written
    ("the export"), the error and the free space; `doing` ("exporting") names the work for an output that appeared
    meanwhile (`move_into_place`). An `output` that exists is refused unless empty, or with `existing`="replace"
    put aside and removed after the rename (`replace_folder`), or with `existing`="merge" kept, the staged entries moved into it
    (`move_entries`: a run folder that holds other things, whose model files each appear complete)."""
    with created_parents(output.parent):
        staging = staging_folder(output, suffix)
        try:
            try:
                yield staging
            except Exception as error:  # a full disk or a file-size limit, as each writer reports it
                if (failure := write_failure(error)) is None:
                    raise
                free = shutil.disk_usage(staging.parent).free / 2**30
                raise UserError(
                    f"Cannot write {what} next to {str(output)!r}: {failure.strerror or failure} ({free:.2f} GiB "
                    "free on its disk); nothing was written."
                ) from error
            if existing == "merge" and output.is_dir():
                move_entries(staging, output)
            elif existing == "replace" and output.is_dir() and not output.is_symlink():
                replace_folder(staging, output, suffix, doing)
            else:
                move_into_place(staging, output, doing)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ weights headers

LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")
# tensor name suffix -> (the config fields of its dimensions); the sizes a BERT-style checkpoint shows directly
SIZED = {
    "embeddings.word_embeddings.weight": ("vocab_size", "hidden_size"),
    "embeddings.position_embeddings.weight": ("max_position_embeddings", "hidden_size"),
    "embeddings.token_type_embeddings.weight": ("type_vocab_size", "hidden_size"),
    "encoder.layer.0.intermediate.dense.weight": ("intermediate_size", "hidden_size"),
}


def weights_files(folder: Path) -> list[Path]:
    """The folder's *.safetensors files, or else its pytorch_model*.bin files (what the loaders read)."""
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))


def read_error(error: Exception) -> str:
    """The gist of a weights file's read error: its first line, up to the first sentence's end when that is long
    (torch's corrupt-zip message runs to several sentences of advice), or the error's type when it says nothing."""
    detail = (str(error).strip().splitlines() or [""])[0]
    if len(detail) > 120 and ". " in detail:
        detail = detail.split(". ", 1)[0]
    return detail or type(error).__name__


def unreadable(file: Path, error: Exception) -> UserError:
    return UserError(
        f"{file}: its weights cannot be read ({read_error(error)}); the file is truncated or corrupt: save or "
        "download the model again."
    )


# what reading a damaged weights file raises: safetensors' header errors; torch.load's of a cut or foreign file
READ_ERRORS = (SafetensorError, OSError, EOFError, RuntimeError, pickle.UnpicklingError)


def weights_headers(folder: Path) -> dict[str, tuple[str, tuple[int, ...], Path]]:
    """{tensor name: (dtype, shape, file)} of the folder's weights, from the safetensors headers (or a .bin file
    read onto the meta device): no tensor is loaded. A file cut short or not a weights file is a UserError naming
    it; a folder without weights too."""
    files = weights_files(folder)
    if not files:
        raise UserError(f"{folder} has no *.safetensors or pytorch_model*.bin weights")
    tensors = {}
    for file in files:
        try:
            if file.suffix == ".safetensors":
                with safe_open(file, framework="pt") as weights:
                    for name in weights.keys():
                        header = weights.get_slice(name)
                        dtype = header.get_dtype()
                        tensors[name] = (INTEGER_DTYPES.get(dtype, dtype), tuple(header.get_shape()), file)
            else:
                state = torch.load(file, map_location="meta", weights_only=True, mmap=True)
                tensors.update(
                    {n: (str(t.dtype).removeprefix("torch."), tuple(t.shape), file) for n, t in state.items()}
                )
        except READ_ERRORS as error:
            raise unreadable(file, error) from None
    return tensors


def check_config_against_weights(folder: str | Path, config: dict) -> None:
    """Refuse a config.json that disagrees with the folder's weights, read from their headers before any model is
    built: the number of layers (encoder.layer.N), and the sizes the embeddings and the first layer's feed-forward
    tensors show (hidden_size, vocab_size, max_position_embeddings, type_vocab_size, intermediate_size); and weights
    that are integers where the model's are floating point (unless the config is quantised). The word embeddings
    must be there, to show the sizes. A Hub id (no local folder) is left to the loader."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    tensors = weights_headers(folder)
    config_file = folder / "config.json"
    files = ", ".join(sorted({str(file) for *_, file in tensors.values()}))
    layers = sorted({int(match.group(1)) for name in tensors if (match := LAYER.search(name))})
    if not layers:
        raise UserError(
            f"{files} holds no encoder layers (no tensor named '*encoder.layer.N.*'): not a BERT-style model"
        )
    wanted = config.get("num_hidden_layers")
    if wanted != len(layers) or layers[-1] != len(layers) - 1:
        held = ", ".join(map(str, layers)) if len(layers) <= 6 else f"{layers[0]}, {layers[1]}, ..., {layers[-1]}"
        raise UserError(
            f"{config_file}: num_hidden_layers={wanted!r} disagrees with the weights in {files}, which hold "
            f"{len(layers)} layers (encoder.layer.N for N = {held}); allowed: {len(layers)}, layers 0 to "
            f"{len(layers) - 1}"
        )
    names = {suffix: next((n for n in tensors if n == suffix or n.endswith(f".{suffix}")), None) for suffix in SIZED}
    if names["embeddings.word_embeddings.weight"] is None:
        raise UserError(f"{files} holds no word embeddings ('*embeddings.word_embeddings.weight'): not a whole model")
    for suffix, name in names.items():
        if name is None:
            continue
        shape = tensors[name][1]
        for field, size in zip(SIZED[suffix], shape):
            if config.get(field) != size:
                raise UserError(
                    f"{config_file}: {field}={config.get(field)!r} disagrees with the weights in {files}, whose "
                    f"{name} has shape {list(shape)}; allowed: {size}"
                )
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if type(heads) is not int or heads < 1 or type(hidden) is not int or hidden % heads:
        raise UserError(f"{config_file}: num_attention_heads={heads!r}; allowed: a divisor of hidden_size={hidden!r}")
    if config.get("quantization_config"):
        return  # its integer tensors are the quantiser's to read
    for name, (dtype, _, file) in sorted(tensors.items(), key=lambda item: tensor_order(item[0])):
        if dtype in INTEGER_DTYPES.values() and is_weight(name):
            raise UserError(
                f"{file}: the tensor {name} holds integers ({dtype}); the model's weights are floating point (float32, float16 or "
                "bfloat16): save the checkpoint in one of those dtypes."
            )


def is_weight(name: str) -> bool:
    """Whether a checkpoint tensor is one of the model's floating-point weights (integer buffers such as old BERT
    checkpoints' position_ids are not; nor are tensors the model does not have)."""
    return bool(LAYER.search(name) or "embeddings." in name) and not name.endswith("_ids")


def tensor_order(name: str) -> tuple:
    """Embeddings first, then layer by layer (10 after 9), then the rest."""
    match = LAYER.search(name)
    return (1, int(match.group(1)), name) if match else (0 if "embeddings." in name else 2, 0, name)


def non_finite_tensor(folder: Path) -> tuple[str, Path] | None:
    """(name, file) of the first floating-point tensor of the folder's weights that holds a NaN or an infinity, read
    tensor by tensor (safetensors) or memory-mapped (a .bin file, as tensors only); None when all are finite."""
    for file in weights_files(folder):
        try:
            with ExitStack() as stack:
                if file.suffix == ".safetensors":
                    weights = stack.enter_context(safe_open(file, framework="pt"))
                    tensors = ((name, weights.get_tensor(name)) for name in weights.keys())
                else:
                    tensors = torch.load(file, map_location="cpu", weights_only=True, mmap=True).items()
                found = first_non_finite(tensors)
        except READ_ERRORS as error:
            raise unreadable(file, error) from None
        if found is not None:
            return found, file
    return None


def check_model_folder(name: str, argument: str) -> None:
    """What a command checks of a local model folder it reads (`argument` names it: "--teacher", "bert") before any
    model is built or anything is fitted or trained: its config.json against its weights' headers (a truncated,
    foreign or pickled-but-unreadable weights file, integer weights, 100,000 layers or sizes the weights do not
    have: `check_config_against_weights`), every weight finite, and its card's metadata readable (the licence it
    names is carried into what the command writes). A Hub id (no local folder) is left to the loader."""
    folder = Path(name)
    if not folder.is_dir():
        return
    try:
        config = load_json(folder / "config.json")
    except (OSError, ValueError, RecursionError) as error:
        raise UserError(f"{argument} {name!r}: its config.json cannot be read ({error}).") from None
    if not isinstance(config, dict):
        raise UserError(f"{argument} {name!r}: its config.json is not a JSON object.")
    check_config_against_weights(folder, config)
    if found := non_finite_tensor(folder):
        raise UserError(
            f"{found[1]}: the tensor {found[0]} holds NaN or infinite values; {argument} {name!r} must have finite "
            "weights: give the checkpoint before it diverged, or download the model again."
        )
    model_card_license(folder)


# ------------------------------------------------------------------------------------------------ loading


LOAD_ERRORS = (OSError, ValueError, RuntimeError, SafetensorError)  # what from_pretrained raises for a bad folder


def checked_config(name: str, argument: str, kinds: tuple[type, ...], needed: str) -> PretrainedConfig:
    """The config of the model `name` (a local folder or a Hub id; a folder's own code is never run), refused in one
    line naming `argument` ("--teacher"; "" for a positional) and `name` where it is missing, cannot be read, or is
    of none of `kinds` (`needed` words what is, after "is a 'bert' model": ", not a SymBERT one")."""
    if error := missing_local_path(name):
        raise error
    shown = f"{argument} {name!r}".strip()
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise UserError(f"{shown} is not a model folder with a readable config.json ({error}).") from error
    if not isinstance(config, kinds):
        raise UserError(f"{shown} is a {config.model_type!r} model{needed}.")
    return config


def load_checked(model_class, model: str, **kwargs):
    """`model_class.from_pretrained(model)`: the loader's refusals (a damaged or foreign weights file, integer
    weights, tensors of another shape) and non-finite weights as a UserError naming the folder (a local folder's
    before it is loaded: the loader's warning about them would be a second line)."""
    if Path(model).is_dir() and (found := non_finite_tensor(Path(model))):
        raise UserError(f"{model!r} holds non-finite weights ({found[0]}); nothing was written.")
    try:
        loaded = model_class.from_pretrained(model, **kwargs)
    except LOAD_ERRORS as error:
        raise UserError(f"Cannot load {model!r}: {' '.join(str(error).split())}") from error
    if bad := [name for name, tensor in loaded.state_dict().items() if not torch.isfinite(tensor).all()]:
        raise UserError(f"{model!r} holds non-finite weights ({', '.join(bad[:3])}); nothing was written.")
    return loaded
