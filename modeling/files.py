"""Writing files so that a killed or failed write never leaves a half-written one, and telling a full disk from other
errors, for every command: the tools, training and the release."""

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .cli import UserError
from .json_files import load_json


@contextmanager
def atomic_write_path(path: str | Path) -> Iterator[Path]:
    """A temporary path in `path`'s folder to write to, for writers that take a path (torch.onnx.export): it replaces
    `path` when the block ends, and is removed if the block raises."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: str | Path, write: Callable[[IO], object], binary: bool = False) -> None:
    """Writes through a temporary file in the same folder, so a killed run never leaves a half-written file."""
    with atomic_write_path(path) as temporary:
        with open(temporary, "wb") if binary else open(temporary, "w", newline="") as file:
            write(file)


def write_failure(error: BaseException) -> OSError | None:
    """`error` as the OSError of a write that failed, or None if it is not one. The writers of a checkpoint and of
    the final model report a full disk or a file-size limit (EFBIG, under `ulimit -f`) each in its own way:
    safetensors as a SafetensorError and tokenizers as a plain Exception, both ending "(os error N)", torch.save as
    a RuntimeError of its archive writer (inline_container.cc / PytorchStreamWriter), which names no errno."""
    if isinstance(error, OSError):
        return error
    message = " ".join(str(error).split())
    if match := re.search(r"\(os error (\d+)\)", message):
        number = int(match.group(1))
        return OSError(number, os.strerror(number))
    if isinstance(error, RuntimeError) and ("inline_container" in message or "PytorchStreamWriter" in message):
        return OSError(None, f"the write failed ({message[:200]})")
    return None


# sentence-transformers modules that hold no weights: a model made from a sentence-embedding BERT reuses them as they are
WEIGHT_FREE_MODULES = ("sentence_transformers.models.Pooling", "sentence_transformers.models.Normalize")
SENTENCE_TRANSFORMERS_CONFIGS = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (hex), read in chunks."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def write_error(error: OSError, path: Path, what: str, kept: str = "") -> UserError:
    """A write that failed (OSError: a full disk, a read-only folder...), as one line naming the path, the error and the
    free space on its disk; `kept`, what else the failure left as it was (" and the checkpoints are kept")."""
    folder = next((parent for parent in [path, *path.parents] if parent.is_dir()), Path("."))
    try:
        free = f"{shutil.disk_usage(folder).free / 2**30:.2f} GiB free on its disk"
    except OSError:
        free = "free space unknown"
    reason = error.strerror or str(error) or type(error).__name__
    return UserError(
        f"Cannot write {what}: {path}: {reason} ({free}); nothing in place was replaced{kept}: free some space (or "
        "fix the cause) and run the same command again to finish."
    )


def sentence_transformers_files(source: str | Path) -> dict[str, Path]:
    """{relative name: local file} of the sentence-transformers configuration of `source` (a model folder or Hub id)
    that a model made from it carries, so that it loads in sentence-transformers as `source` does: modules.json,
    the configs beside it and those of its modules. {} when `source` has none, or has a module with weights of its
    own (a Dense layer), which the new model could not reuse."""
    from transformers.utils import cached_file

    def local(name: str) -> Path | None:
        try:
            found = cached_file(str(source), name, _raise_exceptions_for_missing_entries=False)
        except (OSError, ValueError):
            return None
        return Path(found) if found is not None and Path(found).is_file() else None

    modules_file = local("modules.json")
    if modules_file is None:
        return {}
    try:
        modules = load_json(modules_file)
        paths = {module["type"]: module.get("path", "") for module in modules}
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError) as error:
        raise UserError(f"{source}: its modules.json is not a sentence-transformers module list ({error}).") from None
    for kind, path in paths.items():
        # a path is a folder's own subfolder by name, nothing else: the files it names are copied into outputs
        if not isinstance(path, str) or (path and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", path)):
            raise UserError(
                f"{source}: its modules.json gives module {kind!r} the path {path!r}; a module's path must be a "
                "subfolder name of the model folder (e.g. 1_Pooling), or empty."
            )
        if not isinstance(kind, str) or not kind.startswith("sentence_transformers.models."):
            raise UserError(
                f"{source}: its modules.json names the module {kind!r}, code of its own; only sentence-transformers' "
                "own modules (sentence_transformers.models.*) are carried."
            )
    if any(path and kind not in WEIGHT_FREE_MODULES for kind, path in paths.items()):
        return {}
    names = [*SENTENCE_TRANSFORMERS_CONFIGS, *(f"{path}/config.json" for path in paths.values() if path)]
    return {name: file for name in names if (file := local(name)) is not None}


def model_card_license(source: str | Path) -> str | None:
    """The `license` of a model folder's or Hub id's card (README.md metadata), or None where it names none (no card,
    no metadata, no licence). A card whose metadata cannot be read (malformed YAML, not a mapping, not UTF-8) is a
    UserError naming it: the licence a converted or distilled model carries must not be lost to a typo."""
    import yaml
    from huggingface_hub.repocard import metadata_load
    from transformers.utils import cached_file

    try:
        card = cached_file(str(source), "README.md", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):  # a Hub id that cannot be reached: the loader reports it
        return None
    try:
        metadata = metadata_load(card) if card is not None else None
    except (OSError, ValueError, yaml.YAMLError) as error:  # ValueError: not UTF-8, or not a mapping
        detail = " ".join(str(error).split())[:200]
        raise UserError(
            f"{card}: its metadata (the YAML block at the top) cannot be read ({detail}); fix it, so that the licence "
            "it names is carried."
        ) from None
    license_name = (metadata or {}).get("license")
    return license_name if isinstance(license_name, str) else None
